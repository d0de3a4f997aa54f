"""The leadership runs the leader chores for exactly as long as each leadership lasts, and
supervises them.

On every promotion of the runner's elector it opens a nursery and starts each chore in it
(the delayed mover, cron, the aggregator, the janitor, and chores added by the user); on
demotion it cancels that nursery. A chore whose fenced write is refused (the lease is gone
although the elector has not noticed yet) makes the elector step down at once.

Supervision: a chore that fails in any other way (a defect, or data it did not contain
itself) is restarted after an exponential backoff (:data:`RESTART_FIRST` to
:data:`RESTART_CAP` seconds); the error is captured (``Runner.errors()``), counted
(``statistics().chores_restarted``) and logged. A chore never ends the runner, so the next
leader does not fail on the same data after it: the group keeps its other chores, and
its workers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import trio

from .._engine.counters import Counters
from .._util import ErrorLog, LoopBackoff, leaf_exceptions, logger
from ..errors import LeadershipLost
from .election import Elector

__all__ = ["RESTART_CAP", "RESTART_FIRST", "Chore", "Leadership"]

#: A leader chore: ``async def chore(elector)``, cancelled when the leadership ends.
Chore = Callable[[Elector], Awaitable[None]]

#: The first pause before a failed chore is restarted, and the longest.
RESTART_FIRST = 1.0
RESTART_CAP = 60.0


class Leadership:
    """Runs ``chores`` while ``elector`` leads, until :meth:`stop`."""

    def __init__(
        self,
        elector: Elector,
        chores: Sequence[Chore],
        counters: Counters | None = None,
        errors: ErrorLog | None = None,
    ) -> None:
        self._elector = elector
        self._chores = chores
        self._counters = counters or Counters()
        self._errors = errors if errors is not None else ErrorLog()
        self._scope = trio.CancelScope()
        self.stopped = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the chores during each leadership until :meth:`stop` (or cancellation)."""
        elector = self._elector
        try:
            with self._scope:
                task_status.started()
                while True:
                    await elector.wait_promoted()
                    async with trio.open_nursery() as chores:
                        for chore in self._chores:
                            chores.start_soon(self._supervise, chore)
                        await elector.wait_demoted()
                        chores.cancel_scope.cancel()
        finally:
            self.stopped.set()

    def stop(self) -> None:
        """Cancel the chores now and return from :meth:`run` (the lease stays held: the
        elector releases it when it stops)."""
        self._scope.cancel()

    async def _supervise(self, chore: Chore) -> None:
        """Run ``chore`` until it returns, restarting it after each failure."""
        elector = self._elector
        backoff = LoopBackoff(first=RESTART_FIRST, cap=RESTART_CAP)
        name = getattr(chore, "__qualname__", repr(chore))
        while True:
            lost: str | None = None
            failure: BaseExceptionGroup[Exception] | None = None
            began = trio.current_time()
            try:
                await chore(elector)
            except* LeadershipLost as group:  # a fenced write was refused: the lease is gone
                lost = str(group.exceptions[0])
            except* Exception as group:  # noqa: BLE001 - supervision: contained, restarted
                failure = group
            else:
                return
            if lost is not None:
                elector.step_down(lost)
                return
            assert failure is not None
            if trio.current_time() - began > RESTART_CAP:
                backoff.reset()  # it ran well for a while: this failure is a new one
            delay = backoff.next_delay()
            self._counters.chores_restarted += 1
            for error in leaf_exceptions(failure):
                self._errors.capture(error)
            logger.error(
                "leader chore %s failed; restarting it in %.1f s", name, delay, exc_info=failure
            )
            await trio.sleep(delay)
