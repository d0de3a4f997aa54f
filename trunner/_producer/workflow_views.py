"""The queries of a group's workflows (design/workflows.md §5): the live ones from the
group's index, a page of one's steps from its marks. A workflow's status is made by the
handle's own reader (``_workflow_handle._status_of``), so ``WorkflowHandle.status()``,
``trunner workflow`` and the dashboard say the same; bad data is told per workflow."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

from .._redis import Broker, MarksLook, WorkflowLook
from .._waiting.calls import Calls, counting
from .._wire.workflow_views import LiveWorkflow, StepState, WorkflowSteps
from .._workflow_handle import _failures, _status_of
from ..errors import BadData
from ..status import WorkflowState, WorkflowStatus

__all__ = [
    "MAX_STEPS_PAGE",
    "WorkflowAdmin",
    "live_workflows",
    "oldest_workflow",
    "workflow_steps",
]

#: The most steps one call reads (2 bits each: 2.5 KB of marks).
MAX_STEPS_PAGE: Final = 10_000
#: The most live workflows one call lists.
MAX_LISTED: Final = 1000


def status_of(workflow_id: str, fields: Mapping[str, str]) -> WorkflowStatus:
    """The status of workflow ``workflow_id`` from its state hash's fields; BadData when
    its state is not a workflow's."""
    return _status_of(workflow_id, WorkflowLook(fields, {}, {}))


def _seconds(score: str | None) -> float | None:
    """A score of the index (ms) as seconds; None unless it is a finite number."""
    try:
        value = float(score) if score is not None else math.nan
    except ValueError:
        return None
    return value / 1000 if math.isfinite(value) else None


async def oldest_workflow(broker: Broker) -> tuple[int, float | None]:
    """How many workflows of the group are live, and when the oldest was dispatched."""
    count, score = await broker.workflow_index_size()
    return count, _seconds(score)


async def live_workflows(broker: Broker, count: int = 50, offset: int = 0) -> list[LiveWorkflow]:
    """Up to ``count`` (at most :data:`MAX_LISTED`) live workflows from position
    ``offset`` of the index, oldest first: two round trips."""
    if offset < 0 or count < 0:
        raise ValueError(f"count and offset are >= 0, got {count}, {offset}")
    members = await broker.workflow_index(offset, min(count, MAX_LISTED))
    found = await broker.workflow_fields([workflow_id for workflow_id, _ in members])
    listed = []
    for (workflow_id, score), fields in zip(members, found, strict=True):
        at = _seconds(score)
        if isinstance(fields, str):
            listed.append(LiveWorkflow(workflow_id, at, None, fields))
            continue
        try:
            listed.append(LiveWorkflow(workflow_id, at, status_of(workflow_id, fields)))
        except BadData as exc:
            listed.append(LiveWorkflow(workflow_id, at, None, exc.reason))
    return listed


async def workflow_steps(
    broker: Broker, workflow_id: str, start: int = 0, count: int = 1000
) -> WorkflowSteps:
    """The status of workflow ``workflow_id``, its failures, and the states of up to
    ``count`` (at most :data:`MAX_STEPS_PAGE`) of its steps from step ``start``: one
    round trip."""
    if start < 0 or count < 0:
        raise ValueError(f"start and count are >= 0, got {start}, {count}")
    count = min(count, MAX_STEPS_PAGE)
    last = start + count - 1
    look = await broker.workflow_marks(workflow_id, start // 4, last // 4 if count else -1)
    status = status_of(workflow_id, look.after)
    status_of(workflow_id, look.before)  # the state it is read by must be one too
    failures = _kept(look.failures)
    told = tuple(_failures(workflow_id, WorkflowLook(look.after, {}, failures)))
    if status.state is WorkflowState.UNKNOWN:
        return WorkflowSteps(status, start)
    end = min(start + count, status.steps)
    states = _states(look, start // 4, range(start, end), failures)
    return WorkflowSteps(status, start, states, told)


def _kept(failures: Mapping[str, str]) -> dict[int, str]:
    """The failures kept, by step (a field that is not a step's index is left out)."""
    return {int(k): v for k, v in failures.items() if k.isascii() and k.isdigit() and len(k) < 10}


def _count(fields: Mapping[str, str], name: str) -> int | None:
    value = fields.get(name, "0")
    return int(value) if value.isascii() and value.isdigit() and len(value) < 16 else None


def _unkept(after: Mapping[str, str], kept: int) -> StepState:
    """What a step that ended without a kept failure is, by the counts read after the
    marks (they only grow): no step cancelled then means none ended cancelled when the
    marks were read, every failure kept then means every one of those."""
    ok, cancelled, failed = (_count(after, name) for name in ("ok", "cancelled", "failures"))
    kept_all = failed is not None and failed <= kept
    if kept_all and cancelled == 0:
        return StepState.SUCCEEDED
    if kept_all and ok == 0:
        return StepState.CANCELLED
    if ok == 0 and cancelled == 0:
        return StepState.FAILED  # one of the failures past the 100 kept
    return StepState.ENDED


def _states(
    look: MarksLook, first_byte: int, nodes: range, failures: Mapping[int, str]
) -> tuple[StepState, ...]:
    """The states of steps ``nodes``, exactly as far as ``look`` tells them. The marks are
    read after ``look.before``: a workflow not running then starts no step after (a step
    not started never will)."""
    waiting = StepState.WAITING if look.before.get("state") == "running" else StepState.NEVER
    unkept = _unkept(look.after, len(failures))
    marks, states = look.marks, []
    for node in nodes:
        index = node // 4 - first_byte
        byte = marks[index] if index < len(marks) else 0
        shift = 6 - 2 * (node % 4)  # bit 2i is the byte's most significant first
        if not byte >> (shift + 1) & 1:
            states.append(waiting)
        elif not byte >> shift & 1:
            states.append(StepState.LIVE)
        else:
            states.append(StepState.FAILED if node in failures else unkept)
    return tuple(states)


@counting
class WorkflowAdmin:
    """The workflow calls of ``trunner.admin.Admin`` (its base: documented there), counted
    in its calls in flight as its own are."""

    def _open_broker(self) -> Broker:
        raise NotImplementedError

    def _calls(self) -> Calls:
        raise NotImplementedError

    async def workflow_count(self) -> int:
        """The group's live [workflows](workflows.md): dispatched, not settled (``ZCARD``)."""
        return (await self._open_broker().workflow_index_size())[0]

    async def workflows(self, count: int = 50, offset: int = 0) -> list[LiveWorkflow]:
        """The group's live [workflows](workflows.md) (dispatched, not settled), oldest
        first: up to ``count`` (at most 1000) from position ``offset``, each with its
        status, or why it cannot be read. ``inspect`` counts them all."""
        return await live_workflows(self._open_broker(), count, offset)

    async def workflow_steps(
        self, workflow_id: str, start: int = 0, count: int = 1000
    ) -> WorkflowSteps:
        """Workflow ``workflow_id``'s status, the failures it keeps, and the
        [``StepState``][trunner.admin.StepState] of up to ``count`` (at most 10 000) of its
        steps from step ``start`` (one round trip; ``count=0``: none).

        Raises:
            BadData: Its state in Redis is not a workflow's.
            ValueError: ``workflow_id`` is no workflow's id; ``start`` or ``count`` < 0.
        """
        return await workflow_steps(self._open_broker(), workflow_id, start, count)
