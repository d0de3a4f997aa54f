"""The elector: a fenced Redis lease, on its own (the public names are re-exported, and
the lease described, by ``trunner.election``).
"""

from __future__ import annotations

import random
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from .. import _validate as v
from .._redis import Arg, LeaseStore, Script, Transport, fenced_script, open_transport
from .._util import (
    EventLog,
    LoopBackoff,
    connection_name,
    instance_id,
    logger,
    run_in_background,
    wall_ms,
)
from ..errors import BackendError, BadData, ElectorCrashed, LeadershipLost

__all__ = [
    "Demoted",
    "ElectionEvent",
    "ElectionFailed",
    "Elector",
    "Promoted",
    "open_elector",
]

#: Bound on releasing the lease when the elector stops.
RELEASE_TIMEOUT = 5.0


@attrs.frozen
class Promoted:
    """This elector became the leader."""

    fence: int
    """The fence number of this leadership."""
    at: float = attrs.field(factory=trio.current_time)
    """When, on the Trio clock."""


@attrs.frozen
class Demoted:
    """This elector stopped being the leader, and why."""

    reason: str
    """Why: for example ``"released"``, ``"the lease was taken over"``, ``"renewing
    failed: ..."``."""
    at: float = attrs.field(factory=trio.current_time)
    """When, on the Trio clock."""


@attrs.frozen
class ElectionFailed:
    """A Redis call of the election failed.

    An event that [``Elector.events``][trunner.election.Elector.events] yields, not an
    exception. Formerly ``ElectionError``, a deprecated alias until the next release.
    """

    error: BaseException
    """The error."""
    during: str
    """``"acquire"``, ``"renew"`` or ``"release"``."""
    at: float = attrs.field(factory=trio.current_time)
    """When, on the Trio clock."""


ElectionEvent = Promoted | Demoted | ElectionFailed
"""What [``Elector.events``][trunner.election.Elector.events] yields."""


