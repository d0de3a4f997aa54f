"""The leadership runs the leader chores for exactly as long as each leadership lasts.

On every promotion of the runner's elector it opens a nursery and starts each chore in it
(the delayed mover, cron, the aggregator, the janitor, and chores added by the user); on
demotion it cancels that nursery. A chore whose fenced write is refused (the lease is gone
although the elector has not noticed yet) makes the elector step down at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import trio

from .election import Elector
from .errors import LeadershipLost

__all__ = ["Chore", "Leadership"]

#: A leader chore: ``async def chore(elector)``, cancelled when the leadership ends.
Chore = Callable[[Elector], Awaitable[None]]


class Leadership:
    """Runs ``chores`` while ``elector`` leads, until :meth:`stop`."""

    def __init__(self, elector: Elector, chores: Sequence[Chore]) -> None:
        self._elector = elector
        self._chores = chores
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
                            chores.start_soon(self._run_chore, chore)
                        await elector.wait_demoted()
                        chores.cancel_scope.cancel()
        finally:
            self.stopped.set()

    def stop(self) -> None:
        """Cancel the chores now and return from :meth:`run` (the lease stays held: the
        elector releases it when it stops)."""
        self._scope.cancel()

    async def _run_chore(self, chore: Chore) -> None:
        elector = self._elector
        try:
            await chore(elector)
        except* LeadershipLost as group:  # a fenced write was refused: the lease is gone
            elector.step_down(str(group.exceptions[0]))
