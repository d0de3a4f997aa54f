"""The elector's face: ``Elector``, what its users call, and ``open_elector`` (the public
names are re-exported, and the lease described, by ``trunner.election``).
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio

from .. import _validate as v
from .._redis import Arg, LeaseStore, Script, Transport, fenced_script, open_transport
from .._util import (
    EventLog,
    connection_name,
    instance_id,
    run_in_background,
)
from ..errors import ElectorCrashed, LeadershipLost
from .campaign import RELEASE_TIMEOUT, Campaign
from .events import ElectionEvent

__all__ = ["Elector", "open_elector"]


class Elector(Campaign):
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
                    except trunner.errors.LeadershipLost as exc:
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
