"""Feeding the pool: fetch loops that read new messages and reclaim abandoned ones.

A fetch loop first reserves free worker slots, then fills them: with abandoned or released
messages when a reclaim pass is due (XAUTOCLAIM, at most every ``reclaim_interval`` across
the instance's loops), and otherwise with new messages (XREADGROUP BLOCK). It never takes
more messages than it holds slots for, and it never blocks longer than the next reclaim pass
is due, so slots held by a blocked read never delay recovery. With several priority lanes,
how a read divides among them is :mod:`trunner._engine.lanes`.

While the group is paused (:mod:`trunner._engine.pausing`) a loop neither reads nor claims: it
waits at the runner's pause gate, and a pause ends its wait for slots, its backoff or its
blocked read at once. What a read or claim returns after the pause is not started: it is
released for immediate reclaim, and the first loop to pass the gate again runs a reclaim
pass.

Each loop owns one consumer name and is the only one that delivers into it, so after a read
or claim that failed midway (its reply lost), the loop itself can safely release the
entries Redis delivered that it never saw (:mod:`trunner._engine.release`).

:meth:`Fetcher.stop` and :meth:`Fetcher.nudge` are synchronous: a small task beside the
loop sends the ``CLIENT UNBLOCK`` that ends a blocked read, so the read returns what Redis
delivered to it (never lost to a cancellation).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TypeVar

import trio

from .._redis import Broker, RawEntry, Reader
from .._util import ErrorLog, LoopBackoff, logger
from .._wire.names import DEFAULT_LANE
from ..config import RunnerConfig
from ..errors import BackendError
from .counters import Counters
from .lanes import Lanes, split_excess
from .pausing import PauseGate
from .pool import WorkerPool
from .quarantine import Quarantine
from .release import Releaser

__all__ = ["Fetcher", "ReclaimSchedule"]

T = TypeVar("T")

#: The shortest BLOCK of one read (ms resolution in Redis).
MIN_BLOCK = 0.001


class ReclaimSchedule:
    """When the next reclaim pass is due, shared by an instance's fetch loops; and where
    the pass goes on in each lane."""

    def __init__(self, interval: float, lanes: Sequence[str] = (DEFAULT_LANE,)) -> None:
        self.interval = interval
        self.next_at = trio.current_time()
        self.cursors = dict.fromkeys(lanes, "0-0")

    @property
    def cursor(self) -> str:
        """Where the pass goes on in the default lane."""
        return self.cursors[DEFAULT_LANE]

    def take(self) -> bool:
        """Claim the pass if it is due (so only one loop runs it)."""
        now = trio.current_time()
        if now < self.next_at:
            return False
        self.next_at = now + self.interval
        return True

    def finished(self, more: bool) -> None:
        """Record the end of a pass; with ``more`` to claim, the next one is due at once."""
        if more:
            self.next_at = trio.current_time()

    def failed(self) -> None:
        self.cursors = dict.fromkeys(self.cursors, "0-0")

    def due_now(self) -> None:
        """Make a pass due at once (after a pause: messages released during it wait)."""
        self.next_at = min(self.next_at, trio.current_time())


class Fetcher:
    """One fetch loop, reading and claiming into its own consumer until :meth:`stop`."""

    def __init__(
        self,
        broker: Broker,
        pool: WorkerPool,
        releaser: Releaser,
        quarantine: Quarantine,
        config: RunnerConfig,
        consumer: str,
        schedule: ReclaimSchedule,
        counters: Counters,
        errors: ErrorLog,
        gate: PauseGate,
    ) -> None:
        self._broker = broker
        self._gate = gate
        self._pool = pool
        self._releaser = releaser
        self._quarantine = quarantine
        self._config = config
        self.consumer = consumer
        self._schedule = schedule
        self._min_idle_ms = int(config.reclaim_delay * 1000)
        self._counters = counters
        self._errors = errors
        self._stopping = False
        self._wait_scope: trio.CancelScope | None = None
        self._reader: Reader | None = None
        self._backoff = LoopBackoff()
        self._dirty = False
        self._interrupt = trio.Event()
        self.stopped = trio.Event()
        #: How the reads divide among the lanes, with more than one.
        self._lane_reads = Lanes(broker, config)
        self._lanes = self._lane_reads.count  # checked on every read: one lane reads at once

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Fetch until :meth:`stop`; ``stopped`` is set once the loop has returned."""
        self._reader = reader = self._broker.open_reader()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._interrupter, reader)
                nursery.start_soon(self._halt_on_pause)
                task_status.started()
                while not self._stopping:
                    await self._step(reader)
                nursery.cancel_scope.cancel()
        finally:
            await reader.aclose()
            self.stopped.set()

    async def _interrupter(self, reader: Reader) -> None:
        """End a blocked read whenever asked (stop, nudge), on another connection."""
        while True:
            await self._interrupt.wait()
            self._interrupt = trio.Event()
            try:
                await reader.interrupt()
            except BackendError as exc:  # the read ends by its BLOCK time, or cancellation
                logger.debug("interrupting a blocked read failed: %s", exc)

    async def _halt_on_pause(self) -> None:
        """When the group is paused, end a wait for slots, a backoff or a blocked read at
        once: the loop then waits at the gate."""
        gate = self._gate
        while True:
            await gate.wait_closed()
            if self._wait_scope is not None:
                self._wait_scope.cancel()
            self._interrupt.set()
            await gate.wait_open()

    async def _step(self, reader: Reader) -> None:
        if self._gate.paused:
            await self._wait_for_resume()
            return
        slots = 0
        with trio.CancelScope() as self._wait_scope:
            slots = await self._pool.reserve(self._config.batch_size)
        self._wait_scope = None
        if self._stopping or self._gate.paused:
            self._pool.unreserve(slots)
            return
        if self._schedule.take():
            slots = await self._reclaim(slots)
            if not slots:
                return
        entries: list[RawEntry] | None = None
        if self._lanes > 1:
            entries = await self._read_lanes(slots)
            if entries is None:
                return
        over: list[RawEntry] = []
        if not entries:
            block = min(self._config.block_duration, self._schedule.next_at - trio.current_time())
            count = -(-slots // self._lanes)  # per lane: at most one lane's share over
            entries = await self._call(
                self._broker.read(reader, self.consumer, count, max(block, MIN_BLOCK)),
                slots,
                "reading the stream",
            )
            if entries is not None and len(entries) > slots:
                # Redis counts per stream: what is beyond the slots goes back, lowest
                # lanes first (its delivery does not count).
                entries, over = split_excess(entries, slots, self._lane_reads.rank)
                self._releaser.hand_back(self.consumer, [e.message_id for e in over])
        if entries is not None:
            self._counters.fetched += len(entries)
            if self._lanes > 1:
                self._lane_reads.counted(self._counters, entries)
            if self._paused() and entries:  # paused during the read
                self._hand_back(entries, slots)
                await self._release_excess()
            elif self._pool.submit(entries, slots, self.consumer) or over:
                await self._release_excess()
            await self._recover()

    async def _read_lanes(self, slots: int) -> list[RawEntry] | None:
        """Fill ``slots`` reserved slots with new entries of the lanes, without waiting
        (see :meth:`Lanes.read <trunner._engine.lanes.Lanes.read>`). None when the first
        read failed (the slots are given back, the loop backs off)."""
        try:
            entries, exc = await self._lane_reads.read(self.consumer, slots)
        except BaseException:
            self._pool.unreserve(slots)
            raise
        if exc is not None:
            if not entries:
                self._pool.unreserve(slots)
                await self._failed(exc, "reading the lanes")
                return None
            # What was read goes on; what the failed read delivered is released by _recover.
            self._errors.capture(exc)
            self._dirty = True
            logger.warning("reading a lane failed (consumer %s): %s", self.consumer, exc)
            return entries
        self._backoff.reset()
        return entries

    def _paused(self) -> bool:
        """Whether the group is paused now (a call: it may have changed since the last
        look, across an await)."""
        return self._gate.paused

    async def _wait_for_resume(self) -> None:
        with trio.CancelScope() as self._wait_scope:
            if not self._stopping:
                await self._gate.park()
                self._schedule.due_now()
        self._wait_scope = None

    def _hand_back(self, entries: list[RawEntry], slots: int) -> None:
        """Entries a read or claim returned after the group was paused: not started, but
        queued for release (``_release_excess`` releases them)."""
        self._pool.unreserve(slots)
        self._releaser.hand_back(self.consumer, [e.message_id for e in entries])

    async def _reclaim(self, slots: int) -> int:
        """Fill ``slots`` reserved slots with abandoned or released messages, lane by lane
        in priority order; return how many slots are left."""
        schedule = self._schedule
        more = False
        for lane in self._broker.lanes:
            if not slots:
                more = True
                break
            reply = await self._call(
                self._broker.reclaim(
                    self.consumer, self._min_idle_ms, schedule.cursors[lane], slots, lane
                ),
                slots,
                "reclaiming",
            )
            if reply is None:
                schedule.failed()
                return 0
            cursor, entries = reply
            schedule.cursors[lane] = cursor
            more = more or cursor != "0-0" or len(entries) == slots
            if entries:
                slots = await self._claimed(entries, slots)
                if not slots and self._paused():
                    return 0
        schedule.finished(more)
        return slots

    async def _claimed(self, entries: list[RawEntry], slots: int) -> int:
        """Hand reclaimed ``entries`` to the pool on ``slots`` reserved slots; return how
        many slots are left."""
        self._counters.reclaimed += len(entries)
        if self._lanes > 1:
            self._lane_reads.counted(self._counters, entries)
        if self._paused():
            self._hand_back(entries, slots)
            await self._release_excess()
            return 0
        logger.info("reclaimed %d abandoned or released messages", len(entries))
        rest = slots - len(entries)
        excess = self._pool.submit(entries, len(entries), self.consumer)
        try:
            if excess:
                await self._release_excess()
            await self._recover()
        except BaseException:
            self._pool.unreserve(rest)
            raise
        return rest

    async def _call(self, call: Awaitable[T], slots: int, what: str) -> T | None:
        """Await a read or claim; on failure free ``slots``, back off, return None."""
        try:
            result: T = await call
        except BackendError as exc:
            self._pool.unreserve(slots)
            await self._failed(exc, what)
            return None
        except BaseException:
            self._pool.unreserve(slots)
            raise
        self._backoff.reset()
        return result

    async def _failed(self, exc: BackendError, what: str) -> None:
        self._errors.capture(exc)
        self._dirty = True
        logger.warning("%s failed (consumer %s); retrying: %s", what, self.consumer, exc)
        if "NOGROUP" in str(exc):
            await self._recreate_group()
        else:
            await self._quarantine.after_error(exc)
        with trio.CancelScope() as self._wait_scope:
            if not self._stopping:
                await trio.sleep(self._backoff.next_delay())
        self._wait_scope = None

    async def _recreate_group(self) -> None:
        """The consumer group is gone (deleted, or Redis restored without it): create it
        again from its recorded floor (see ``Broker.record_floor``), and say so."""
        try:
            start = await self._broker.ensure_group()
        except BackendError as again:
            self._errors.capture(again)
            return
        if start is not None:
            await self._quarantine.set_aside(
                "group",
                self._broker.group,
                "the consumer group was gone (deleted, or Redis restored without it)",
                b"",
                f"recreated from id {start}: messages after it that ran before run again",
            )

    async def _release_excess(self) -> None:
        """Hand back entries fetched beyond a capacity lowered while the read was blocked,
        or after the group was paused."""
        try:
            await self._releaser.release_queued()
        except BackendError as exc:  # they stay queued: the next _recover tries again
            self._errors.capture(exc)
            self._dirty = True

    async def _recover(self) -> None:
        """After a failed call or release, release what is still queued for release and
        what Redis delivered to us that we never saw."""
        if not self._dirty:
            return
        try:
            released = await self._releaser.release_queued()
            orphans = await self._releaser.release_orphans(self.consumer)
        except BackendError as exc:
            self._errors.capture(exc)
            return
        self._dirty = False
        if released or orphans:
            logger.info(
                "released %d entries queued for release and %d delivered to a failed read",
                released,
                orphans,
            )

    def nudge(self) -> None:
        """Make a blocked read return now (it gives its slots back and reserves again)."""
        self._interrupt.set()

    def stop(self) -> None:
        """Stop fetching: wake a wait, and interrupt a blocked read; ``stopped`` is set
        once the loop has returned."""
        self._stopping = True
        if self._wait_scope is not None:
            self._wait_scope.cancel()
        self._interrupt.set()
