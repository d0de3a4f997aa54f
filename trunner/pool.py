"""Capacity-limited execution: workers running messages, heartbeats, ack, retry, give-up.

The pool never takes a message it cannot start: fetchers reserve worker slots first
(:meth:`WorkerPool.reserve`) and read at most that many messages. Submitted messages wait
in a ready queue that *worker* Trio tasks take them from: a worker runs job after job, each
in a context of its own (:mod:`trunner._isolated`), and the first time a job waits, it makes
sure there are enough idle workers for every job still ready, so no job ever waits behind
another. Jobs that never wait (the common case for short tasks) thus cost no Trio task of
their own. A finished message is
acknowledged through the :class:`AckBuffer` (batched); a failed one is retried through the
delayed set or given up (failed-task handler, then the dead-letter stream), each in one
script. At shutdown, fetched-but-unstarted and interrupted messages are *released*: handed
back for immediate reclaim, never acknowledged.
"""

from __future__ import annotations

import contextvars
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import trio

from ._context import _current_message
from ._isolated import Isolated
from ._redis import MAX_IDS_PER_CALL, Broker, RawEntry
from ._slots import WorkerSlots
from ._util import ErrorLog, LoopBackoff, logger, wall_ms
from .config import RunnerConfig
from .errors import (
    BackendError,
    MaxRetryExceeded,
    RedisUnavailable,
    ReservationLost,
    TaskFailed,
    TaskNotFound,
)
from .message import (
    Fields,
    MessageDecodeError,
    TaskMessage,
    decode_fields,
    decode_message,
    fields_of,
    message_from_fields,
    reencode_for_retry,
)
from .statistics import Counters
from .task import Task, TaskRegistry

__all__ = ["AckBuffer", "WorkerPool"]

#: Bound on one state-transition write (retry, dead-letter) including its own retries.
TRANSITION_TIMEOUT = 10.0
#: How many messages left pending on purpose are remembered (see ``WorkerPool._kept``).
MAX_KEPT = 10_000
#: Re-encoding a message for its next attempt never fails on size (it came from Redis).
_NO_LIMIT = 1 << 62
#: A heartbeat whose deadline is found passed by more than this (seconds) missed it because
#: the event loop was blocked, not because Redis was slow.
STALL_SLACK = 0.1


@attrs.define(eq=False)
class _Beat:
    """When a reservation's next heartbeat is due, and how often it beats."""

    consumer: str
    interval: float
    next_beat: float


@attrs.define(eq=False)
class _Job(_Beat):
    """A submitted message: ready, then running; its own heartbeat schedule meanwhile."""

    message_id: str
    deliveries: int
    task: Task | None
    """The registered task, or None (unknown name, or undecodable)."""
    fields: Fields
    """What the entry holds (see :data:`trunner.message.Fields`)."""
    decode_error: MessageDecodeError | None = None
    finishing: bool = False
    lost: bool = False
    waited: bool = False
    """It suspended at least once (its worker then left the ready jobs to others)."""
    _message: TaskMessage | None = None

    @property
    def message(self) -> TaskMessage:
        """The :class:`TaskMessage`, built when first asked for (most tasks never ask)."""
        if self._message is None:
            self._message = message_from_fields(self.message_id, self.deliveries, self.fields)
        return self._message


