"""``trunner quarantine``: list or purge the bad data a group's runners set aside."""

from __future__ import annotations

import argparse
import json

import trio
from rich.console import Console

from ..admin import as_dict
from ._client import _group_admin
from ._render import _ask, _shown, _when

__all__ = ["quarantine"]


async def quarantine(args: argparse.Namespace, out: Console) -> int:
    async with _group_admin(args) as admin:
        if args.action == "list":
            records = await admin.quarantined(args.count)
            if args.json:
                print(json.dumps([as_dict(r) for r in records], default=str))
                return 0
            if not records:
                out.print(f"nothing of group {args.group} was set aside", highlight=False)
                return 0
            # One block per record, readable at any width (reasons are sentences).
            out.print(f"bad data set aside in {args.group}:", highlight=False)
            for r in records:
                out.print(
                    f"\n{_shown(r.id)}  {_when(r.at)}  {_shown(r.source)}  {_shown(repr(r.item))}\n"
                    f"  reason: {_shown(r.reason)}\n  action: {_shown(r.action)}\n"
                    f"  by:     {_shown(r.instance)}",
                    highlight=False,
                    soft_wrap=True,
                    markup=False,
                )
            return 0
        count = await admin.quarantine_count()
        if not args.yes:
            answer = await trio.to_thread.run_sync(
                _ask, f"delete {count} quarantine records of {args.group}? [y/N] "
            )
            if answer is None or answer.strip().lower() not in ("y", "yes"):
                closed = " (stdin is closed; pass --yes)" if answer is None else ""
                out.print(f"nothing deleted{closed}")
                return 1
        out.print(f"deleted {await admin.purge_quarantine()} quarantine records", highlight=False)
        return 0
