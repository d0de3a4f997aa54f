"""``run_until_idle``: wait until a runner's group has nothing left to do."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from .. import _validate as v
from .._redis import RawEntry
from .._wire.envelope import PAYLOAD_FIELD
from ..errors import RunnerNotRunning
from ..runner import Runner
from ._wire import field as _field
from ._wire import tally as _tally
from ._wire import task_name as _task_name

__all__ = ["IDLE_POLL", "IdleState", "NotIdle", "run_until_idle"]

#: How often :func:`run_until_idle` looks at Redis again (Redis state has no event).
IDLE_POLL = 0.01
#: How many entries of each kind a :class:`NotIdle` summary reads to name their tasks.
SUMMARY_LIMIT = 1000


@attrs.frozen
class IdleState:
    """What is left to do in a runner's group (see
    [``run_until_idle``][trunner.testing.run_until_idle]).

    The name lists hold task names, one per message, read up to 1000 of each kind.
    """

    queued: int
    """Entries in the stream not yet delivered to the group."""
    pending: int
    """Delivered and not acknowledged: running, finished with the ack not written yet,
    or released for reclaim (``trunner:released``)."""
    due: int
    """Delayed tasks (and retries) due by now (or within ``delayed_within``), not yet
    moved into the stream."""
    delayed: int
    """Delayed tasks due later (they do not keep the group busy)."""
    in_flight: int
    """Tasks this runner is running now."""
    acks_buffered: int
    """Finished tasks of this runner whose acknowledgement is not written yet."""
    queued_tasks: list[str] = attrs.field(factory=list)
    """The task names of the queued messages."""
    pending_tasks: list[str] = attrs.field(factory=list)
    """The task names of the pending messages."""
    pending_consumers: list[str] = attrs.field(factory=list)
    """The consumer of each pending message."""
    due_tasks: list[str] = attrs.field(factory=list)
    """The task names of the due delayed tasks."""
    in_flight_tasks: list[str] = attrs.field(factory=list)
    """The task names of the tasks running on the runner."""

    @property
    def idle(self) -> bool:
        """Nothing queued, pending, due or running, and no acknowledgement waiting."""
        return not (self.queued or self.pending or self.due or self.in_flight or self.acks_buffered)

    def describe(self) -> str:
        """A summary, e.g. ``1 queued (send: 1); 2 pending (send: 2, by consumer
        'host:1:ab': 2); ...``"""
        parts = []
        for count, what, names in [
            (self.queued, "queued", _tally(self.queued_tasks)),
            (self.pending, "pending", self._pending_names()),
            (self.due, "delayed and due", _tally(self.due_tasks)),
            (self.in_flight, "in flight", _tally(self.in_flight_tasks)),
        ]:
            if count:
                parts.append(f"{count} {what} ({names})" if names else f"{count} {what}")
        if self.acks_buffered:
            parts.append(f"{self.acks_buffered} acknowledgements not written yet")
        if self.delayed:
            parts.append(f"({self.delayed} delayed, due later)")
        return "; ".join(parts) or "nothing"

    def _pending_names(self) -> str:
        names = _tally(self.pending_tasks)
        if self.pending_consumers:
            names += f", by consumer {_tally(repr(c) for c in self.pending_consumers)}"
        return names


class NotIdle(AssertionError):
    """[``run_until_idle``][trunner.testing.run_until_idle] timed out (an
    ``AssertionError``)."""

    def __init__(self, message: str, state: IdleState) -> None:
        super().__init__(message)
        self.state = state
        """What was left."""


def _activity(runner: Runner) -> tuple[int, ...]:
    """Counters that change whenever this runner moves a message along."""
    s = runner.statistics()
    return (
        s.fetched,
        s.reclaimed,
        s.processed,
        s.retried,
        s.dead_lettered,
        s.acked,
        s.released,
        s.delayed_moved,
        s.cron_fired,
    )


async def _group_state(runner: Runner, detail: bool, within: float = 0.0) -> IdleState:
    """Read the group's state; with ``detail``, also the names of what is left.

    Reads in the order messages move (delivered, delayed, queued): a message moving on
    while this runs is still seen at a later step.
    """
    broker = runner._open_broker()
    now_ms = int((time.time() + within) * 1000)
    progress = await broker.progress(now_ms)
    count = SUMMARY_LIMIT if detail else 1
    queued_entries: list[RawEntry] = []
    for lane, last in progress.last_by_lane.items():
        if last is not None and len(queued_entries) < count:
            queued_entries += await broker.undelivered(last, count - len(queued_entries), lane)
    parts = runner._components
    holdings = parts.holdings if parts is not None else None
    jobs = list(holdings.running.values()) if holdings is not None else []
    state = IdleState(
        queued=len(queued_entries),
        pending=progress.pending,
        due=progress.due,
        delayed=progress.delayed - progress.due,
        in_flight=len(jobs),
        acks_buffered=len(holdings.finished) if holdings is not None else 0,
    )
    if not detail:
        return state
    return await _with_names(runner, state, queued_entries, jobs, now_ms)


def _name(entry: RawEntry | None) -> str:
    return _task_name(_field(entry.fields, PAYLOAD_FIELD)) if entry else "(deleted)"


async def _with_names(
    runner: Runner, state: IdleState, queued: list[RawEntry], jobs: Sequence[Any], now_ms: int
) -> IdleState:
    broker = runner._open_broker()
    pending = await broker.pending_entries(SUMMARY_LIMIT) if state.pending else []
    bodies = await broker.entries([message_id for message_id, _ in pending])
    due_messages = await broker.due_messages(now_ms, SUMMARY_LIMIT) if state.due else []
    return attrs.evolve(
        state,
        queued_tasks=[_name(entry) for entry in queued],
        pending_tasks=[_name(body) for body in bodies],
        pending_consumers=[consumer for _, consumer in pending],
        due_tasks=[_task_name(m) for m in due_messages],
        in_flight_tasks=[job.message.task_name or "(undecodable)" for job in jobs],
    )


async def _idle_now(runner: Runner, within: float) -> bool:
    before = _activity(runner)
    state = await _group_state(runner, detail=False, within=within)
    return state.idle and _activity(runner) == before


async def run_until_idle(
    runner: Runner,
    timeout: float = 10.0,  # noqa: ASYNC109 - the issue's API; raises NotIdle with a summary
    *,
    delayed_within: float = 0.0,
) -> None:
    """Return once the runner's group has nothing left to do.

    Idle means, all at one moment: nothing queued in the group's stream, no delayed task
    (or retry) due, nothing pending (delivered and not acknowledged, by any consumer of the
    group, including messages released for reclaim), nothing running on ``runner`` and no
    acknowledgement of it waiting to be written.

    Delayed tasks due later do not count, and retries wait in the delayed set for their
    backoff: pass ``delayed_within=s`` to also wait for the delayed tasks (and retries) due
    within ``s`` seconds of each look. While tasks run this waits for the runner's pool to
    become idle; Redis state has no event to wait for, so it is looked at every 0.01 s.

    Args:
        runner: A started runner.
        timeout: Seconds on the Trio clock (> 0).
        delayed_within: Seconds (>= 0).

    Raises:
        NotIdle: The group was not idle after ``timeout``; its ``state`` says what was
            left.
        RunnerNotRunning: The runner is not running.
        TypeError: ``runner`` is not a [``Runner``][trunner.Runner].
    """
    if not isinstance(runner, Runner):
        raise TypeError(f"run_until_idle() takes a Runner, got {type(runner).__name__}")
    v.check_positive_number("timeout", timeout)
    v.check_non_negative_number("delayed_within", delayed_within)
    parts = runner._components
    if parts is None or runner._broker is None:
        raise RunnerNotRunning(f"{runner!r} is not running")
    pool = parts.pool
    with trio.move_on_after(timeout):
        while True:
            if pool.in_flight:
                await pool.wait_idle()
                continue
            if await _idle_now(runner, delayed_within):
                return
            await trio.sleep(IDLE_POLL)
    state = await _group_state(runner, detail=True, within=delayed_within)
    raise NotIdle(f"{runner!r} was not idle after {timeout} s: {state.describe()}", state)