class AckBuffer:
    """Buffers acknowledgements and flushes them in batches (size or time, whichever first).

    An id stays *held* from :meth:`add` until a flush wrote it: a failed or cancelled flush
    puts its ids back, so a finished task is never forgotten (and never released to run
    again as if it had not run). While held, the pool's heartbeat keeps its reservation
    fresh (:meth:`beats_due`), so a finished task is not reclaimed and run again while its
    acknowledgement waits for Redis.
    """

    def __init__(
        self, broker: Broker, config: RunnerConfig, counters: Counters, errors: ErrorLog
    ) -> None:
        self._broker = broker
        self._batch = config.ack_batch_size
        self._interval = config.ack_flush_interval
        self._reclaim_delay = config.reclaim_delay
        self._counters = counters
        self._errors = errors
        self._ids: list[str] = []  # waiting for the next flush
        self._held: set[str] = set()  # waiting, or being flushed
        self._locks: dict[str, tuple[str, str]] = {}  # id -> unique lock (key, token)
        self._beats: dict[str, _Beat] = {}  # id -> its reservation's heartbeat schedule
        self._nonempty = trio.Event()
        self._full = trio.Event()
        self._closing = False
        self.closed = trio.Event()

    def add(
        self,
        message_id: str,
        lock: tuple[str, str] | None = None,
        beat: _Beat | None = None,
    ) -> None:
        """Acknowledge ``message_id`` soon, releasing its unique ``lock`` (key, token);
        ``beat``: its heartbeat schedule, kept until the acknowledgement is written."""
        self._ids.append(message_id)
        self._held.add(message_id)
        if lock is not None:
            self._locks[message_id] = lock
        if beat is not None:
            self._beats[message_id] = beat
        self._nonempty.set()
        if len(self._ids) >= self._batch:
            self._full.set()

    def holds(self, message_id: str) -> bool:
        """Whether ``message_id`` is finished but its acknowledgement not yet written."""
        return message_id in self._held

    def __len__(self) -> int:
        return len(self._held)

    def beats_due(self, now: float) -> list[tuple[str, _Beat]]:
        """Held ids whose reservation is due for a heartbeat: (id, schedule)."""
        return [(i, beat) for i, beat in self._beats.items() if beat.next_beat <= now]

    def next_beat(self) -> float:
        return min((beat.next_beat for beat in self._beats.values()), default=math.inf)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await self._loop()
        finally:
            self.closed.set()

    async def _loop(self) -> None:
        # Capped like the heartbeat's retries: a long pause would delay the acknowledgement
        # for no gain.
        backoff = LoopBackoff(cap=min(5.0, self._reclaim_delay / 6))
        while True:
            await self._nonempty.wait()
            if not self._closing and len(self._ids) < self._batch:
                with trio.move_on_after(self._interval):
                    await self._full.wait()
            if await self.flush():
                backoff.reset()
            else:
                await trio.sleep(backoff.next_delay())
            if self._closing and not self._ids:
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
                self._held.difference_update(batch)
                for message_id in batch:
                    self._locks.pop(message_id, None)
                    self._beats.pop(message_id, None)
            elif batch:
                self._ids[:0] = batch
                self._nonempty.set()
        return written

    def close(self) -> None:
        """Flush what is buffered, then let :meth:`run` return."""
        self._closing = True
        self._nonempty.set()
        self._full.set()


