"""The acknowledgement buffer: finished messages are acknowledged in batches, by size or
time, whichever comes first.

A finished message stays in :attr:`Holdings.finished <trunner.holdings.Holdings.finished>`
from :meth:`AckBuffer.add` until a flush wrote its acknowledgement: a failed or cancelled
flush puts it back, so a finished task is never forgotten (and never released to run again
as if it had not run). Meanwhile the heartbeater keeps its reservation fresh, so it is not
reclaimed and run again while its acknowledgement waits for Redis. A unique task's lock is
released by the same script that acknowledges it.
"""

from __future__ import annotations

import trio

from ._redis import Broker
from ._util import ErrorLog, LoopBackoff, logger
from .config import RunnerConfig
from .errors import BackendError
from .holdings import Holdings, Job
from .statistics import Counters

__all__ = ["AckBuffer"]


class AckBuffer:
    """Batches acknowledgements; ``run`` flushes them until ``stop``, then flushes the rest."""

    def __init__(
        self,
        broker: Broker,
        config: RunnerConfig,
        holdings: Holdings,
        counters: Counters,
        errors: ErrorLog,
    ) -> None:
        self._broker = broker
        self._keys = broker.keys
        self._batch = config.ack_batch_size
        self._interval = config.ack_flush_interval
        self._reclaim_delay = config.reclaim_delay
        self._finished = holdings.finished
        self._counters = counters
        self._errors = errors
        self._ids: list[str] = []  # waiting for the next flush
        self._locks: dict[str, tuple[str, str]] = {}  # id -> unique lock (key, token)
        self._nonempty = trio.Event()
        self._full = trio.Event()
        self._stopping = False
        self.stopped = trio.Event()

    def add(self, job: Job) -> None:
        """Acknowledge ``job``'s message soon (and release its unique lock, if any)."""
        message_id = job.message_id
        self._ids.append(message_id)
        self._finished[message_id] = job
        if job.fields[7] is not None:  # a unique task's token: its lock goes with the ack
            lock = job.lock(self._keys)
            if lock is not None:
                self._locks[message_id] = lock
        self._nonempty.set()
        if len(self._ids) >= self._batch:
            self._full.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Flush batches until :meth:`stop`; then flush what is left and return."""
        task_status.started()
        try:
            await self._loop()
        finally:
            self.stopped.set()

    async def _loop(self) -> None:
        # Capped like the heartbeat's retries: a long pause would delay the acknowledgement
        # for no gain.
        backoff = LoopBackoff(cap=min(5.0, self._reclaim_delay / 6))
        while True:
            await self._nonempty.wait()
            if not self._stopping and len(self._ids) < self._batch:
                with trio.move_on_after(self._interval):
                    await self._full.wait()
            if await self.flush():
                backoff.reset()
            else:
                await trio.sleep(backoff.next_delay())
            if self._stopping and not self._ids:
                return

    async def flush(self) -> bool:
        """Write what is buffered now; False (ids kept for the next try) on a Redis error."""
        self._nonempty = trio.Event()
        self._full = trio.Event()
        batch, self._ids = self._ids, []
        written = False
        try:
            self._counters.acked += await self._broker.ack(batch, self._locks)
            written = True
        except BackendError as exc:
            self._errors.capture(exc)
            logger.warning("acknowledging %d messages failed: %s", len(batch), exc)
        finally:
            if written:
                finished, locks = self._finished, self._locks
                for message_id in batch:
                    finished.pop(message_id, None)
                    if locks:
                        locks.pop(message_id, None)
            elif batch:
                self._ids[:0] = batch
                self._nonempty.set()
        return written

    def stop(self) -> None:
        """Flush what is buffered, then let :meth:`run` return (see ``stopped``)."""
        self._stopping = True
        self._nonempty.set()
        self._full.set()
