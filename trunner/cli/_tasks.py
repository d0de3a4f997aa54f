"""``trunner dispatch``, ``status``, ``result`` and ``cancel``: one task of a group."""

from __future__ import annotations

import argparse
import json
import sys

import trio
from rich.console import Console
from rich.table import Table

from .._worker.serve import load_settings
from ..admin import as_dict
from ..client import Client
from ..errors import TaskFailed, TrunnerError
from ..status import CancelOutcome, TaskState, WorkflowState
from ._client import _group_client
from ._render import _shown, _when

__all__ = ["cancel", "dispatch", "result", "status"]


async def dispatch(args: argparse.Namespace, out: Console) -> int:
    try:
        payload = json.loads(args.payload)
    except ValueError as exc:
        raise ValueError(f"the payload is not valid JSON: {exc}") from None
    headers = {}
    for given in args.header:
        name, sep, value = given.partition("=")
        if not sep or not name:
            raise ValueError(f"--header takes NAME=VALUE, got {given!r}")
        headers[name] = value
    tasks = load_settings(args.tasks).tasks if args.tasks else None
    async with _group_client(args, tasks) as client:
        keep, lane = args.keep_result, args.priority
        if args.delay is not None:
            task_id = await client.dispatch_delayed(
                args.task, payload, args.delay, keep_result=keep, headers=headers, priority=lane
            )
        else:
            task_id = await client.dispatch(
                args.task, payload, keep_result=keep, headers=headers, priority=lane
            )
    out.print(task_id, soft_wrap=True, highlight=False)
    return 0


async def status(args: argparse.Namespace, out: Console) -> int:
    async with _group_client(args) as client:
        status = await client.handle(args.task_id).status()
        if status.state is TaskState.UNKNOWN and not args.json and await _is_workflow(client, args):
            out.print(
                f"{_shown(args.task_id)} is a workflow: trunner workflow status "
                f"{_shown(args.group)} {_shown(args.task_id)}",
                highlight=False,
                soft_wrap=True,
            )
            return 1
    if args.json:
        print(json.dumps(as_dict(status)))
        return 0
    rows = Table(show_header=False, box=None)
    rows.add_row("task", status.id)
    rows.add_row("state", status.state.value)
    for name in ("task", "attempt", "instance"):
        value = getattr(status, name)
        if value is not None:
            rows.add_row("name" if name == "task" else name, str(value))
    if status.progress is not None:
        message = f" ({status.progress_message})" if status.progress_message else ""
        rows.add_row("progress", f"{status.progress:.0%}{message}")
    for name in ("enqueued_at", "started_at", "finished_at", "due_at"):
        value = getattr(status, name)
        if value is not None:
            rows.add_row(name.replace("_at", "").replace("enqueued", "dispatched"), _when(value))
    if status.error is not None:
        rows.add_row("error", str(status.error))
    out.print(rows)
    return 0 if status.state is not TaskState.UNKNOWN else 1


async def _is_workflow(client: Client, args: argparse.Namespace) -> bool:
    """Whether the id given to ``trunner status`` is a workflow's (one more round trip,
    only for an id no task has)."""
    try:
        seen = await client.admin.workflow_steps(args.task_id, count=0)
    except (TrunnerError, ValueError):
        return False
    return seen.status.state is not WorkflowState.UNKNOWN


async def result(args: argparse.Namespace, out: Console) -> int:
    async with _group_client(args) as client:
        try:
            value = await client.handle(args.task_id).result(timeout=args.timeout)
        except trio.TooSlowError:
            print(f"trunner result: no outcome within {args.timeout:g} s", file=sys.stderr)
            return 2
        except TaskFailed as failure:
            print(f"trunner result: {failure}", file=sys.stderr)
            traceback = getattr(failure.error, "traceback", "")
            if traceback:
                print(traceback.rstrip("\n"), file=sys.stderr)
            return 1
    print(json.dumps(value))
    return 0


async def cancel(args: argparse.Namespace, out: Console) -> int:
    async with _group_client(args) as client:
        outcome = await client.handle(args.task_id).cancel(wait=args.wait)
    said = {
        CancelOutcome.REMOVED: "removed: it will never start",
        CancelOutcome.CANCELLING: "cancelled while it ran"
        if args.wait
        else "cancelling: the instance running it cancels it now",
        CancelOutcome.FINISHED: "it had finished already: nothing to cancel",
        CancelOutcome.UNKNOWN: f"no task {args.task_id} in group {args.group}",
    }[outcome]
    out.print(f"{args.task_id}: {said}", highlight=False, soft_wrap=True)
    return 1 if outcome is CancelOutcome.UNKNOWN else 0
