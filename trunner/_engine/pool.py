"""The pool runs each message it is given, at most ``capacity`` at once, without a Trio
task per message.

It never takes a message it cannot start: fetchers reserve worker slots first
(:meth:`WorkerPool.reserve`) and read at most that many messages. Submitted messages wait
in a ready queue that *job loops* take them from: a job loop is a Trio task that runs job
after job, each in a context of its own (:mod:`trunner._executors.isolated`); the first time a job
waits, it makes sure there are enough idle job loops for every job still ready, so no job
ever waits behind another. Jobs that never wait (the common case for short tasks) thus
cost no Trio task of their own.

The pool runs the attempt of an ``async def`` task with no options inline: the hot path,
which awaits the task's action itself (on the event loop, a task's body *is* its action:
see :mod:`trunner._executors.base`). An entry
becomes a job in :mod:`trunner._engine.intake`; the rest of running an attempt (a job
refused before it runs, an attempt with options or middleware, a failure handed to its
outcome) is :mod:`trunner._engine.attempts`.

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
from collections.abc import Callable, Mapping, Sequence

import trio

from .._context import _current_message
from .._executors.base import Executor, RunIn, bind_bodies
from .._executors.isolated import Isolated
from .._executors.places import default_executors
from .._executors.threads import ThreadExecutor
from .._redis import RawEntry
from .._util import ErrorLog
from .._wire.workflow import workflow_mark
from ..config import RunnerConfig
from ..registry import TaskRegistry
from .admission import Admission
from .attempts import Attempts
from .counters import Counters
from .holdings import Holdings, Job, beat_interval
from .intake import Intake
from .outcomes import Outcomes
from .slots import WorkerSlots

__all__ = ["WorkerPool"]


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
        executors: Mapping[RunIn, Executor] | None = None,
    ) -> None:
        if executors is None:
            executors = default_executors(config)
        #: Where task bodies run: the loop, worker threads, worker processes.
        self.executors = executors
        self._holdings = holdings
        self._running_jobs = holdings.running  # submitted and not ended: ready or running
        self._cancel_marks = holdings.cancelled
        self._outcomes = outcomes
        self._succeeded = outcomes.succeeded  # bound once: called for every message
        self._counters = counters
        self._on_task_time = on_task_time
        #: Makes a job of each entry submitted (bound once: called for every message).
        self._make_job = Intake(registry, config, holdings.cancelled).make
        self._group = config.consumer_group
        attempts = Attempts(config, outcomes, errors, admission, bind_bodies(registry, executors))
        #: The middleware around each attempt; None without any (the hot path checks it).
        self._attempt_hooks = attempts.hooks
        # The paths of an attempt off the hot one (bound once, as the methods they were).
        self._not_run = attempts.not_run
        self._failed = attempts.failed
        self._run_with_options = attempts.run_with_options
        self._ended_by = attempts.ended_by
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
    def threads_abandoned(self) -> int:
        """Attempts whose worker thread was abandoned (see ``_executors.threads``)."""
        threads = self.executors.get("thread")
        return threads.abandoned if isinstance(threads, ThreadExecutor) else 0

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
                # (plain: an async def; the bodies of the others come from their executors)
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
            up = await self._ended_by(job, exc, cancelling=self._cancelling)
            if up is not None:  # the cancellation alone: the job loop's scope catches its own
                raise up  # noqa: B904 - exc, or part of it
        finally:
            self._ended(job)

    # -- cancelling a task ----------------------------------------------------------------

    def cancel_task(self, task_id: str) -> bool:
        """Cancel the task ``task_id`` if a job of this pool holds it: not started yet, it
        will not start; running, its job loop's scope is cancelled. Returns whether it was
        held here. Either way its outcome is 'cancelled' — unless its attempt had ended
        already: its outcome is being written (a retry, a dead letter) and is not cut off
        half way; a retry is removed once written (see ``Outcomes``), and the cancel mark
        stays besides, to drop the retry if that fails."""
        held = False
        for job in self._running_jobs.values():
            if job.fields[4] == task_id or _step_of(job, self._group, task_id):
                running = not (job.cancel_requested or job.ended)
                if running and job.waited and job.loop_scope is not None:
                    job.loop_scope.cancel()
                job.cancel_requested = True  # ended: a retry being written is removed after
                if job.fields[4] == task_id:
                    return True
                held = True  # a workflow's mark: each of its steps held here
        return held

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


def _step_of(job: Job, group: str, mark: str) -> bool:
    """Whether ``job`` is a step of the workflow of ``group`` whose cancel mark is ``mark``
    (it cancels every step: the workflow failed fast, or was cancelled as a whole)."""
    options = job.fields[8]
    flow = options.workflow if options is not None else None
    return flow is not None and workflow_mark(group, flow.workflow) == mark