class WorkerPool:
    def __init__(
        self,
        broker: Broker,
        registry: TaskRegistry,
        config: RunnerConfig,
        counters: Counters,
        errors: ErrorLog,
        acks: AckBuffer,
        on_retry_scheduled: Callable[[int], None],
        on_task_time: Callable[[str, float], None] = lambda _task, _seconds: None,
    ) -> None:
        self._broker = broker
        self._registry = registry
        self._config = config
        self._counters = counters
        self._errors = errors
        self._acks = acks
        self._on_retry_scheduled = on_retry_scheduled
        self._on_task_time = on_task_time
        self.limiter = WorkerSlots(config.num_workers)
        self._jobs: dict[str, _Job] = {}  # submitted and not finished: ready or running
        self._ready: deque[_Job] = deque()  # submitted, not taken by a worker yet
        self._spare = 0  # workers started that have not taken a job yet
        self._running = 0  # workers taking jobs, or running one that has not waited yet
        self._nursery: trio.Nursery | None = None
        self._stopping = False
        self._cancelling = False
        self._idle = trio.Event()
        self._idle.set()
        self._to_release: list[tuple[str, str, bool]] = []  # (consumer, id, give back)
        # Messages that ran and were left pending on purpose (the handler raised, or their
        # retry / dead-letter write failed): redelivered after reclaim_delay, never
        # released as if they had not run. Bounded: the oldest are forgotten first.
        self._kept: dict[str, str] = {}
        self._default_beat = config.reclaim_delay / 3
        self._infos: dict[str, tuple[Task | None, float]] = {}  # see _task_info
        self.min_beat_interval = min(
            [self._default_beat, *(self._beat_interval(t) for t in registry)]
        )

    # -- slots ------------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return len(self._jobs)

    def try_reserve(self, count: int) -> int:
        """Take up to ``count`` free slots, without waiting; how many were taken."""
        return self.limiter.take_nowait(count)

    async def reserve(self, count: int) -> int:
        """Take at least one and up to ``count`` free slots; waits until one is free."""
        return await self.limiter.take(count)

    def unreserve(self, count: int) -> None:
        if count:
            self.limiter.give(count)

    # -- starting ---------------------------------------------------------------------------

    def bind(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    def submit(self, entries: Sequence[RawEntry], reserved: int, consumer: str) -> int:
        """Queue one job per entry, each on one of the ``reserved`` slots; unused slots are
        given back.

        Synchronous, so that entries a read returned are never lost to a cancellation
        between the read and here. Entries that may not start — the runner is stopping, or
        the capacity was lowered while the read was blocked — are queued for release;
        returns how many (the caller then awaits :meth:`release_queued`).
        """
        assert len(entries) <= reserved
        assert self._nursery is not None
        limiter = self.limiter
        allowed = limiter.total_tokens - (limiter.borrowed_tokens - reserved)
        queued = unused = 0
        now = trio.current_time()
        for index, entry in enumerate(entries):
            if index >= allowed and entry.message_id not in self._jobs:
                self._to_release.append((consumer, entry.message_id, True))
                unused += 1
                queued += 1
                continue
            if self._stopping or entry.message_id in self._jobs:
                if entry.message_id not in self._jobs:
                    self._to_release.append((consumer, entry.message_id, True))
                unused += 1
                continue
            job = self._make_job(entry, consumer, now)
            self._kept.pop(entry.message_id, None)
            self._jobs[entry.message_id] = job
            self._ready.append(job)
            self._idle = trio.Event() if self._idle.is_set() else self._idle
        if self._ready and not self._spare + self._running:
            self._add_workers(1)
        self.unreserve(unused + reserved - len(entries))
        self._counters.max_in_flight = max(self._counters.max_in_flight, len(self._jobs))
        return queued + (len(entries) if self._stopping else 0)

    def _beat_interval(self, task: Task | None) -> float:
        if task is None or task.reservation_timeout is None:
            return self._default_beat
        return min(task.reservation_timeout, self._config.reclaim_delay) / 3

    def _task_info(self, name: str) -> tuple[Task | None, float]:
        """The registered task of that name (or None) and its heartbeat interval."""
        info = self._infos.get(name)
        if info is None:
            task = self._registry._tasks.get(name)
            info = (task, self._beat_interval(task))
            if task is not None:  # unknown names are not remembered: they are unbounded
                self._infos[name] = info
        return info

    def _make_job(self, entry: RawEntry, consumer: str, now: float) -> _Job:
        message_id, deliveries = entry.message_id, entry.deliveries
        max_bytes = self._config.max_payload_bytes
        fields = decode_fields(message_id, entry.fields, deliveries, max_bytes)
        if fields is not None:
            task, interval = self._task_info(fields[0])
            return _Job(consumer, interval, now + interval, message_id, deliveries, task, fields)
        # Not the usual shape: checked field by field, and refused with the reason.
        error = None
        try:
            message = decode_message(
                message_id, entry.fields, deliveries=deliveries, max_bytes=max_bytes
            )
        except MessageDecodeError as exc:
            message, error = exc.message, exc  # its stand-in has no task name: no task
        task, interval = self._task_info(message.task_name)
        return _Job(
            consumer,
            interval,
            now + interval,
            message_id,
            deliveries,
            task,
            fields_of(message),
            error,
            message=message,
        )

    # -- running ----------------------------------------------------------------------------

    def _add_workers(self, count: int) -> None:
        assert self._nursery is not None
        for _ in range(count):
            self._spare += 1
            self._nursery.start_soon(self._worker, name="trunner worker")

    def _job_waits(self, job: _Job) -> None:
        """``job`` suspended, so its worker is busy: every job still ready gets a worker that
        is not (started at once, so that they all start in the next scheduling round)."""
        job.waited = True
        self._running -= 1
        missing = len(self._ready) - self._spare - self._running
        if missing > 0:
            self._add_workers(missing)

    async def _worker(self) -> None:
        """Run ready jobs until none is left, each in a fresh copy of this task's context."""
        self._spare -= 1
        self._running += 1
        ready = self._ready
        try:
            while ready:
                if self._cancelling:  # past the drain timeout: what never started is released
                    self._abandon_ready()
                    break
                job = ready.popleft()
                try:
                    await Isolated(
                        self._run_job(job), contextvars.copy_context(), self._job_waits, job
                    )
                finally:
                    if job.waited:  # back from waiting (or leaving: counted out below)
                        self._running += 1
        finally:
            self._running -= 1
            if ready and not self._spare + self._running:  # cancelled: nobody takes them
                self._abandon_ready()

    def _abandon_ready(self) -> None:
        """Give back jobs that never started (their workers were cancelled)."""
        while self._ready:
            job = self._ready.popleft()
            self._to_release.append((job.consumer, job.message_id, True))
            self._finished(job)

    def _finished(self, job: _Job) -> None:
        del self._jobs[job.message_id]
        self.limiter.give()
        if not self._jobs:
            self._idle.set()

    async def _run_job(self, job: _Job) -> None:
        """Run one job to its end, in one coroutine (the frames of every job that waits
        stay in memory while it waits)."""
        try:
            # For the task and for the failed-task handler; built only if asked for.
            _current_message.set(job)
            task = job.task
            if job.decode_error is not None or task is None or job.fields[2] > task.max_attempts:
                await self._refuse(job, task)
                return
            begin = time.perf_counter()
            try:  # the hot path of every task
                await task.action(job.fields[1])
            except trio.Cancelled:
                if self._cancelling:
                    self._interrupted(job)
                raise
            except Exception as exc:  # noqa: BLE001 - the task failed: retried or given up
                failure: Exception | None = exc
            else:
                failure = None
            duration = time.perf_counter() - begin
            self._on_task_time(task.name, duration)
            if failure is None:
                self._succeeded(job, task.name, duration)
            else:
                await self._failed(job, task, failure)
        except Exception as exc:  # noqa: BLE001 - one message must never crash the runner
            self._errors.capture(exc)
            self._keep(job)
            logger.exception(
                "internal error while handling %s; it stays pending",
                _about(job.message),
                extra=_log_fields(job.message),
            )
        finally:
            self._finished(job)

    async def _refuse(self, job: _Job, task: Task | None) -> None:
        """Give up a message that may not run: undecodable, unknown task, or redelivered
        past its last attempt."""
        if job.decode_error is not None:
            await self._give_up(job, job.decode_error, "undecodable")
        elif task is None:
            await self._give_up(job, TaskNotFound(job.fields[0]), "unknown task")
        else:
            error = MaxRetryExceeded(task.name, task.max_attempts, redelivered=True)
            await self._give_up(job, error, "max retries exceeded (redelivered)")

    async def _failed(self, job: _Job, task: Task, failure: Exception) -> None:
        attempt = job.fields[2]
        self._counters.failed += 1
        self._counters.task(task.name).failed += 1
        self._errors.capture(TaskFailed(task.name, job.message_id, attempt, failure))
        if attempt < task.max_attempts:
            await self._retry(job, task, failure)
        else:
            exhausted = MaxRetryExceeded(task.name, attempt)
            exhausted.__cause__ = failure
            await self._give_up(job, exhausted, "max retries exceeded")

    def _succeeded(self, job: _Job, task_name: str, duration: float) -> None:
        self._counters.succeeded += 1
        self._counters.task(task_name).succeeded += 1
        # Only the heartbeat schedule stays while the acknowledgement waits, not the job.
        beat = _Beat(job.consumer, job.interval, job.next_beat)
        self._acks.add(job.message_id, self._lock(job), beat)
        if logger.isEnabledFor(logging.DEBUG):
            message = job.message
            logger.debug(
                "%s succeeded in %.3f s",
                _about(message),
                duration,
                extra=_log_fields(message, duration=duration),
            )

    async def _guarded(
        self, job: _Job, func: Callable[..., Awaitable[Any]], *args: Any
    ) -> Exception | None:
        """Run user code; return what it raised.

        Past the drain timeout the jobs nursery is cancelled: the job is then recorded as
        interrupted (its message is released) and the cancellation goes on.
        """
        try:
            await func(*args)
        except trio.Cancelled:
            if self._cancelling:
                self._interrupted(job)
            raise
        except Exception as exc:  # noqa: BLE001 - user code failures are handled by callers
            return exc
        return None

    def _lock(self, job: _Job) -> tuple[str, str] | None:
        """The unique lock a finished message releases: (key, token), or None."""
        key, token = job.fields[6], job.fields[7]
        if key is None or token is None:
            return None
        return self._broker.keys.unique(key), token

    def _keep(self, job: _Job) -> None:
        """Leave a message that ran pending, for a later delivery (see ``_kept``)."""
        self._kept[job.message_id] = job.consumer
        while len(self._kept) > MAX_KEPT:
            del self._kept[next(iter(self._kept))]

    def _interrupted(self, job: _Job) -> None:
        self._counters.interrupted += 1
        self._to_release.append((job.consumer, job.message_id, True))
        logger.warning(
            "%s interrupted by shutdown; message released",
            _about(job.message),
            extra=_log_fields(job.message),
        )

    async def _retry(self, job: _Job, task: Task, failure: Exception) -> None:
        message = job.message
        try:
            delay = task.retry_delay(message.attempt)
        except Exception as exc:  # noqa: BLE001 - a broken backoff callable
            self._errors.capture(exc)
            delay = 1.0
        due_ms = wall_ms() + math.ceil(delay * 1000)
        data = reencode_for_retry(message, message.attempt + 1, _NO_LIMIT)

        async def write() -> bool:
            return await self._broker.retry(job.message_id, message.task_id, due_ms, data)

        if await self._transition(job, write, "retry") is True:
            self._counters.retried += 1
            self._counters.task(task.name).retried += 1
            self._on_retry_scheduled(due_ms)
            logger.info(
                "%s failed; retry scheduled in %.3f s: %r",
                _about(message),
                delay,
                failure,
                extra=_log_fields(message),
            )

    async def _give_up(self, job: _Job, error: BaseException, reason: str) -> None:
        message = job.message
        self._errors.capture(error)
        handler = self._config.failed_task_handler
        if handler is not None:
            exc = await self._guarded(job, handler, message, error)
            if exc is not None:
                self._errors.capture(exc)
                self._keep(job)
                logger.error(
                    "failed-task handler raised for %s; left pending for a later delivery: %r",
                    _about(message),
                    exc,
                    extra=_log_fields(message),
                )
                return
        fields: list[tuple[str, Any]] = [
            ("payload", job.message.raw),
            ("reason", reason),
            ("error", f"{type(error).__name__}: {error}"),
            ("task", message.task_name),
            ("message_id", message.message_id),
            ("task_id", message.task_id),
            ("attempt", message.attempt),
            ("failed_at", wall_ms()),
            ("consumer", job.consumer),
        ]
        cause = ""
        if error.__cause__ is not None:
            cause = f"{type(error.__cause__).__name__}: {error.__cause__}"
            fields.append(("cause", cause))
        maxlen = self._config.dead_letter_maxlen

        async def write() -> str | None:
            return await self._broker.dead_letter(job.message_id, fields, maxlen, self._lock(job))

        if await self._transition(job, write, "dead-letter"):
            self._counters.dead_lettered += 1
            self._counters.task(message.task_name).dead_lettered += 1
            logger.error(
                "%s dead-lettered, %s: %s%s",
                _about(message),
                reason,
                error,
                f" ({cause})" if cause else "",
                extra=_log_fields(message),
            )

    async def _transition(self, job: _Job, write: Callable[[], Any], what: str) -> Any:
        """Run one state-transition write, retrying Redis errors for a bounded time.

        If it cannot be written, the message stays pending and is redelivered later.
        """
        job.finishing = True  # acknowledged by the write: heartbeats would call it lost
        backoff = LoopBackoff()
        # Shielded: the outcome of an attempt that ran is written even past the drain timeout.
        with trio.move_on_after(TRANSITION_TIMEOUT, shield=True):
            while True:
                try:
                    return await write()
                except BackendError as exc:
                    self._errors.capture(exc)
                    logger.warning(
                        "%s of %s failed, will retry: %s",
                        what,
                        _about(job.message),
                        exc,
                        extra=_log_fields(job.message),
                    )
                await trio.sleep(backoff.next_delay())
        self._keep(job)
        logger.error(
            "%s of %s could not be written; it stays pending for a later delivery",
            what,
            _about(job.message),
            extra=_log_fields(job.message),
        )
        return None

    # -- heartbeats -------------------------------------------------------------------------

    async def heartbeat_loop(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Keep the reservations of running tasks fresh, so nobody reclaims a live task."""
        task_status.started()
        # Retries come sooner than the next beat would: a reservation must not go stale
        # because the loop backed off longer than reclaim_delay allows.
        backoff = LoopBackoff(cap=min(5.0, self.min_beat_interval / 2))
        while True:
            now = trio.current_time()
            due = [
                job
                for job in self._jobs.values()
                if job.next_beat <= now and not job.lost and not job.finishing
            ]
            failed = stalled = False
            by_consumer: dict[str, list[_Job]] = {}
            for job in due:
                by_consumer.setdefault(job.consumer, []).append(job)
            # Finished tasks whose acknowledgement is not written yet (Redis trouble):
            # their reservations stay fresh too, or they would be reclaimed and run again.
            finished: dict[str, list[tuple[str, _Beat]]] = {}
            for message_id, beat in self._acks.beats_due(now):
                finished.setdefault(beat.consumer, []).append((message_id, beat))
            for consumer in {*by_consumer, *finished}:
                jobs = by_consumer.get(consumer, [])
                held = finished.get(consumer, [])
                ids = [j.message_id for j in jobs] + [i for i, _ in held]
                began = trio.current_time()
                try:
                    # Bounded by the beat interval, not the (longer) command timeout: a
                    # reply lost on the way must not keep every reservation waiting.
                    with trio.fail_after(self.min_beat_interval):
                        lost = set(await self._broker.heartbeat(consumer, ids))
                except (BackendError, trio.TooSlowError) as exc:
                    # A deadline that passed long ago was passed while this process was
                    # not running (a task blocked the event loop): that says nothing of
                    # Redis, and the reservations aged meanwhile. Beat again at once:
                    # another stall may follow soon, and a backoff would wait it out.
                    late = trio.current_time() - began - self.min_beat_interval
                    stalled = stalled or (isinstance(exc, trio.TooSlowError) and late > STALL_SLACK)
                    error = (
                        exc
                        if isinstance(exc, BackendError)
                        else RedisUnavailable(
                            f"heartbeat: no reply within {self.min_beat_interval:.3g} s"
                        )
                    )
                    self._errors.capture(error)
                    failed = True
                    continue
                for job in jobs:
                    job.next_beat = now + job.interval
                    if job.message_id in lost and job.message_id in self._jobs:
                        self._lost(job)
                for _, beat in held:
                    beat.next_beat = now + beat.interval
            if failed:
                if stalled:
                    await trio.lowlevel.checkpoint()
                else:
                    await trio.sleep(backoff.next_delay())
                continue
            backoff.reset()
            upcoming = [job.next_beat for job in self._jobs.values() if not job.lost]
            wake = min([now + self.min_beat_interval, self._acks.next_beat(), *upcoming])
            await trio.sleep_until(max(wake, trio.current_time() + 0.001))

    def _lost(self, job: _Job) -> None:
        job.lost = True
        self._counters.reservations_lost += 1
        error = ReservationLost(
            f"message {job.message_id} of task {job.message.task_name!r} was claimed by "
            "another consumer while running; it may run twice"
        )
        self._errors.capture(error)
        logger.warning(
            "%s: reservation lost (claimed by another consumer while running)",
            _about(job.message),
            extra=_log_fields(job.message),
        )

    # -- stopping ---------------------------------------------------------------------------

    def start_stopping(self) -> None:
        self._stopping = True

    async def wait_idle(self) -> None:
        await self._idle.wait()

    def cancel_running(self) -> int:
        """Cancel every running task (drain timeout passed); return how many."""
        self._cancelling = True
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
        return len(self._jobs)

    def take_releases(self) -> list[tuple[str, str, bool]]:
        releases, self._to_release = self._to_release, []
        return releases

    async def release_orphans(self, consumer: str, *, final: bool = False) -> int:
        """Release entries pending for ``consumer`` that this instance never saw.

        Such entries were delivered to a read that failed or was cancelled after Redis
        sent its reply ("ghost deliveries"): they never ran, so the delivery is given back.
        Running tasks, finished ones whose acknowledgement is not written yet, and kept
        ones (they ran) are left alone; with ``final`` (at shutdown) kept ones are
        released too, keeping their attempt. Only call this while no read or claim into
        ``consumer`` is in progress.
        """
        releases: list[tuple[str, bool]] = []
        start = "-"
        while True:
            ids = await self._broker.pending_ids(consumer, start=start)
            fresh = [i for i in ids if i != start]
            for message_id in fresh:
                if message_id in self._jobs or self._acks.holds(message_id):
                    continue
                if message_id in self._kept:
                    if final:
                        releases.append((message_id, False))
                    continue
                releases.append((message_id, True))
            if not fresh or len(ids) < MAX_IDS_PER_CALL:
                break
            start = ids[-1]
        released = await self._broker.release(consumer, releases) if releases else 0
        self._counters.released += released
        return released

    async def release_queued(self) -> int:
        """Release the entries queued while stopping (unstarted, interrupted)."""
        by_consumer: dict[str, list[tuple[str, bool]]] = {}
        for consumer, message_id, undo in self.take_releases():
            by_consumer.setdefault(consumer, []).append((message_id, undo))
        released = 0
        for consumer, entries in by_consumer.items():
            released += await self._broker.release(consumer, entries)
        self._counters.released += released
        return released


def _about(message: TaskMessage) -> str:
    """How log lines name a message: ``task 'x' (message 1-0, attempt 2)``."""
    name = repr(message.task_name) if message.task_name else "(undecodable)"
    return f"task {name} (message {message.message_id}, attempt {message.attempt})"


def _log_fields(message: TaskMessage, **more: Any) -> dict[str, Any]:
    return {
        "task": message.task_name,
        "message_id": message.message_id,
        "task_id": message.task_id,
        "attempt": message.attempt,
        **more,
    }
