"""``trunner dead-letter``: list, replay, delete or purge the dead letters of a group."""

from __future__ import annotations

import argparse
import json

import attrs
import trio
from rich.console import Console

from ..admin import Admin, DeadLetter, as_dict
from ._client import _group_admin
from ._render import _ask, _shown, _when

__all__ = ["dead_letter"]


async def dead_letter(args: argparse.Namespace, out: Console) -> int:
    async with _group_admin(args) as admin:
        if args.action == "list":
            letters = await admin.dead_letters(args.count)
            if args.json:
                print(json.dumps([as_dict(d) for d in letters], default=str))
                return 0
            _print_dead_letters(args.group, letters, await admin.dead_letter_count(), out)
            return 0
        if args.action == "replay":
            return await _replay(admin, args, out)
        if args.action == "delete":
            return await _delete_dead(admin, args, out)
        count = await admin.dead_letter_count()
        if not args.yes:
            answer = await trio.to_thread.run_sync(
                _ask, f"delete {count} dead letters of {args.group}? [y/N] "
            )
            if answer is None:
                out.print("nothing deleted: no answer (stdin is closed); pass --yes in scripts")
                return 1
            if answer.strip().lower() not in ("y", "yes"):
                out.print("nothing deleted")
                return 1
        out.print(f"deleted {await admin.purge_dead_letters()} dead letters", highlight=False)
        return 0


def _print_dead_letters(group: str, letters: list[DeadLetter], total: int, out: Console) -> None:
    """One block per dead letter, readable at any width: ids are never cut (they are
    copied into ``replay``), and errors are sentences."""
    if not letters:
        out.print(f"no dead letters in group {group}", highlight=False, markup=False)
        return
    shown = f"{len(letters)} of {total}" if total > len(letters) else str(total)
    out.print(f"dead letters of {group}, oldest first ({shown}):", highlight=False, markup=False)
    for d in letters:
        task = _shown(d.task) if d.task else "(undecodable)"
        lines = [
            "",
            f"{_shown(d.id)}  {task}  attempt {d.attempt}  {_when(d.failed_at)}",
            f"  reason:  {_shown(d.reason)}",
            f"  error:   {_shown(d.error)}",
        ]
        if d.cause and d.cause != d.error:
            lines.append(f"  cause:   {_shown(d.cause)}")
        if d.headers:
            shown_headers = ", ".join(f"{_shown(k)}={_shown(v)}" for k, v in d.headers.items())
            lines.append(f"  headers: {shown_headers}")
        lines.append(f"  task id: {_shown(d.task_id)}  (consumer {_shown(d.consumer or '-')})")
        out.print("\n".join(lines), highlight=False, soft_wrap=True, markup=False)
    if total > len(letters):
        out.print(f"\n{total - len(letters)} more: pass --count {total}", highlight=False)


async def _delete_dead(admin: Admin, args: argparse.Namespace, out: Console) -> int:
    """Delete the dead letters named, or those of one task (asking first, as purge)."""
    if not args.ids and not args.task:
        out.print("delete what? name dead-letter ids, or --task NAME (purge deletes all)")
        return 2
    what = (
        f"the dead letters of task {args.task!r}" if args.task else f"{len(args.ids)} dead letters"
    )
    if not args.yes:
        answer = await trio.to_thread.run_sync(_ask, f"delete {what} of {args.group}? [y/N] ")
        if answer is None or answer.strip().lower() not in ("y", "yes"):
            closed = " (stdin is closed; pass --yes)" if answer is None else ""
            out.print(f"nothing deleted{closed}")
            return 1
    if args.task:
        deleted = await admin.delete_dead_letters(task=args.task)
    else:
        deleted = await admin.delete_dead_letters(args.ids)
    out.print(f"deleted {deleted} dead letters", highlight=False)
    return 0


async def _replay(admin: Admin, args: argparse.Namespace, out: Console) -> int:
    """Replay, and say what became of each id asked for; 1 unless all were replayed."""
    result = await admin.replay_dead_letters(args.ids or None, task=args.task)
    if args.json:
        print(json.dumps(attrs.asdict(result)))
        return 0 if result.skipped == {} else 1
    if not args.ids and not result.new_ids and not result.skipped:
        out.print(f"no dead letters in group {args.group}: nothing to replay", highlight=False)
        return 0
    for dead_id, new_id in result.new_ids.items():
        out.print(f"replayed {dead_id} as {new_id}", highlight=False, soft_wrap=True)
    for dead_id, why in result.skipped.items():
        out.print(f"not replayed {dead_id}: {why}", highlight=False, soft_wrap=True, markup=False)
    asked = len(result.new_ids) + len(result.skipped)
    out.print(f"replayed {len(result.new_ids)} of {asked} dead letters", highlight=False)
    return 0 if not result.skipped else 1
