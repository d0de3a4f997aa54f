"""Moving due delayed messages (retries) from the group's sorted set into its stream.

Every runner runs the mover for now; each move is one atomic, capped script, so concurrent
movers neither lose nor duplicate a message.
"""

from __future__ import annotations

import trio

from ._redis import Broker
from ._util import ErrorLog, LoopBackoff, logger, wall_ms
from .errors import BackendError

__all__ = ["DelayedMover"]

#: The most entries one script call moves.
MOVE_BATCH = 200
#: The longest the mover sleeps without looking (entries added by other instances).
MAX_SLEEP = 1.0


class DelayedMover:
    def __init__(self, broker: Broker, errors: ErrorLog) -> None:
        self._broker = broker
        self._errors = errors
        self._wake = trio.Event()
        self._next_due_ms: float | None = None
        self.passes = 0

    def due_at(self, due_ms: int) -> None:
        """A message was scheduled for ``due_ms``: wake early if it is due first."""
        if self._next_due_ms is None or due_ms < self._next_due_ms:
            self._next_due_ms = due_ms
            self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        backoff = LoopBackoff()
        while True:
            self._wake = trio.Event()
            try:
                moved, next_due = await self._broker.move_due(wall_ms(), MOVE_BATCH)
            except BackendError as exc:
                self._errors.capture(exc)
                logger.warning("moving due delayed messages failed: %s", exc)
                await trio.sleep(backoff.next_delay())
                continue
            backoff.reset()
            self.passes += 1
            if moved:
                logger.debug("moved %d due delayed messages into the stream", moved)
            if moved >= MOVE_BATCH:
                await trio.lowlevel.checkpoint()
                continue
            self._next_due_ms = next_due
            delay = MAX_SLEEP if next_due is None else (next_due - wall_ms()) / 1000
            with trio.move_on_after(min(MAX_SLEEP, max(delay, 0.0))):
                await self._wake.wait()
