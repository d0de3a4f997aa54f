"""``trunner cron``: list the cron schedules of a group, or fire one now."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from .._worker.serve import load_settings
from ..admin import as_dict
from ._client import _group_admin, _group_client
from ._render import _when

__all__ = ["cron"]


async def cron(args: argparse.Namespace, out: Console) -> int:
    tasks = load_settings(args.tasks).tasks if args.tasks else None
    if args.action == "fire":  # a dispatch: the client's
        async with _group_client(args, tasks) as client:
            if not args.name:
                out.print("fire which schedule? trunner cron fire GROUP NAME --tasks M:A")
                return 2
            task_id = await client.fire_cron(args.name)
            out.print(f"fired {args.name}: task {task_id}", highlight=False, soft_wrap=True)
            return 0
    async with _group_admin(args, tasks) as admin:
        entries = await admin.cron_entries()
    if args.json:
        print(json.dumps([as_dict(e) for e in entries]))
        return 0
    if not entries:
        out.print(f"no cron schedule known for {args.group} (pass --tasks)", highlight=False)
        return 0
    table = Table()
    for column in ("name", "expression", "task", "last fired", "next tick"):
        table.add_column(column)
    for e in entries:
        table.add_row(
            e.name, e.expression or "?", e.task or "?", _when(e.last_fired_at or 0.0),
            _when(e.next_fire_at or 0.0),
        )  # fmt: skip
    out.print(table)
    return 0
