"""The elector's campaign: take the lease when it is free, renew it on time while leading,
give it back when leading ends, and hear other holders release it."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from .._redis import LeaseStore
from .._util import EventLog, LoopBackoff, logger, wall_ms
from ..errors import BackendError, BadData
from .events import Demoted, ElectionEvent, ElectionFailed, Promoted

__all__ = ["RELEASE_TIMEOUT", "Campaign"]

#: Bound on releasing the lease when the elector stops.
RELEASE_TIMEOUT = 5.0


class Campaign:
    """The loop of an [``Elector``][trunner.election.Elector], and its transitions between
    follower and leader; the elector holds the state and the public face."""

    key: str
    id: str
    ttl: float
    wait: float
    jitter: float
    promotions: int
    _ttl_ms: int
    _store: LeaseStore
    _on_bad_data: Callable[[str, str], Awaitable[object]] | None
    _leader: bool
    _fence: int | None
    _valid_until: float
    _promoted: trio.Event
    _demoted: trio.Event
    _wake: trio.Event
    _stopping: bool
    _lost_at: float | None
    _events: EventLog[ElectionEvent]

    if TYPE_CHECKING:

        def step_down(self, reason: str) -> None: ...

    async def _campaign(self) -> None:
        while not self._stopping:
            if self._leader:
                await self._hold()
                continue
            if self._lost_at is not None:
                self._lost_at = None
                await self._give_back()
                await self._pause_after_loss()
            else:
                with trio.move_on_after(self.wait):
                    await self._wake.wait()
            if not self._stopping:
                await self._attempt()

    async def _attempt(self) -> None:
        """One election attempt: take the lease if it is free."""
        self._wake = trio.Event()
        if self._stopping:
            self._wake.set()
            return
        sent = trio.current_time()
        try:
            fence, repaired = await self._store.acquire(self.id, self._ttl_ms, wall_ms())
        except BackendError as exc:
            self._emit(ElectionFailed(exc, "acquire"))
            logger.warning("election attempt for %r failed: %s", self.key, exc)
            return
        if repaired:
            await self._bad_data(repaired)
        if not fence:
            return
        if trio.current_time() - sent >= self.ttl / 2:
            # Answered so late (Redis was paused or slow) that the lease would be due for
            # renewal already, if it is still valid at all. Leading on it would flap;
            # give it back at once instead, so the next attempt by anyone starts clean.
            logger.warning(
                "the lease %r was granted %.2f s after asking: giving it back",
                self.key,
                trio.current_time() - sent,
            )
            await self._give_back()
            return
        self._promote(fence, valid_until=sent + self.ttl)

    async def _hold(self) -> None:
        """As the leader: renew the lease on time, until stopped or it is lost."""
        renewed_at = self._valid_until - self.ttl
        renew_at = renewed_at + self.ttl / 2 + random.uniform(0, self.jitter)
        with trio.move_on_at(renew_at):
            await self._wake.wait()
        if self._stopping or not self._leader:
            return
        self._wake = trio.Event()
        sent = trio.current_time()
        with trio.move_on_at(self._valid_until) as scope:
            try:
                renewed = await self._store.renew(self.id, self._ttl_ms)
            except BackendError as exc:
                self._emit(ElectionFailed(exc, "renew"))
                self.step_down(f"renewing failed: {exc}")
                return
        if scope.cancelled_caught:
            self.step_down("the lease expired before its renewal was answered")
        elif not renewed:
            self._demote("the lease was taken over")
        else:
            self._valid_until = sent + self.ttl

    async def _pause_after_loss(self) -> None:
        """After losing the lease to an error, wait before running for election again."""
        with trio.move_on_after(self.wait):
            while not self._stopping:
                await self._wake.wait()
                self._wake = trio.Event()

    async def _listen(self, *, task_status: trio.TaskStatus[None]) -> None:
        """Wake the campaign when a leader releases the lease gracefully."""
        subscriber = self._store.open_subscriber()
        backoff = LoopBackoff()
        try:
            try:
                with trio.fail_after(self.ttl):
                    await subscriber.subscribe()
            except (BackendError, trio.TooSlowError) as exc:
                logger.debug("subscribing to lease releases failed (retrying): %s", exc)
            task_status.started()
            while True:
                try:
                    holder = await subscriber.next_message()
                except BackendError as exc:
                    logger.debug("listening for lease releases failed: %s", exc)
                    await trio.sleep(backoff.next_delay())
                    continue
                backoff.reset()
                if holder.decode(errors="replace") != self.id and not self._leader:
                    self._wake.set()
        finally:
            await subscriber.aclose()

    async def _give_back(self) -> None:
        """Delete the lease if it still names us (we stopped leading on an error or a late
        answer), so that other candidates need not wait for it to expire."""
        with trio.move_on_after(RELEASE_TIMEOUT):
            try:
                await self._store.release(self.id)
            except BackendError as exc:
                self._emit(ElectionFailed(exc, "release"))
                logger.debug("giving back the lease %r failed (it will expire): %s", self.key, exc)

    async def _release(self) -> None:
        if not self._leader:
            return
        self._demote("released")
        try:
            await self._store.release(self.id)
        except BackendError as exc:
            self._emit(ElectionFailed(exc, "release"))
            logger.warning("releasing the lease %r failed (it will expire): %s", self.key, exc)

    def _promote(self, fence: int, valid_until: float) -> None:
        self._leader = True
        self._fence = fence
        self._valid_until = valid_until
        self.promotions += 1
        self._demoted = trio.Event()
        self._promoted.set()
        self._emit(Promoted(fence))
        logger.info("promoted: %r leads %r (fence %d)", self.id, self.key, fence)

    def _demote(self, reason: str) -> None:
        if not self._leader:
            return
        self._leader = False
        self._fence = None
        self._promoted = trio.Event()
        self._demoted.set()
        self._emit(Demoted(reason))
        logger.info("demoted: %r no longer leads %r: %s", self.id, self.key, reason)

    async def _bad_data(self, repaired: str) -> None:
        """The acquire script set aside a lease or fence counter trunner cannot have
        written (see ``lease_acquire.lua``): say so, once per repair."""
        error = BadData("leader", self.key, repaired)
        self._emit(ElectionFailed(error, "acquire"))
        if self._on_bad_data is not None:
            await self._on_bad_data(self.key, repaired)
        else:
            logger.error("%s", error)

    def _emit(self, event: ElectionEvent) -> None:
        self._events.capture(event)

    def _close(self) -> None:
        self._events.close()