class Elector:
    """One candidate for the lease on ``key``.

    Get one from [``open_elector``][trunner.election.open_elector], or a runner's
    ([``Runner.elector``][trunner.Runner.elector]); do not create it yourself. ``key``,
    ``id``, ``ttl``, ``wait`` and ``jitter`` are as given to ``open_elector`` (the numbers
    as floats).
    """

    def __init__(
        self,
        transport: Transport,
        key: str,
        *,
        ttl: float = 5.0,
        wait: float = 6.0,
        jitter: float = 0.005,
        id: str | None = None,
        on_bad_data: Callable[[str, str], Awaitable[object]] | None = None,
    ) -> None:
        if not isinstance(key, str) or not key:
            raise ValueError(f"key must be a non-empty str, got {key!r}")
        v.check_positive_number("ttl", ttl)
        v.check_positive_number("wait", wait)
        v.check_non_negative_number("jitter", jitter)
        if id is not None and (not isinstance(id, str) or not id):
            raise ValueError(f"id must be a non-empty str, got {id!r}")
        self.key = key
        """The lease's key."""
        self.id = id or instance_id()
        """This elector's id: the value of the lease while it leads."""
        self.ttl = float(ttl)
        """The lease's time-to-live, in seconds."""
        self.wait = float(wait)
        """How often a follower tries to take the lease, in seconds."""
        self.jitter = float(jitter)
        """The most random extra delay of each renewal, in seconds."""
        self._ttl_ms = max(1, int(self.ttl * 1000))
        self._store = LeaseStore(transport, key)
        self._on_bad_data = on_bad_data
        self._leader = False
        self._fence: int | None = None
        self._valid_until = 0.0
        self._promoted = trio.Event()
        self._demoted = trio.Event()
        self._demoted.set()
        self._wake = trio.Event()
        self._stopping = False
        self._lost_at: float | None = None
        self._events: EventLog[ElectionEvent] = EventLog(maxlen=100)
        self._scripts: dict[str, Script] = {}
        self.promotions = 0
        """How many times this elector was promoted."""
        self.stopped = trio.Event()
        """Set once [``run``][trunner.election.Elector.run] has returned (the lease released
        if it was held)."""

    @property
    def done(self) -> trio.Event:
        """Deprecated alias of ``stopped``."""
        warnings.warn(
            "Elector.done is deprecated, use Elector.stopped", DeprecationWarning, stacklevel=2
        )
        return self.stopped

    def __repr__(self) -> str:
        role = f"leader (fence {self._fence})" if self._leader else "follower"
        return f"<Elector key={self.key!r} id={self.id!r} {role}>"

    # -- public face ------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """Whether this elector holds the lease, as far as it knows without asking Redis."""
        return self._leader

    @property
    def fence(self) -> int | None:
        """The fence number of the current leadership; ``None`` when not the leader."""
        return self._fence

    async def wait_promoted(self) -> None:
        """Return once this elector is the leader (at once if it is)."""
        await self._promoted.wait()

    async def wait_demoted(self) -> None:
        """Return once this elector is not the leader (at once if it is not)."""
        await self._demoted.wait()

    def events(self) -> AsyncIterator[ElectionEvent]:
        """Promotions, demotions and Redis errors, as they happen.

        The elector never waits for the reader: the newest 100 events are kept. Each event
        is yielded to one reader only. The iteration ends after the ``open_elector``
        block, or once the runner stopped. A cancelled read takes no event.
        """
        return aiter(self._events)

    async def current_leader(self) -> str | None:
        """The id of the lease's holder, according to Redis (``GET``); ``None`` when
        nobody holds it."""
        return await self._store.holder()

    async def eval_fenced(
        self, body: str, keys: Sequence[str] = (), args: Sequence[Arg] = ()
    ) -> Any:
        """Run the Lua ``body`` only if this elector still holds the lease, atomically.

        The lease is checked inside Redis, in the same script. In ``body``, ``KEYS[1]`` is
        the lease key and ``ARGV[1]`` the holder's id; your keys start at ``KEYS[2]`` and
        your arguments at ``ARGV[2]``. Pass every key you touch in ``keys``; with Redis
        Cluster in mind, keep them in the lease's hash slot. A refused write does not
        make the elector step down: call [``step_down``][trunner.election.Elector.step_down].

        Args:
            body: The Lua script.
            keys: Your keys, ``KEYS[2]`` on.
            args: Your arguments, ``ARGV[2]`` on.

        Returns:
            The script's reply, raw (bytes, ints, lists).

        Raises:
            LeadershipLost: The lease is not held by this elector; nothing was written.
        """
        if not self._leader:
            raise LeadershipLost(f"{self!r} is not the leader")
        script = self._scripts.get(body)
        if script is None:
            script = self._scripts[body] = fenced_script("user", body)
        return await self._store.fenced(script, self.id, keys, args)

    async def run_fenced(self, script: Script, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """Internal: run one of trunner's own fenced scripts as this leader (see
        [``eval_fenced``][trunner.election.Elector.eval_fenced])."""
        if not self._leader:
            raise LeadershipLost(f"{self!r} is not the leader")
        return await self._store.fenced(script, self.id, keys, args)

    def step_down(self, reason: str) -> None:
        """Stop acting as the leader now, for example after a fenced write was refused.

        It does nothing when this elector is not the leader. The elector runs for election
        again after ``wait``.

        Args:
            reason: Why; the ``Demoted`` event carries it.
        """
        if self._leader:
            self._demote(reason)
            self._lost_at = trio.current_time()
            self._wake.set()

    def stop(self) -> None:
        """Stop campaigning: [``run``][trunner.election.Elector.run] releases the lease if
        held, and returns."""
        self._stopping = True
        self._wake.set()

    # -- the campaign -----------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The campaign, until [``stop``][trunner.election.Elector.stop]; ``open_elector``
        runs it for you.

        The first election attempt is made before ``task_status.started()``. On the way
        out, even when cancelled, the lease is released if held (shielded, bounded by
        5 s), and followers are told at once.
        """
        async with trio.open_nursery() as nursery:
            await nursery.start(self._listen)
            try:
                await self._attempt()
                task_status.started()
                await self._campaign()
            finally:
                nursery.cancel_scope.cancel()
                with trio.move_on_after(RELEASE_TIMEOUT, shield=True):
                    await self._release()
                self.stopped.set()

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

    # -- transitions ------------------------------------------------------------------------

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


@asynccontextmanager
async def open_elector(
    redis: str,
    key: str,
    *,
    ttl: float = 5.0,
    wait: float = 6.0,
    jitter: float = 0.005,
    id: str | None = None,
    connect_timeout: float = 5.0,
) -> AsyncIterator[Elector]:
    """Campaign for the lease on ``key`` for the duration of the block.

    When the block starts, the first election attempt has been made, and ``is_leader``
    tells its outcome. Leaving the block releases the lease if held, and tells the
    followers at once.

    Args:
        redis: The Redis URL, as for [``open_runner``][trunner.open_runner].
        key: The lease's key, a non-empty string.
        ttl: The lease's time-to-live (> 0). A crashed holder is replaced after it.
        wait: How often followers try to take the lease (> 0).
        jitter: The random extra delay of each renewal (>= 0).
        id: This elector's id, a non-empty string. Default:
            ``<host>:<pid>:<6 hex digits>``.
        connect_timeout: Redis must answer a ``PING`` within this time.

    Yields:
        The [``Elector``][trunner.election.Elector].

    Raises:
        ValueError: An empty ``key`` or ``id``, or a number out of range (checked once
            Redis answered).
        TypeError: A number of the wrong type (checked once Redis answered).
        RedisUnavailable: Redis cannot be reached within ``connect_timeout``.
        ElectorCrashed: The elector's background task failed.

    An exception from the block leaves as itself.

    Examples:
        ```python
        import trio

        import trunner
        from trunner.election import open_elector


        async def main() -> None:
            url = "memory://election"
            async with open_elector(url, "reports:{nightly}:leader", id="a") as a:
                async with open_elector(url, "reports:{nightly}:leader", id="b") as b:
                    print("a leads:", a.is_leader, "fence", a.fence, "| b leads:", b.is_leader)
                    print("current leader:", await b.current_leader())
                    count = await a.eval_fenced(
                        "return redis.call('INCR', KEYS[2])", keys=["reports:{nightly}:runs"]
                    )
                    print("fenced INCR as a:", count)
                    try:
                        await b.eval_fenced("return 1")
                    except trunner.LeadershipLost as exc:
                        print("b:", type(exc).__name__)


        trio.run(main)
        ```

        ```text
        a leads: True fence 1 | b leads: False
        current leader: a
        fenced INCR as a: 1
        b: LeadershipLost
        ```
    """
    async with open_transport(
        redis,
        client_name=connection_name("trunner-elector"),
        max_connections=4,
        connect_timeout=connect_timeout,
    ) as transport:
        elector = Elector(transport, key, ttl=ttl, wait=wait, jitter=jitter, id=id)

        def crashed(what: str) -> ElectorCrashed:
            return ElectorCrashed(f"the elector of {key!r} failed: {what}")

        try:
            async with run_in_background(elector.run, elector.stop, crashed):
                yield elector
        finally:
            elector._close()
