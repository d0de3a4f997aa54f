"""Feeding the pool: XREADGROUP fetchers, and the reclaimer of abandoned messages.

Each loop owns one consumer name and is the only one that delivers into it, so after a read
or claim that failed midway (its reply lost), the loop itself can safely release the
entries Redis delivered that it never saw.
"""

from __future__ import annotations

import trio

from ._redis import Broker, Reader
from ._util import ErrorLog, LoopBackoff, logger
from .config import RunnerConfig
from .errors import BackendError
from .pool import WorkerPool
from .stats import Counters

__all__ = ["Fetcher", "Reclaimer"]


class _Loop:
    """What fetchers and the reclaimer share: a stop flag, interruptible waits, error handling."""

    def __init__(
        self,
        broker: Broker,
        pool: WorkerPool,
        config: RunnerConfig,
        consumer: str,
        counters: Counters,
        errors: ErrorLog,
    ) -> None:
        self._broker = broker
        self._pool = pool
        self._config = config
        self.consumer = consumer
        self._counters = counters
        self._errors = errors
        self._stopping = False
        self._wait_scope: trio.CancelScope | None = None
        self._backoff = LoopBackoff()
        self._dirty = False
        self.done = trio.Event()

    async def _wait(self, seconds: float) -> None:
        """Sleep, unless or until :meth:`stop` is called."""
        with trio.CancelScope() as self._wait_scope:
            if not self._stopping:
                await trio.sleep(seconds)
        self._wait_scope = None

    async def _failed(self, exc: BackendError, what: str) -> None:
        self._errors.capture(exc)
        self._dirty = True
        logger.warning("%s failed (%s); retrying: %s", what, self.consumer, exc)
        if "NOGROUP" in str(exc):
            try:
                await self._broker.ensure_group()
            except BackendError as again:
                self._errors.capture(again)
        await self._wait(self._backoff.next_delay())

    async def _recover(self) -> None:
        """After a failed call, release what Redis delivered to us that we never saw."""
        if not self._dirty:
            return
        try:
            released = await self._pool.release_orphans(self.consumer)
        except BackendError as exc:
            self._errors.capture(exc)
            return
        self._dirty = False
        if released:
            logger.info("released %d entries delivered to a failed read", released)

    def _stop_waiting(self) -> None:
        self._stopping = True
        if self._wait_scope is not None:
            self._wait_scope.cancel()


class Fetcher(_Loop):
    """Reads new messages with XREADGROUP, never more than the free worker slots."""

    _reader: Reader | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._reader = reader = self._broker.open_reader(self.consumer)
        try:
            task_status.started()
            while not self._stopping:
                await self._step(reader)
        finally:
            await reader.aclose()
            self.done.set()

    async def _step(self, reader: Reader) -> None:
        with trio.CancelScope() as self._wait_scope:
            slots = await self._pool.reserve(self._config.batch_size)
        self._wait_scope = None
        if self._stopping or not slots:
            self._pool.unreserve(slots)
            return
        try:
            entries = await self._broker.read(
                reader, self.consumer, len(slots), self._config.block_duration
            )
        except BackendError as exc:
            self._pool.unreserve(slots)
            await self._failed(exc, "reading the stream")
            return
        except BaseException:
            self._pool.unreserve(slots)
            raise
        self._counters.fetched += len(entries)
        self._pool.submit(entries, slots, self.consumer)
        self._backoff.reset()
        await self._recover()

    async def stop(self) -> None:
        """Stop reading: wake a wait, and interrupt a blocked read."""
        self._stop_waiting()
        if self._reader is not None:
            try:
                await self._reader.interrupt()
            except BackendError as exc:  # the read ends by cancellation instead
                logger.debug("interrupting a blocked read failed: %s", exc)


class Reclaimer(_Loop):
    """Claims messages idle longer than ``reclaim_delay`` (dead consumer) or released ones."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            task_status.started()
            await self._loop()
        finally:
            self.done.set()

    async def _loop(self) -> None:
        cursor = "0-0"
        min_idle_ms = int(self._config.reclaim_delay * 1000)
        while not self._stopping:
            slots = self._pool.try_reserve(self._config.batch_size)
            if not slots:
                await self._wait(self._config.reclaim_interval)
                continue
            try:
                cursor, entries = await self._broker.reclaim(
                    self.consumer, min_idle_ms, cursor, len(slots)
                )
            except BackendError as exc:
                self._pool.unreserve(slots)
                cursor = "0-0"
                await self._failed(exc, "reclaiming")
                continue
            except BaseException:
                self._pool.unreserve(slots)
                raise
            if entries:
                self._counters.reclaimed += len(entries)
                logger.info("reclaimed %d abandoned or released messages", len(entries))
            self._pool.submit(entries, slots, self.consumer)
            self._backoff.reset()
            await self._recover()
            if cursor == "0-0" and len(entries) < len(slots):
                await self._wait(self._config.reclaim_interval)

    async def stop(self) -> None:
        self._stop_waiting()
        await trio.lowlevel.checkpoint()
