"""``trunner workflow status|steps|cancel|ls``: a group's workflows (design/workflows.md
§5), through the client and its admin, as ``WorkflowHandle`` and the dashboard see them."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from ..admin import StepState, WorkflowSteps, as_dict
from ..errors import StepFailed
from ..status import WorkflowState, WorkflowStatus
from ._client import _group_client
from ._render import _cell, _shown, _when

__all__ = ["workflow"]

#: Failures ``trunner workflow status`` shows (``steps --failed`` shows all those kept).
FAILURES_SHOWN = 10


async def workflow(args: argparse.Namespace, out: Console) -> int:
    run = {"status": _status, "steps": _steps, "cancel": _cancel, "ls": _list}
    return await run[args.workflow_command](args, out)


def _failure(failure: StepFailed) -> dict[str, Any]:
    error = failure.error
    return {
        "step": failure.node, "task": failure.task_name, "attempt": failure.attempt,
        "type": error.type_name, "message": error.message,
    }  # fmt: skip


def _failure_line(failure: StepFailed) -> str:
    error = failure.error
    return _shown(
        f"step {failure.node} ({failure.task_name}, attempt {failure.attempt}): "
        f"{error.type_name}: {error.message}"
    )


def _status_rows(status: WorkflowStatus) -> Table:
    rows = Table(show_header=False, box=None)
    rows.add_row("workflow", _cell(status.id))
    if status.name:
        rows.add_row("name", _cell(status.name))
    rows.add_row("state", status.state.value)
    if status.state is not WorkflowState.UNKNOWN:
        rows.add_row(
            "steps",
            f"{status.steps}: {status.succeeded} succeeded, {status.failed} failed, "
            f"{status.cancelled} cancelled, {status.live} live (queued, running or retrying)",
        )
    if status.created_at is not None:
        rows.add_row("dispatched", _when(status.created_at))
    if status.finished_at is not None:
        rows.add_row("finished", _when(status.finished_at))
    return rows


async def _status(args: argparse.Namespace, out: Console) -> int:
    async with _group_client(args) as client:
        seen = await client.admin.workflow_steps(args.workflow_id, count=0)
    status = seen.status
    if args.json:
        shown = {**as_dict(status), "failures": [_failure(f) for f in seen.failures]}
        print(json.dumps(shown))
        return 0 if status.state is not WorkflowState.UNKNOWN else 1
    out.print(_status_rows(status))
    if seen.failures:
        kept = len(seen.failures)
        head = f"failures (the first {FAILURES_SHOWN} of {status.failed})"
        out.print(head if status.failed > FAILURES_SHOWN else "failures", highlight=False)
        for failure in seen.failures[:FAILURES_SHOWN]:
            out.print(f"  {_failure_line(failure)}", highlight=False, soft_wrap=True)
        if kept > FAILURES_SHOWN:
            out.print(
                f"  (trunner workflow steps {_shown(args.group)} {_shown(status.id)} --failed)"
            )
    if status.state is WorkflowState.UNKNOWN:
        out.print(
            f"nothing is known of workflow {_shown(args.workflow_id)} in group "
            f"{_shown(args.group)}: its outcome expired, or it was never dispatched there",
            highlight=False,
            soft_wrap=True,
        )
        return 1
    return 0


def _runs(steps: WorkflowSteps) -> Iterator[tuple[int, int, StepState]]:
    """The steps of the page as runs of one state: (first, last, state)."""
    first = steps.start
    for n, state in enumerate(steps.states, steps.start):
        if n + 1 == steps.start + len(steps.states) or steps.states[n + 1 - steps.start] != state:
            yield first, n, state
            first = n + 1


async def _steps(args: argparse.Namespace, out: Console) -> int:
    async with _group_client(args) as client:
        seen = await client.admin.workflow_steps(args.workflow_id, args.start, args.count)
    status = seen.status
    if args.json:
        shown = {
            "workflow": status.id, "state": status.state.value, "steps": status.steps,
            "start": seen.start, "states": [s.value for s in seen.states],
            "failures": [_failure(f) for f in seen.failures],
        }  # fmt: skip
        print(json.dumps(shown))
        return 0 if status.state is not WorkflowState.UNKNOWN else 1
    if status.state is WorkflowState.UNKNOWN:
        out.print(f"nothing is known of workflow {_shown(args.workflow_id)}", highlight=False)
        return 1
    if args.failed:
        for failure in seen.failures:
            out.print(_failure_line(failure), highlight=False, soft_wrap=True)
        if status.failed > len(seen.failures):
            out.print(f"({status.failed - len(seen.failures)} more failed: not kept)")
        return 0
    if not seen.states:
        out.print(f"no step from {seen.start} on (it has {status.steps})")
        return 0
    last = seen.start + len(seen.states) - 1
    out.print(
        f"workflow {_shown(status.id)} ({status.state.value}): steps {seen.start}-{last} of "
        f"{status.steps}",
        highlight=False,
        soft_wrap=True,
    )
    table = Table(box=None)
    for column in ("steps", "state"):
        table.add_column(column)
    for first, end, state in _runs(seen):
        table.add_row(f"{first}" if first == end else f"{first}-{end}", state.value)
    out.print(table)
    if last + 1 < status.steps:
        out.print(f"(more: --start {last + 1})")
    return 0


async def _cancel(args: argparse.Namespace, out: Console) -> int:
    async with _group_client(args) as client:
        handle = client.workflow(args.workflow_id)
        before = (await handle.status()).state
        state = await handle.cancel()
    if state is WorkflowState.CANCELLED and not before.finished:  # settled within the call
        said = "cancelled: none of its steps was running; those waiting were taken out"
        out.print(f"{_shown(args.workflow_id)}: {said}", highlight=False, soft_wrap=True)
        return 0
    said = {
        WorkflowState.CANCELLING: "cancelling: no step starts now, its running steps are "
        "cancelled where they run; it settles once they ended",
        WorkflowState.FAILING: "failing already: its running steps are being cancelled",
        WorkflowState.UNKNOWN: f"no workflow {_shown(args.workflow_id)} in group "
        f"{_shown(args.group)}",
    }.get(state, f"it had settled already ({state.value}): nothing to cancel")
    out.print(f"{_shown(args.workflow_id)}: {said}", highlight=False, soft_wrap=True)
    return 1 if state is WorkflowState.UNKNOWN else 0


def _row(status: WorkflowStatus | None) -> Sequence[str]:
    if status is None:
        return ("?",) * 5
    done = status.succeeded + status.failed + status.cancelled
    return (
        status.state.value, f"{done}/{status.steps}", str(status.live), str(status.failed),
        _when(status.created_at) if status.created_at is not None else "-",
    )  # fmt: skip


async def _list(args: argparse.Namespace, out: Console) -> int:
    async with _group_client(args) as client:
        listed = await client.admin.workflows(args.count + 1, args.offset)
    more, listed = len(listed) > args.count, listed[: args.count]
    if args.json:
        print(json.dumps([as_dict(w) for w in listed]))
        return 0
    if not listed:
        out.print(f"no live workflow in group {_shown(args.group)}", highlight=False)
        return 0
    table = Table(title="live workflows (oldest first)", title_justify="left")
    for column in ("id", "name", "state", "ended", "live", "failed", "dispatched"):
        table.add_column(column, no_wrap=column == "id")  # ids are copied: never cut
    for w in listed:
        name = w.status.name if w.status is not None else f"unreadable: {w.problem}"
        table.add_row(_cell(w.id), _cell(name), *_row(w.status))
    out.print(table)
    if more:
        out.print(f"(more: --offset {args.offset + args.count})")
    return 0
