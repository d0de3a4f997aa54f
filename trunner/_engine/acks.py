"""The acknowledgement buffer: finished messages are acknowledged in batches, by size or
time, whichever comes first. An outcome kept for ``handle.result()`` goes sooner:
``result_flush_interval`` (default 0: at once) moves the batch's deadline nearer, and
while that write is in flight the next batch gathers.

A finished message stays in :attr:`Holdings.finished <trunner._engine.holdings.Holdings.finished>`
from :meth:`AckBuffer.add` until a flush wrote its acknowledgement: a failed or cancelled
flush puts it back, so a finished task is never forgotten (and never released to run again
as if it had not run). Meanwhile the heartbeater keeps its reservation fresh, so it is not
reclaimed and run again while its acknowledgement waits for Redis. A unique task's lock, and
a concurrency slot, are released by the same script that acknowledges it.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from .._redis import AckRecord, Broker, Record, Slot, StepEnd
from .._util import ErrorLog, LoopBackoff, logger
from ..config import RunnerConfig
from ..errors import BackendError
from .counters import Counters
from .holdings import Holdings, Job

__all__ = ["AckBuffer"]


def _no_record(job: Job) -> Record:
    raise RuntimeError(f"no running record builder for {job.message_id}")


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
        self._result_interval = config.result_flush_interval
        #: The wait for a batch to fill: an outcome kept moves its deadline nearer.
        self._wait = trio.CancelScope()
        self._reclaim_delay = config.reclaim_delay
        self._finished = holdings.finished
        self._counters = counters
        self._errors = errors
        self._ids: list[str] = []  # waiting for the next flush
        self._locks: dict[str, tuple[str, str]] = {}  # id -> unique lock (key, token)
        self._moved: dict[str, str] = {}  # id -> task id, when they differ
        self._records: dict[str, AckRecord] = {}  # id -> outcome of a task keeping its result
        self._forget: dict[str, str] = {}  # id -> cancelled task id: its mark goes
        self._slots: dict[str, Slot] = {}  # id -> the concurrency slot it releases
        self._steps: dict[str, StepEnd] = {}  # id -> the end of the workflow step it was
        #: Running records to write (tasks keeping results): each record's key, and what
        #: builds it, called only if the record is written (most tasks end first).
        self._started: list[Job] = []
        #: Builds the running record of a task that keeps its result (the runner's
        #: ``Outcomes`` sets it).
        self.running_record: Callable[[Job], Record] = _no_record
        self._nonempty = trio.Event()
        self._full = trio.Event()
        self._stopping = False
        self.stopped = trio.Event()

    def add(
        self,
        job: Job,
        record: AckRecord | None = None,
        *,
        cancelled: bool = False,
        bare: bool = False,
        step: StepEnd | None = None,
    ) -> None:
        """Acknowledge ``job``'s message soon (and release its unique lock, if any); write
        ``record``, its outcome, with the acknowledgement; forget its cancel mark when it
        was ``cancelled``; end the workflow ``step`` it was. ``bare``: acknowledge it and
        nothing else (another group's message)."""
        message_id = job.message_id
        self._ids.append(message_id)
        self._finished[message_id] = job
        if bare:
            self._nonempty.set()
            if len(self._ids) >= self._batch:
                self._full.set()
            return
        fields = job.fields
        if fields[7] is not None:  # a unique task's token: its lock goes with the ack
            lock = job.lock(self._keys)
            if lock is not None:
                self._locks[message_id] = lock
        if job.slot is not None:  # a concurrency slot: released with the ack
            self._slots[message_id] = job.slot
        if fields[4] != message_id:  # moved (delayed, retried, cron, replayed)
            self._moved[message_id] = fields[4]
        if record is not None:
            self._records[message_id] = record
        if cancelled:
            self._forget[message_id] = fields[4]
        if step is not None:
            self._steps[message_id] = step
        self._nonempty.set()
        if len(self._ids) >= self._batch:
            self._full.set()
        elif record is not None or step is not None:  # somebody may be waiting for it (the
            # next steps of a workflow do): written sooner
            # Set only when nearer: setting a deadline costs more than comparing, and with
            # the default result_flush_interval (0) every outcome of a burst would set it.
            deadline = trio.current_time() + self._result_interval
            if deadline < self._wait.deadline:  # noqa: PLR1730 - min() would set it always
                self._wait.deadline = deadline

    def started(self, job: Job) -> None:
        """Write the running record of ``job``'s task, which keeps its result, with the next
        flush (unless the task's outcome goes in the same flush: it says all the record
        would, and the record is never built). ``running_record`` builds it."""
        self._started.append(job)
        self._nonempty.set()

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
                soon = self._records or self._steps
                interval = self._result_interval if soon else self._interval
                with trio.move_on_after(min(interval, self._interval)) as self._wait:
                    await self._full.wait()
            if await self.flush():
                backoff.reset()
            else:
                await trio.sleep(backoff.next_delay())
            if self._stopping and not self._ids:
                return

    async def flush(self) -> bool:
        """Write what is buffered now; False (ids kept for the next try) on a Redis error.

        Running records go first: a task's outcome is never overwritten by its start. A
        running record whose outcome is in this flush is not written at all."""
        self._nonempty = trio.Event()
        self._full = trio.Event()
        if self._started:
            await self._write_started()
        batch, self._ids = self._ids, []
        if not batch:
            return True
        written = False
        # The delivery each is written for: a claim of this instance's own may give a held
        # job another while the script is on the way (``Job.reclaimed``).
        finished = self._finished
        sent = {message_id: finished[message_id].delivery_count for message_id in batch}
        again: list[str] = []
        try:
            acked, lost = await self._broker.ack(
                batch,
                self._locks,
                self._moved,
                self._records,
                self._forget,
                self._slots,
                self._steps,
                owners=finished,
            )
            self._counters.acked += acked
            written = True
            again = self._refused(lost, sent)
        except BackendError as exc:
            self._errors.capture(exc)
            logger.warning("acknowledging %d messages failed: %s", len(batch), exc)
        finally:
            if written:
                if again:
                    batch = [message_id for message_id in batch if message_id not in again]
                    self._ids[:0] = again
                    self._nonempty.set()
                self._forget_written(batch)
            elif batch:
                self._ids[:0] = batch
                self._nonempty.set()
        return written

    def _forget_written(self, batch: list[str]) -> None:
        """What was buffered for the ids of ``batch``, now written."""
        finished, locks, moved = self._finished, self._locks, self._moved
        extras = self._records or self._forget
        slots, steps = self._slots, self._steps
        for message_id in batch:
            finished.pop(message_id, None)
            if locks:
                locks.pop(message_id, None)
            if moved:
                moved.pop(message_id, None)
            if slots:
                slots.pop(message_id, None)
            if steps:
                steps.pop(message_id, None)
            if extras:
                self._records.pop(message_id, None)
                self._forget.pop(message_id, None)

    def _refused(self, lost: list[str], sent: dict[str, int]) -> list[str]:
        """The ids whose acknowledgement the script refused: discarded, but those whose job
        took another delivery of this instance's while it was on the way (returned: they
        are written for it with the next flush)."""
        again: list[str] = []
        for message_id in lost:
            job = self._finished[message_id]
            if job.delivery_count != sent[message_id]:
                again.append(message_id)
            else:
                self.discarded(job, "acknowledgement")
        return again

    def discarded(self, job: Job, what: str) -> None:
        """``job``'s attempt ended after its delivery was no longer its own: its ``what``
        (acknowledgement and outcome, retry, dead letter) was not written, and is counted
        and logged here (see ``deliveries.lua``)."""
        self._counters.discarded += 1
        logger.warning(
            "%s ended after another consumer claimed its message: its %s was discarded "
            "(the delivery that owns the message decides its outcome)",
            job.about(),
            what,
            extra=job.log_fields(),
        )

    async def _write_started(self) -> None:
        """The running records buffered, but those whose task has an outcome in this flush
        (its own, the usual case, found by its message id; or another attempt's)."""
        records, build = self._records, self.running_record
        ending: set[str] | None = None
        starts: list[tuple[Record, str, Job]] = []
        for job in self._started:
            if job.message_id in records:
                continue
            if ending is None:
                ending = {record[0] for record in records.values()}
            start = build(job)
            if start[0] not in ending:
                starts.append((start, job.message_id, job))
        self._started = []
        if not starts:
            return
        try:
            await self._broker.record_started(starts)
        except BackendError as exc:  # the outcome is what matters: not retried
            self._errors.capture(exc)
            logger.debug("recording %d started tasks failed: %s", len(starts), exc)

    def stop(self) -> None:
        """Flush what is buffered, then let :meth:`run` return (see ``stopped``)."""
        self._stopping = True
        self._nonempty.set()
        self._full.set()
