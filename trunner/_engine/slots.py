"""Worker slots: how many messages the pool may hold at once, and how many it holds.

A counting limiter, like :class:`trio.CapacityLimiter` but with tokens that are plain counts:
a read reserves up to ``batch_size`` slots in one call and each finished message gives one
back, with no borrower object per token (the per-message cost of a busy runner matters).

Takers (the fetch loops) are served in FIFO order: a slot given back while one waits is
handed to it at once, so a loop that gives its slots back and takes again without a
checkpoint between cannot starve the others.
"""

from __future__ import annotations

import trio

__all__ = ["WorkerSlots"]


class WorkerSlots:
    def __init__(self, total: int) -> None:
        self._total = total
        self._used = 0
        self._waiters = trio.lowlevel.ParkingLot()

    @property
    def total_tokens(self) -> int:
        """The capacity; lowering it below what is held frees nothing, it only refuses more."""
        return self._total

    @total_tokens.setter
    def total_tokens(self, value: int) -> None:
        if type(value) is not int or value < 1:
            raise ValueError(f"the capacity must be an integer >= 1, got {value!r}")
        self._total = value
        self._hand_over()

    @property
    def borrowed_tokens(self) -> int:
        """Slots held now (by reads in progress and by messages in the pool)."""
        return self._used

    def take_nowait(self, count: int) -> int:
        """Take up to ``count`` free slots; how many were taken (0 while others wait)."""
        if self._waiters:
            return 0
        return self._grab(count)

    def _grab(self, count: int) -> int:
        taken = min(count, self._total - self._used)
        if taken <= 0:
            return 0
        self._used += taken
        return taken

    async def take(self, count: int) -> int:
        """Take at least one and up to ``count`` slots, waiting until one is free.

        Returns at once, without a checkpoint, when slots are free: the caller's next step
        is a Redis read, which is one.
        """
        taken = self.take_nowait(count)
        if taken:
            return taken
        await self._waiters.park()  # woken holding one slot, handed over by _hand_over()
        return 1 + self._grab(count - 1)

    def give(self, count: int = 1) -> None:
        """Give ``count`` slots back."""
        used = self._used - count
        if used < 0:
            raise RuntimeError("more worker slots given back than were taken")
        self._used = used
        self._hand_over()

    def _hand_over(self) -> None:
        """Free slots go to the waiting takers, one each, first come first served."""
        while self._waiters and self._used < self._total:
            self._used += 1
            self._waiters.unpark()
