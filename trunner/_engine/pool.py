"""The pool runs each message it is given, at most ``capacity`` at once, without a Trio
task per message.

It never takes a message it cannot start: fetchers reserve worker slots first
(:meth:`WorkerPool.reserve`) and read at most that many messages. Submitted messages wait
in a ready queue that *job loops* take them from: a job loop is a Trio task that runs job
after job, each in a context of its own (:mod:`trunner._executors.isolated`); the first time a job
waits, it makes sure there are enough idle job loops for every job still ready, so no job
ever waits behind another. Jobs that never wait (the common case for short tasks) thus
cost no Trio task of their own.

With middleware (``RunnerConfig.middleware``), each attempt runs inside their
``around_attempt`` hooks (:mod:`trunner.middleware`); without, the path of a task is the
one it always was.

How an attempt ends (acknowledged, retried, given up, interrupted) is
:mod:`trunner._engine.outcomes`; which messages the pool holds is recorded in
:class:`~trunner._engine.holdings.Holdings`. The pool starts its job loops in a nursery its runner
owns (:meth:`WorkerPool.bind`); past the drain timeout the runner cancels that nursery
after :meth:`WorkerPool.cancel_running`, and jobs cancelled then are *interrupted*.
"""

from __future__ import annotations

import contextvars
import time
from collections import deque
from collections.abc import Callable, Sequence

import attrs
import trio

from .._context import _current_message
from .._executors.isolated import Isolated
from .._redis import RawEntry
from .._util import ErrorLog, logger, timed
from .._wire.decode import (
    MessageDecodeError,
    addressed_group,
    decode_fields,
    decode_message,
    fields_of,
)
from .._wire.envelope import message_growth
from ..config import RunnerConfig
from ..errors import InvalidPayload, MiddlewareError
from ..message import NO_OPTIONS
from ..middleware import AttemptHooks, AttemptInfo
from ..statistics import Counters
from ..task import Task, TaskRegistry
from .admission import Admission
from .holdings import GIVEN_UP, Holdings, Job, beat_interval, split_deliveries
from .outcomes import Outcomes
from .slots import WorkerSlots

__all__ = ["WorkerPool"]

#: How much larger than this runner reads a message may be for the pool to look whether it
#: is another group's (whose runners may allow a little more: a longer group name).
FOREIGN_SLACK = 64 * 1024
#: What a task raises that is never its failure: the end of the process goes on up.
_PASSING = (KeyboardInterrupt, SystemExit, GeneratorExit)


