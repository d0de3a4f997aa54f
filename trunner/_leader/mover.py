"""A delayed mover is responsible for moving delayed tasks and scheduled retries into the
group's stream once they are due, so that the fetchers deliver them.

It runs as a leader chore (in a nursery that lives exactly as long as one leadership) and
writes only through fenced scripts, so a deposed leader cannot move a delayed task. Every
instance has one ready: a new leader starts moving at once; followers do not touch Redis
for it at all.

Bad data: a due unique task whose stored lock cannot be read is set aside (removed from the
delayed keys, recorded with its message in the quarantine), and the other tasks move on.

Precision: the mover sleeps until the earliest due time (at most ``MAX_SLEEP``), and is
woken early when a task due sooner is scheduled — by this instance directly, by any other
instance or client through the group's wake-up channel.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import trio

from .._engine.quarantine import Quarantine
from .._redis import Broker
from .._util import ErrorLog, LoopBackoff, logger, wall_ms
from .._wire.quarantine import QUARANTINE_MAXLEN
from ..errors import BackendError
from .election import Elector

__all__ = ["DelayedMover"]

#: The most tasks one move call takes: a backlog drains batch after batch.
MOVE_BATCH = 500
#: The longest the mover sleeps without looking (a missed wake-up is caught by then).
MAX_SLEEP = 5.0


class DelayedMover:
    """Moves due delayed tasks into the stream while this instance leads (a leader chore)."""

    def __init__(
        self,
        broker: Broker,
        errors: ErrorLog,
        quarantine: Quarantine,
        on_pass: Callable[[float], None] = lambda _seconds: None,
    ) -> None:
        self._broker = broker
        self._errors = errors
        self._quarantine = quarantine
        self._on_pass = on_pass
        self._wake = trio.Event()
        self._next_due_ms: float | None = None
        self.passes = 0
        self.pass_seconds = 0.0
        self.moved = 0
        self.unique_dropped = 0

    def due_at(self, due_ms: int) -> None:
        """A task was scheduled for ``due_ms``: wake the mover if it is due first."""
        if self._next_due_ms is None or due_ms < self._next_due_ms:
            self._next_due_ms = due_ms
            self._wake.set()

    async def run(self, elector: Elector) -> None:
        """Move due tasks for as long as this leadership lasts (a leader chore)."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self._listen)
            await self._move(elector)

    async def _move(self, elector: Elector) -> None:
        backoff = LoopBackoff()
        while True:
            self._wake = trio.Event()
            # The pass finds the next due time again: a task scheduled meanwhile wakes the
            # mover whatever it is due (compared with the last pass's, it was missed, and
            # waited up to MAX_SLEEP).
            self._next_due_ms = None
            begin = time.perf_counter()
            try:
                moved, next_due, unique = await self._move_set(elector, own=False)
                if not self._broker.keys.own_queue:  # the group's retries wait apart
                    more, own_due, own_unique = await self._move_set(elector, own=True)
                    moved += more
                    unique = unique + own_unique
                    if own_due is not None and (next_due is None or own_due < next_due):
                        next_due = own_due
            except BackendError as exc:
                self._errors.capture(exc)
                logger.warning("moving due delayed tasks failed: %s", exc)
                await self._quarantine.after_error(exc)
                await trio.sleep(backoff.next_delay())
                continue
            backoff.reset()
            self.passes += 1
            seconds = time.perf_counter() - begin
            self.pass_seconds += seconds
            self._on_pass(seconds)
            self.moved += moved
            if moved:
                logger.debug("moved %d due delayed tasks into the stream", moved)
            if moved + len(unique) >= MOVE_BATCH:
                await trio.lowlevel.checkpoint()
                continue
            self._next_due_ms = next_due
            delay = MAX_SLEEP if next_due is None else (next_due - wall_ms()) / 1000
            with trio.move_on_after(min(MAX_SLEEP, max(delay, 0.0))):
                await self._wake.wait()

    async def _move_set(
        self, elector: Elector, *, own: bool
    ) -> tuple[int, float | None, list[str]]:
        """One pass over the queue's delayed set, or with ``own`` the group's retries:
        (moved, next due ms, the due unique ones that were looked at)."""
        moved, next_due, unique = await self._broker.move_due(
            elector, wall_ms(), MOVE_BATCH, own=own
        )
        if unique:
            moved += await self._move_unique(elector, unique, own=own)
        return moved, next_due, unique

    async def _move_unique(self, elector: Elector, unique: list[str], *, own: bool) -> int:
        """Move due unique tasks, each taking its lock; set aside those whose stored lock
        cannot be read. Returns how many were moved."""
        moved, dropped, bad = await self._broker.move_unique(elector, unique, own=own)
        self.unique_dropped += dropped
        if dropped:
            logger.warning(
                "dropped %d of the due unique delayed tasks %s: their keys were locked",
                dropped,
                ", ".join(unique[:10]) + (" ..." if len(unique) > 10 else ""),
            )
        quarantine = self._quarantine
        action = "removed from the delayed tasks (its message is in this record)"
        for task_id, stored, reason in bad:
            record = quarantine.fields("delayed:unique", task_id, reason, stored, action)
            if await self._broker.set_aside_delayed(elector, task_id, record, QUARANTINE_MAXLEN):
                quarantine.noted("delayed:unique", task_id, reason, action)
        return moved

    async def _listen(self, *, task_status: trio.TaskStatus[None]) -> None:
        """Wake-ups from other instances: a task due sooner than any other was scheduled."""
        subscriber = self._broker.open_wake_subscriber()
        backoff = LoopBackoff()
        try:
            try:
                await subscriber.subscribe()
            except BackendError as exc:
                logger.debug("subscribing to delayed wake-ups failed (retrying): %s", exc)
            task_status.started()
            while True:
                try:
                    data = await subscriber.next_message()
                except BackendError:
                    await trio.sleep(backoff.next_delay())
                    continue
                backoff.reset()
                try:
                    self.due_at(int(data))
                except ValueError:
                    self._wake.set()
        finally:
            with trio.CancelScope(shield=True):
                await subscriber.aclose()
