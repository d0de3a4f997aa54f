"""``trunner pause``, ``resume`` and ``inspect``: a group as a whole, or the groups found."""

from __future__ import annotations

import argparse
import json
import time

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .._discovery import discover_groups
from ..admin import GroupInfo, as_dict
from ._client import _group_admin, _shared_redis
from ._render import _cell, _shown, _when

__all__ = ["inspect", "pause"]


async def pause(args: argparse.Namespace, out: Console) -> int:
    async with _group_admin(args) as admin:
        if args.command == "pause":
            changed = await admin.pause()
            info = await admin.inspect()
            said = (
                "paused: its runners stop fetching; running tasks go on"
                if changed
                else f"was paused already (since {_when(info.paused_since or 0.0)} UTC)"
            )
            if _unknown(info):  # a mistyped name would pause nobody, silently
                said += (
                    f"\nnote: nothing is known of group {args.group!r} on this Redis (no"
                    " instance, no message): runners of that name started later stay paused;"
                    " check the group name, --redis and the key prefix"
                )
        else:
            said = (
                "resumed: its runners fetch again"
                if await admin.resume()
                else "was not paused: nothing to resume"
            )
    out.print(f"group {args.group} {said}", highlight=False, soft_wrap=True)
    return 0


def _unknown(info: GroupInfo) -> bool:
    """Whether nothing at all is known of the group: no instance, no message."""
    return not (
        info.instances or info.queue_length or info.pending or info.delayed or info.dead_letters
    )


def _summary(info: GroupInfo) -> Table:
    summary = Table(show_header=False, box=None)
    summary.add_row("queue length", str(info.queue_length))
    if len(info.lanes) > 1:
        unread = info.unread_lanes
        shown = ", ".join(
            f"{_shown(lane)} {length}{' (no live runner reads it)' if lane in unread else ''}"
            for lane, length in info.lanes.items()
        )
        summary.add_row("by lane", shown)
    summary.add_row("pending", str(sum(info.pending.values())))
    summary.add_row("delayed", str(info.delayed))
    summary.add_row("dead letters", str(info.dead_letters))
    if info.workflows:
        summary.add_row("workflows", _workflows_line(info))
    if info.quarantined:
        summary.add_row("set aside", f"{info.quarantined} (trunner quarantine list {info.group})")
    if info.paused_since is not None:
        summary.add_row("paused", f"since {_when(info.paused_since)} UTC (trunner resume)")
    summary.add_row("leader", _cell(info.leader or "-"))
    if info.capacity:
        summary.add_row(
            "capacity decision",
            f"{info.capacity.get('value')} per instance (version {info.capacity.get('version')})",
        )
    return summary


def _workflows_line(info: GroupInfo) -> str:
    """The group's live workflows, and the age of the oldest."""
    line = f"{info.workflows} live (trunner workflow ls {_shown(info.group)})"
    if info.oldest_workflow_at is not None:
        age = max(0.0, time.time() - info.oldest_workflow_at)
        line += f", the oldest dispatched {age:.0f} s ago ({_when(info.oldest_workflow_at)} UTC)"
    return line


def _limits_table(info: GroupInfo) -> Table:
    limits = Table(title="concurrency limits in use", title_justify="left")
    for column in ("limit key", "held", "waiting"):
        limits.add_column(column, no_wrap=column == "limit key")
    for key, (held, waiting) in info.concurrency.items():
        limits.add_row(_cell(key), str(held), str(waiting))
    return limits


def _print_group(info: GroupInfo, out: Console) -> None:
    queue = f" (queue {_shown(info.queue)})" if info.queue and info.queue != info.group else ""
    out.print(Text.assemble(("group", "bold"), f" {_shown(info.group)}{queue}"))
    out.print(_summary(info))
    instances = Table(title="instances", title_justify="left")
    for column in ("id", "host", "pid", "capacity", "pending", "last seen", "leader"):
        instances.add_column(column, no_wrap=column == "id")  # ids are copied: never cut
    for i in info.instances:
        pending = sum(n for c, n in info.pending.items() if c == i.id or c.startswith(i.id + "/"))
        instances.add_row(
            _cell(i.id), _cell(i.host), str(i.pid), str(i.capacity), str(pending),
            _when(i.last_seen), "yes" if i.leader else "",
        )  # fmt: skip
    out.print(instances)
    if info.running:
        running = Table(title="running (delivered longest ago)", title_justify="left")
        for column in ("task id", "task", "instance", "attempt", "progress", "since"):
            running.add_column(column, no_wrap=column == "task id")
        for task in info.running:
            progress = f"{task.progress:.0%}" if task.progress is not None else "-"
            if task.progress_message:
                progress += f" {task.progress_message}"
            running.add_row(
                _cell(task.id), _cell(task.task or "?"), _cell(task.instance or "-"),
                str(task.attempt or "-"), _cell(progress), _when(task.started_at or 0.0),
            )  # fmt: skip
        out.print(running)
    if info.concurrency:
        out.print(_limits_table(info))
    if _unknown(info):
        out.print(
            f"nothing is known of group {info.group!r} on this Redis (no instance, no message):"
            " check the group name, --redis, the key prefix, and --queue if the group reads"
            " a queue of another name"
        )
    if info.stats is not None and info.stats.tasks:
        stats = info.stats
        table = Table(
            title=f"last window ({stats.window:.0f} s, {stats.throughput:.1f} tasks/s, "
            f"predicted wait {stats.predicted_wait:.1f} s)",
            title_justify="left",
        )
        for column in ("task", "count", "avg ms", "p50 ms", "p95 ms", "p99 ms"):
            table.add_column(column, justify="right" if column != "task" else "left")
        for name, t in stats.tasks.items():
            table.add_row(
                _cell(name),
                str(t.count),
                *(f"{v * 1000:.1f}" for v in (t.average, t.p50, t.p95, t.p99)),
            )
        out.print(table)


async def _list_groups(args: argparse.Namespace, out: Console) -> int:
    """``trunner inspect`` without a group: the groups found on Redis (a bounded SCAN)."""
    found = await discover_groups(_shared_redis(args), prefix=args.prefix)
    if args.json:
        print(json.dumps(as_dict(found)))
        return 0
    if not found.groups:
        out.print(
            f"no group found under the prefix {_shown(args.prefix)!r}: a group is found once "
            "one of its runners has started (check --redis and --prefix)",
            highlight=False,
        )
    else:
        table = Table(title=f"groups (prefix {_shown(args.prefix)})", title_justify="left")
        table.add_column("group", no_wrap=True)
        table.add_column("queue", no_wrap=True)
        for g in found.groups:
            table.add_row(_cell(g.group), _cell(g.queue))
        out.print(table)
        out.print("trunner inspect GROUP (--queue QUEUE when it is another's) shows one")
    if not found.complete:
        out.print("the scan stopped at its bound: some groups may be missing")
    for why in found.ignored:
        out.print(f"ignored: {_shown(why)}", highlight=False, soft_wrap=True)
    return 0


async def inspect(args: argparse.Namespace, out: Console) -> int:
    if args.group is None:
        if args.queue is not None:
            out.print("--queue needs a group: trunner inspect GROUP --queue QUEUE")
            return 2
        return await _list_groups(args, out)
    async with _group_admin(args) as admin:
        info = await admin.inspect()
    if args.json:
        print(json.dumps(as_dict(info), default=str))
    else:
        _print_group(info, out)
    return 0