def _holds(
    exc: BaseException, types: type[BaseException] | tuple[type[BaseException], ...]
) -> bool:
    """Whether ``exc`` is one of ``types``, or a group holding one."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(types) is not None
    return isinstance(exc, types)


class WorkerPool:
    """Worker slots, the ready queue, and the job loops that run it."""

    def __init__(
        self,
        registry: TaskRegistry,
        config: RunnerConfig,
        holdings: Holdings,
        outcomes: Outcomes,
        counters: Counters,
        on_task_time: Callable[[str, float], None] = lambda _task, _seconds: None,
        errors: ErrorLog | None = None,
        admission: Admission | None = None,
    ) -> None:
        self._registry = registry
        #: Admits the messages of tasks with limits (None when no task has any).
        self._admission = admission
        self._config = config
        self._holdings = holdings
        self._running_jobs = holdings.running  # submitted and not ended: ready or running
        self._cancel_marks = holdings.cancelled
        self._outcomes = outcomes
        self._succeeded = outcomes.succeeded  # bound once: called for every message
        self._counters = counters
        self._on_task_time = on_task_time
        self._errors = errors
        hooks = AttemptHooks(config.middleware, self._middleware_broke)
        #: The middleware around each attempt; None without any (the hot path checks it).
        self._attempt_hooks = hooks if hooks else None
        #: How many messages the pool may hold at once, and how many it holds.
        self.slots = WorkerSlots(config.num_workers)
        self._ready: deque[Job] = deque()  # submitted, not taken by a job loop yet
        self._spare = 0  # job loops started that have not taken a job yet
        self._running = 0  # job loops taking jobs, or running one that has not waited yet
        self._nursery: trio.Nursery | None = None
        self._stopping = False
        self._cancelling = False
        self._idle = trio.Event()
        self._idle.set()
        self._infos: dict[str, tuple[Task | None, float]] = {}  # see _task_info
        self._group = config.consumer_group
        #: The largest message read: retries and replays grow a bit.
        self._max_bytes = config.max_payload_bytes + message_growth(config.consumer_group)
        delay = config.reclaim_delay
        #: The shortest heartbeat interval of any task (see :func:`beat_interval`).
        self.min_beat_interval = min(
            [beat_interval(None, delay), *(beat_interval(t, delay) for t in registry)]
        )

    # -- slots ------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        """Tasks this instance may run at once. Lowering it cancels nothing: it refuses more
        until enough have finished."""
        return self.slots.total_tokens

    @capacity.setter
    def capacity(self, value: int) -> None:
        self.slots.total_tokens = value

    @property
    def in_flight(self) -> int:
        """Messages submitted and not ended: ready, or running."""
        return len(self._running_jobs)

    async def reserve(self, count: int) -> int:
        """Take at least one and up to ``count`` free slots; waits until one is free."""
        return await self.slots.take(count)

    def unreserve(self, count: int) -> None:
        """Give back ``count`` reserved slots that no message took."""
        if count:
            self.slots.give(count)

    # -- starting ---------------------------------------------------------------------------

    def bind(self, nursery: trio.Nursery) -> None:
        """Start job loops in ``nursery`` (owned by the runner)."""
        self._nursery = nursery

    def submit(self, entries: Sequence[RawEntry], reserved: int, consumer: str) -> int:
        """Queue one job per entry, each on one of the ``reserved`` slots; unused slots are
        given back.

        Synchronous, so that entries a read returned are never lost to a cancellation
        between the read and here. Entries that may not start — the runner is stopping, or
        the capacity was lowered while the read was blocked — are queued for release;
        returns how many (the caller then has the releaser release them). An entry a claim
        returned that is held here already (its heartbeat was late) is not started again:
        the held job takes the claim's delivery (see :meth:`Job.reclaimed`).
        """
        assert len(entries) <= reserved
        assert self._nursery is not None
        slots = self.slots
        jobs = self._running_jobs
        holdings = self._holdings
        allowed = slots.total_tokens - (slots.borrowed_tokens - reserved)
        queued = unused = 0
        now = trio.current_time()
        for index, entry in enumerate(entries):
            held = jobs.get(entry.message_id) or holdings.finished.get(entry.message_id)
            if held is not None:  # claimed again while held here (running, or its ack
                held.reclaimed(consumer, entry.deliveries)  # buffered): not run twice
                unused += 1
                continue
            if index >= allowed:
                holdings.release_later(consumer, entry.message_id)
                unused += 1
                queued += 1
                continue
            if self._stopping:
                holdings.release_later(consumer, entry.message_id)
                unused += 1
                continue
            job = self._make_job(entry, consumer, now)
            holdings.kept.pop(entry.message_id, None)
            jobs[entry.message_id] = job
            self._ready.append(job)
            self._idle = trio.Event() if self._idle.is_set() else self._idle
        if self._ready and not self._spare + self._running:
            self._add_job_loops(1)
        self.unreserve(unused + reserved - len(entries))
        self._counters.max_in_flight = max(self._counters.max_in_flight, len(jobs))
        return queued + (len(entries) if self._stopping else 0)

    def _task_info(self, name: str) -> tuple[Task | None, float]:
        """The registered task of that name (or None) and its heartbeat interval."""
        info = self._infos.get(name)
        if info is None:
            task = self._registry.get(name) if name in self._registry else None
            info = (task, beat_interval(task, self._config.reclaim_delay))
            if task is not None:  # unknown names are not remembered: they are unbounded
                self._infos[name] = info
        return info

    def _make_job(self, entry: RawEntry, consumer: str, now: float) -> Job:
        message_id, deliveries = entry.message_id, entry.deliveries
        given_up, marked = False, 0
        if deliveries >= GIVEN_UP:
            marked = deliveries
            deliveries, given_up = split_deliveries(deliveries)
        max_bytes = self._max_bytes
        fields = decode_fields(message_id, entry.fields, deliveries, max_bytes, self._group)
        if fields is not None:
            task, interval = self._task_info(fields[0])
            job = Job(consumer, interval, now + interval, message_id, deliveries, task, fields)
            job.given_up, job.marked_count = given_up, marked
            if self._cancel_marks and fields[4] in self._cancel_marks:
                job.cancel_requested = True  # cancelled before it was fetched here
            return job
        # Not the usual shape: checked field by field, and refused with the reason.
        error = None
        try:
            message = decode_message(
                message_id, entry.fields, deliveries=deliveries, max_bytes=max_bytes
            )
        except MessageDecodeError as exc:
            message, error = exc.message, exc  # its stand-in has no task name: no task
            # Another group's, whatever is wrong with it, is not ours to say (looked for
            # only in a message of about the size a runner reads: parsing one of any size
            # would stall the event loop).
            group = None
            if len(message.raw) <= max_bytes + FOREIGN_SLACK:
                group = addressed_group(message.raw)
            if group is not None and group != self._group:
                error = None
                message = attrs.evolve(message, group=group)
        task, interval = self._task_info(message.task_name)
        foreign = message.group is not None and message.group != self._group
        cancelled = bool(
            not foreign and error is None and message.task_id in self._cancel_marks
        )  # cancelled before it was fetched here
        return Job(
            consumer,
            interval,
            now + interval,
            message_id,
            deliveries,
            task,
            fields_of(message),
            error,
            given_up=given_up,
            marked_count=marked,
            foreign=foreign,
            cancel_requested=cancelled,
            message=message,
        )

    # -- running ----------------------------------------------------------------------------

    def _add_job_loops(self, count: int) -> None:
        assert self._nursery is not None
        for _ in range(count):
            self._spare += 1
            self._nursery.start_soon(self._job_loop, name="trunner job loop")

    def _job_waits(self, job: Job) -> None:
        """``job`` suspended, so its job loop is busy: every job still ready gets a loop
        that is not (started at once, so that they all start in the next scheduling round)."""
        job.waited = True
        self._running -= 1
        missing = len(self._ready) - self._spare - self._running
        if missing > 0:
            self._add_job_loops(missing)

    async def _job_loop(self) -> None:
        """Run ready jobs until none is left, each in a fresh copy of this task's context."""
        self._spare -= 1
        self._running += 1
        ready = self._ready
        # One scope per job loop, not per job: a job that waits has its loop to itself, so
        # cancelling the loop cancels that job alone (see cancel_task); the loop then ends.
        scope = trio.CancelScope()
        try:
            with scope:
                while ready:
                    if self._cancelling:  # past the drain timeout: unstarted ones go back
                        self._abandon_ready()
                        break
                    job = ready.popleft()
                    job.loop_scope = scope
                    try:
                        await Isolated(
                            self._run_job(job), contextvars.copy_context(), self._job_waits, job
                        )
                    finally:
                        if job.waited:  # back from waiting (or leaving: counted out below)
                            self._running += 1
                    if scope.cancel_called:  # its task was cancelled, and did not stop
                        break  # (it swallowed the Cancelled): the next job needs a new scope
        finally:
            self._running -= 1
            if ready and not self._spare + self._running:
                if scope.cancel_called and not self._cancelling:  # a task was cancelled
                    self._add_job_loops(1)
                else:  # the loops were cancelled: nobody takes them
                    self._abandon_ready()

    def _abandon_ready(self) -> None:
        """Give back jobs that never started (their job loops were cancelled)."""
        while self._ready:
            job = self._ready.popleft()
            self._holdings.release_later(job.consumer, job.message_id)
            self._ended(job)

    def _ended(self, job: Job) -> None:
        jobs = self._running_jobs
        del jobs[job.message_id]
        self.slots.give()
        if not jobs:
            self._idle.set()

    async def _run_job(self, job: Job) -> None:
        """Run one job to its end, in one coroutine (the frames of every job that waits
        stay in memory while it waits)."""
        outcomes = self._outcomes
        try:
            # For the task and for the failed-task handler; built only if asked for.
            _current_message.set(job)
            task = job.task
            if (
                job.cancel_requested
                or job.decode_error is not None
                or job.foreign
                or task is None
                or job.given_up
                or job.deliveries > task.max_redeliveries + 1
                or job.fields[2] > task.max_attempts
            ):
                await self._not_run(job, task)
                return
            if job.fields[8] is None and task.plain and self._attempt_hooks is None:
                begin = job.began = time.perf_counter()
                try:  # the hot path of every task
                    await task.action(job.fields[1])
                except Exception as exc:  # noqa: BLE001 - the task failed: retried or given up
                    failure: Exception | None = exc
                else:
                    failure = None
                duration = time.perf_counter() - begin
            else:
                failure, duration = await self._run_with_options(job, task)
                if job.ended:  # expired, or its payload does not fit the task
                    return
            self._on_task_time(task.name, duration)
            if failure is None:
                self._succeeded(job, task.name, duration)
            else:
                await self._failed(job, task, failure)
        except Exception as exc:  # noqa: BLE001 - one message must never crash the runner
            outcomes.internal_error(job, exc)
        except BaseException as exc:  # noqa: BLE001 - Cancelled, alone or in a group; or worse
            up = await self._ended_by(job, exc)
            if up is not None:  # the cancellation alone: the job loop's scope catches its own
                raise up  # noqa: B904 - exc, or part of it
        finally:
            self._ended(job)

    async def _not_run(self, job: Job, task: Task | None) -> None:
        """A job that may not run: another group's (skipped), cancelled before it
        started, or refused (undecodable, unknown task, given up on an earlier delivery,
        delivered more often than ``max_redeliveries`` allows, or past its last
        attempt)."""
        job.ended = True
        if job.foreign:
            self._outcomes.skipped(job)
            return
        self._release_slot_with(job, task)
        if job.cancel_requested and job.decode_error is None:
            self._outcomes.cancelled(job, task)
        else:
            await self._outcomes.refuse(job, task)

    async def _ended_by(self, job: Job, exc: BaseException) -> BaseException | None:
        """``job`` ended with an exception that is not an ``Exception``: what goes on up
        (a cancellation, see :meth:`_cancelled_with_loop`; or the end of the process:
        ``KeyboardInterrupt``, ``SystemExit``), or None when it was the task's own failure
        (some libraries raise ``BaseException`` subclasses): retried or given up on, as
        any failure — it never ends the runner."""
        if _holds(exc, _PASSING):
            return exc
        if _holds(exc, trio.Cancelled):
            return self._cancelled_with_loop(job, exc)
        if job.ended or job.task is None:  # not the attempt's own: a failed-task handler's
            self._outcomes.internal_error(job, exc)
        else:
            await self._failed(job, job.task, exc)
        return None

    async def _failed(self, job: Job, task: Task, failure: BaseException) -> None:
        """The attempt raised: it is retried or given up on, unless its task was cancelled
        (its clean-up raised: it is cancelled all the same, never retried)."""
        job.ended = True
        if job.cancel_requested:
            self._outcomes.clean_up_raised(job, failure)
            self._outcomes.cancelled(job, task)
        else:
            await self._outcomes.failed(job, task, failure)

    def _cancelled_with_loop(self, job: Job, exc: BaseException) -> BaseException:
        """``job`` was cancelled with its job loop (``exc`` is the ``Cancelled``, or a group
        of them from the task's own nurseries): its task was cancelled (see
        :meth:`cancel_task`), or, past the drain timeout, it is an interruption (the
        message is released; an attempt that ended keeps counting, so that it is not run
        again for nothing). Returns what goes on up: the cancellation alone — what the
        task's clean-up raised besides is logged, and changes nothing."""
        if isinstance(exc, BaseExceptionGroup):
            cancelled, also = exc.split(trio.Cancelled)
            if cancelled is None:
                return exc
            if also is not None:
                self._outcomes.clean_up_raised(job, also)
            exc = cancelled
        elif not isinstance(exc, trio.Cancelled):
            return exc
        if job.cancel_requested:
            job.ended = True
            self._outcomes.cancelled(job, job.task)
        elif self._cancelling:
            self._outcomes.interrupted(job, attempt_ended=job.ended)
        return exc

    async def _run_with_options(self, job: Job, task: Task) -> tuple[Exception | None, float]:
        """The attempt of a task that has options
        (its own or its dispatch's): it may have expired, it may have limits (admitted or
        deferred, see :mod:`trunner._engine.admission`), its payload is decoded and
        checked, it may have a timeout, its result may be kept. Returns (the failure or
        None, the duration); ``job.ended`` when it did not run (its outcome is written)."""
        options = job.fields[8] or NO_OPTIONS
        if options.expires is not None and time.time() > options.expires:
            job.ended = True
            self._release_slot_with(job, task)
            self._outcomes.expired(job, task)
            return None, 0.0
        if task.limits is not None and not await self._admitted(job, task):
            return None, 0.0
        payload = job.fields[1]
        if task.decode_payload is not None:
            try:
                payload = task.decode_payload(payload)
            except InvalidPayload as exc:
                job.ended = True
                await self._outcomes.invalid_payload(job, task, exc)
                return None, 0.0
        timeout = options.timeout if options.timeout is not None else task.timeout
        keep = options.keep_result if options.keep_result is not None else task.keep_result
        if keep is not None:
            job.keep_result, job.started_at = keep, time.time()
            self._outcomes.started(job)
        if self._attempt_hooks is not None:
            return await self._run_with_middleware(job, task, payload, timeout, keep)
        begin = job.began = time.perf_counter()
        try:
            if timeout is None:
                result = await task.action(payload)
            else:
                result = await timed(task.action, payload, task.name, timeout)
            if keep is not None:
                # InvalidResult (no JSON form, or too large): gives up
                job.result = task.result_codec.encode_json(result, self._config.max_payload_bytes)
        except Exception as exc:  # noqa: BLE001 - the task failed: retried or given up
            return exc, time.perf_counter() - begin
        return None, time.perf_counter() - begin

    def _release_slot_with(self, job: Job, task: Task | None) -> None:
        """A message of a task with a concurrency limit that ends without being admitted
        (cancelled before it started, expired, refused) may hold a slot all the same (a
        granted waiter, a redelivered or reclaimed holder): its end releases it, as an
        admitted one's does (releasing a slot it does not hold changes nothing)."""
        if self._admission is not None and task is not None and task.limits is not None:
            job.slot = self._admission.slot_of(job, task.limits)

    async def _admitted(self, job: Job, task: Task) -> bool:
        """Whether ``job`` of a task with limits may run now; else it was deferred (or
        refused: its payload has no limit key), and ``job.ended``."""
        if self._admission is None or task.limits is None:
            return True
        admitted = await self._admission.admit(job, task, task.limits)
        if admitted is True:
            return True
        job.ended = True
        if admitted is not False:  # a key function refused the payload: given up
            await self._outcomes.invalid_payload(job, task, admitted)
        return False

    async def _run_with_middleware(
        self, job: Job, task: Task, payload: object, limit: float | None, keep: float | None
    ) -> tuple[Exception | None, float]:
        """The attempt of :meth:`_run_with_options` inside the middleware's
        ``around_attempt`` hooks, its timeout (``limit``) and result encoding included:
        they see what the attempt ends with."""
        assert self._attempt_hooks is not None
        duration = 0.0

        async def attempt() -> object:
            nonlocal duration
            begin = job.began = time.perf_counter()
            try:
                if limit is None:
                    result = await task.action(payload)
                else:
                    result = await timed(task.action, payload, task.name, limit)
                if keep is not None:
                    size = self._config.max_payload_bytes
                    job.result = task.result_codec.encode_json(result, size)
            finally:
                duration = time.perf_counter() - begin
            return result

        info = AttemptInfo(job, self._config.consumer_group, task)
        try:
            await self._attempt_hooks.run(info, attempt)
        except Exception as exc:  # noqa: BLE001 - the attempt failed: retried or given up
            return exc, duration
        return None, duration

    def _middleware_broke(self, error: MiddlewareError) -> None:
        """A middleware swallowed what it may not: reported, and it changes nothing."""
        if self._errors is not None:
            self._errors.capture(error)
        logger.error("%s", error)

    # -- cancelling a task ----------------------------------------------------------------

    def cancel_task(self, task_id: str) -> bool:
        """Cancel the task ``task_id`` if a job of this pool holds it: not started yet, it
        will not start; running, its job loop's scope is cancelled. Returns whether it was
        held here. Either way its outcome is 'cancelled' — unless its attempt had ended
        already: its outcome is being written (a retry, a dead letter) and is not cut off
        half way; a retry is removed once written (see ``Outcomes``), and the cancel mark
        stays besides, to drop the retry if that fails."""
        for job in self._running_jobs.values():
            if job.fields[4] == task_id:
                running = not (job.cancel_requested or job.ended)
                if running and job.waited and job.loop_scope is not None:
                    job.loop_scope.cancel()
                job.cancel_requested = True  # ended: a retry being written is removed after
                return True
        return False

    # -- stopping ---------------------------------------------------------------------------

    def start_stopping(self) -> None:
        """From now on, submitted messages are queued for release instead of started."""
        self._stopping = True

    async def wait_idle(self) -> None:
        """Return once no job is ready or running."""
        await self._idle.wait()

    def cancel_running(self) -> int:
        """The drain timeout passed: jobs cancelled from now on are interrupted (released),
        and ready ones are abandoned. The runner then cancels the jobs nursery. Returns how
        many jobs there are."""
        self._cancelling = True
        return len(self._running_jobs)
