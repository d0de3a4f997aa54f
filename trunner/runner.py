"""The runner: wires the components into the nursery tree and owns the shutdown order.

::

    Runner.run
    └── watcher nursery: _stop_on_cancel          an outer cancellation → stop()
        └── shielded: services nursery            (stopped by step 4)
              ├── RedisHandle.run                 redis_handle.py  task code's batched Redis
              ├── Reporter.run                    reporter.py      timings, membership, capacity
              ├── AckBuffer.run                   acks.py
              ├── Heartbeater.run                 heartbeat.py
              ├── Canceller.run                   cancellation.py  cancel marks, the group's notices
              ├── Pauser.run                      pausing.py       the pause mark -> the pause gate
              ├── Elector.run                     election.py      the leader lease
              ├── Leadership.run                  leadership.py    per promotion, a nursery of
              │     └── DelayedMover · CronScheduler · Aggregator · Janitor · user chores
              ├── JobHost.watch                   _jobhost.py      a failure of the job loops
              └── fetching nursery                fetcher.py       num_fetchers loops (step 1)

    a Trio system task: the job host's nursery   _jobhost.py      (closed by step 3)
        └── job loops                             pool.py          running the messages

The job loops run outside the runner's tree so that a task ignoring cancellation cannot
hold the runner's exit: leaving ``open_runner`` takes at most ``drain_timeout +
cancel_grace`` plus the bounded clean-up steps (each at most ``CLEANUP_TIMEOUT``).

Every component has one lifecycle: ``await nursery.start(component.run)``, a synchronous
``stop()``, and a ``stopped`` event. They share what they must through values and one
ledger, :class:`~trunner._engine.holdings.Holdings`, never through each other's fields.

Leaving ``open_runner`` (normally, by an exception, or by cancellation) runs, in order:

0. messages read from now on are not started, and a follower stops campaigning (a
   stopping instance must not take the lead);
1. fetchers stop: nothing new is read or claimed;
2. messages fetched but not started are released for immediate reclaim;
3. running tasks get ``drain_timeout`` to finish (and are acknowledged if they do); the
   ones still running are cancelled and their messages released, never acknowledged;
   those still running ``cancel_grace`` later are abandoned (released too, counted in
   ``statistics().abandoned`` and logged);
4. the services stop one by one, in the order of :data:`SERVICE_SHUTDOWN` (a sender
   before its receiver): interrupted messages are released, acknowledgements and timings
   flushed, the chores stopped and the leadership released (followers are told at once),
   the instance leaves the group;
5. anything still pending for this instance is released (a finished task whose
   acknowledgement could not be written stays pending), its consumers are deleted when
   empty, connections are closed, and ``state`` becomes STOPPED.

Every step that talks to Redis is shielded and bounded.

Supervision: a runner ends with :class:`~trunner.RunnerCrashed` only for a defect of
trunner itself, and never the next instance for the same data. Errors caused by data (a
stream entry, a stored value, a registered cron expression, a task's payload) are
contained to that item by the loop that read it: the item is dead-lettered (messages) or
set aside in the quarantine (:mod:`trunner.quarantine`), counted, reported through
:meth:`Runner.errors`, logged once, and the loop goes on. A leader chore that fails
anyway is restarted after a backoff (:mod:`trunner._leader.leadership`); Redis errors are retried
with backoff by every loop.
"""

from __future__ import annotations

import contextvars
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Protocol

import attrs
import trio

from ._context import NoRunnerInEagerCall, in_eager_call
from ._engine.acks import AckBuffer
from ._engine.admission import Admission
from ._engine.cancellation import Canceller
from ._engine.counters import Counters
from ._engine.fetcher import Fetcher, ReclaimSchedule
from ._engine.heartbeat import Heartbeater
from ._engine.holdings import Holdings, Job
from ._engine.jobhost import JobHost
from ._engine.outcomes import Outcomes
from ._engine.pausing import PauseGate, Pauser
from ._engine.pool import WorkerPool
from ._engine.quarantine import Quarantine
from ._engine.release import Releaser
from ._engine.reporter import LocalTimings, MetricsBuffer, Reporter
from ._leader.aggregator import Aggregator
from ._leader.cron import CronScheduler
from ._leader.election import Elector
from ._leader.janitor import Janitor
from ._leader.leadership import Chore, Leadership
from ._leader.mover import DelayedMover
from ._producer import Producer
from ._redis import Broker, check_url, open_transport
from ._util import ErrorLog, connection_name, instance_id, logger, run_in_background
from ._wire.keys import DEFAULT_LANE, Keys
from .config import RunnerConfig
from .errors import (
    BackendError,
    RedisCommandError,
    RedisUnavailable,
    RunnerAlreadyStarted,
    RunnerCrashed,
    RunnerNotRunning,
)
from .handles import Waiters
from .redis_handle import RedisHandle
from .statistics import RunnerState, RunnerStatistics, TaskTotals
from .task import TaskRegistry

__all__ = ["SERVICE_SHUTDOWN", "Runner", "current_runner", "open_runner"]

#: Bound on each shutdown step that talks to Redis.
CLEANUP_TIMEOUT = 5.0
#: How long stopped fetchers may take to return before they are cancelled.
FETCHER_GRACE = 1.0


_current_runner: contextvars.ContextVar[Runner] = contextvars.ContextVar("trunner_current_runner")


def current_runner() -> Runner:
    """The runner executing the current task.

    Inside a task, this is the runner running it: dispatch a follow-up task with
    ``await trunner.current_runner().dispatch(...)``, or use its
    [``redis``][trunner.Runner.redis] handle. It also works inside a failed-task handler.

    Returns:
        The [``Runner``][trunner.Runner] running the current task.

    In a task run eagerly ([``TaskRegistry.call``][trunner.TaskRegistry.call],
    [``trunner.testing.call_task``][trunner.testing.call_task]), it is the runner given
    to ``call_task(..., runner=runner)``.

    Raises:
        RunnerNotRunning: Outside of a task run by a runner, and in a task run eagerly
            without ``runner=`` (then the eager call raises it at once, saying how to
            give the task a runner, instead of retrying).
    """
    try:
        return _current_runner.get()
    except LookupError:
        if in_eager_call():
            raise NoRunnerInEagerCall from None
        raise RunnerNotRunning("current_runner() is only available inside a task") from None


#: At most this many task names are listed in the start-up log line.
LOGGED_NAMES = 50


def _log_registry(group: str, tasks: TaskRegistry) -> None:
    """Log, at start, what this runner can run: its tasks and its cron schedules (a
    WARNING when there is no task: every message would be dead-lettered)."""
    names = sorted(tasks.names)
    crons = tasks.crons
    extra = {"tasks": names, "cron": {c.name: c.expression for c in crons}}
    if not names:
        logger.warning(
            "the registry of this runner of group %r has no task: every message it fetches "
            "will be dead-lettered as an unknown task; register tasks before starting it "
            "(to dispatch without running tasks, use trunner.open_client)",
            group,
            extra=extra,
        )
        return
    shown = ", ".join(names[:LOGGED_NAMES])
    if len(names) > LOGGED_NAMES:
        shown += f" and {len(names) - LOGGED_NAMES} more"
    schedules = "; ".join(
        f"{c.name} {c.expression!r} ({c.timezone}) -> {c.task_name}" for c in crons
    )
    logger.info(
        "group %r: %d task(s) this runner can run: %s; cron schedules: %s",
        group,
        len(names),
        shown,
        schedules or "none",
        extra=extra,
    )


@attrs.frozen
class _Components:
    """Everything one run of a runner is made of, built once by :meth:`Runner._build`."""

    broker: Broker
    redis: RedisHandle
    waiters: Waiters
    canceller: Canceller
    gate: PauseGate
    pauser: Pauser
    holdings: Holdings
    quarantine: Quarantine
    acks: AckBuffer
    outcomes: Outcomes
    pool: WorkerPool
    releaser: Releaser
    heartbeater: Heartbeater
    fetchers: tuple[Fetcher, ...]
    reporter: Reporter
    elector: Elector
    leadership: Leadership
    mover: DelayedMover
    cron: CronScheduler
    aggregator: Aggregator
    janitor: Janitor


class _Stoppable(Protocol):
    """The lifecycle every component shares: ``run`` until ``stop()``, then ``stopped``."""

    @property
    def stopped(self) -> trio.Event: ...

    def stop(self) -> None: ...


async def _stopped(component: _Stoppable) -> None:
    """Stop ``component`` and wait until it has (bounded by the step's timeout)."""
    component.stop()
    await component.stopped.wait()


async def _last_report(reporter: Reporter) -> None:
    """Stop reporting every second, then report the last timings once."""
    await _stopped(reporter)
    await reporter.report()


#: Step 4 of the shutdown, in order; each step is bounded and its errors are logged. The
#: rule: a sender stops before its receiver. The pool (drained by step 3) handed the
#: releaser its interrupted messages and the ack buffer its finished ones; the reporter's
#: last report carries the timings of the last tasks, and no report follows the instance's
#: leaving (it would register it again); the chores write as the leader until they stop,
#: then the elector releases the lease; the heartbeater keeps every message still held
#: fresh until the instance has left the group; the Redis handle serves task code (and
#: failed-task handlers) until the last of them has ended.
SERVICE_SHUTDOWN: tuple[tuple[str, Callable[[_Components], Awaitable[Any]]], ...] = (
    ("releasing interrupted messages", lambda c: c.releaser.release_queued()),
    ("flushing acknowledgements", lambda c: _stopped(c.acks)),
    ("flushing timings", lambda c: _last_report(c.reporter)),
    ("stopping the leader chores", lambda c: _stopped(c.leadership)),
    ("releasing the leadership", lambda c: _stopped(c.elector)),
    ("leaving the group", lambda c: c.reporter.deregister()),
    ("stopping heartbeats", lambda c: _stopped(c.heartbeater)),
    ("stopping the result waiters", lambda c: _stopped(c.waiters)),
    ("stopping the pause watcher", lambda c: _stopped(c.pauser)),
    ("stopping the canceller", lambda c: _stopped(c.canceller)),
    ("closing the Redis handle", lambda c: _stopped(c.redis)),
)


class Runner(Producer):
    """One runner instance of a consumer group.

    [``open_runner``][trunner.open_runner] creates and runs one for you. To manage it
    yourself, create it and start it in a nursery with ``await nursery.start(runner.run)``
    ([``run``][trunner.Runner.run] follows Trio's ``task_status`` convention), and end it
    with [``stop``][trunner.Runner.stop]. The constructor checks its arguments like
    ``open_runner`` does, and connects to nothing.

    Besides the members below, a runner has every
    [dispatch and inspection method][dispatch-and-inspection-methods].

    Args:
        redis: The Redis URL, as for [``open_runner``][trunner.open_runner].
        config: The configuration of this instance.
        tasks: The registry whose tasks this instance runs.

    Raises:
        TypeError: ``config`` is not a [``RunnerConfig``][trunner.RunnerConfig], ``tasks``
            is not a [``TaskRegistry``][trunner.TaskRegistry], or ``redis`` is not a
            string.
        ValueError: ``redis`` has an unsupported scheme or is not a valid URL, or is
            ``memory://`` without a name.
        TaskNotFound: A cron schedule of ``tasks`` names a task that is not registered
            ([``TaskRegistry.check``][trunner.TaskRegistry.check]).
    """

    def __init__(self, redis: str, config: RunnerConfig, tasks: TaskRegistry) -> None:
        if not isinstance(config, RunnerConfig):
            raise TypeError(f"config must be a RunnerConfig, got {type(config).__name__}")
        if not isinstance(tasks, TaskRegistry):
            raise TypeError(f"tasks must be a TaskRegistry, got {type(tasks).__name__}")
        tasks.check()
        check_url(redis)
        super().__init__(
            registry=tasks,
            max_payload_bytes=config.max_payload_bytes,
            instance_ttl=config.instance_ttl,
            middleware=config.middleware,
            lanes=config.lane_names if len(config.lanes) > 1 else None,
        )
        self._url = redis
        self.config = config
        """The configuration."""
        self.tasks = tasks
        """The registry whose tasks this instance runs."""
        self.keys = Keys(
            config.prefix, config.consumer_group, config.queue or config.consumer_group
        )
        """The Redis key names of the group."""
        self.consumer_name = config.consumer_name or instance_id(config.host)
        """This instance's consumer name: ``config.consumer_name``, or
        ``<host>:<pid>:<6 hex digits>``. It is also the instance's id in the leadership
        lease and in [``instances``][trunner.Runner.instances]."""
        self._state = RunnerState.INIT
        self._counters = Counters()
        self._errors = ErrorLog()
        self._stop_requested = trio.Event()
        self._hurry = False
        self._drain_scope: trio.CancelScope | None = None
        self._components: _Components | None = None
        self.timings = LocalTimings()
        """This instance's execution-time histograms per task, cumulative since it started
        (what the Prometheus exporter publishes)."""
        #: Leader-only work: each runs in a nursery opened on promotion, cancelled on demotion.
        self._leader_chores: list[Chore] = []

    def __repr__(self) -> str:
        return (
            f"<Runner group={self.config.consumer_group!r} consumer={self.consumer_name!r} "
            f"state={self._state.name}>"
        )

    # -- public face ------------------------------------------------------------------------

    @property
    def state(self) -> RunnerState:
        """Where the runner is in its life: see [``RunnerState``][trunner.RunnerState]."""
        return self._state

    @property
    def is_leader(self) -> bool:
        """Whether this instance holds the group's leadership lease now."""
        c = self._components
        return c is not None and c.elector.is_leader

    @property
    def redis(self) -> RedisHandle:
        """The [Redis handle][trunner.RedisHandle] for task code, batched across tasks.

        Inside a task it is also ``trunner.current_runner().redis``. Once the runner has
        stopped, its commands raise [``RunnerNotRunning``][trunner.RunnerNotRunning].

        Raises:
            RunnerNotRunning: The runner was never started.
        """
        c = self._components
        if c is None:
            raise RunnerNotRunning(f"{self!r} is not running")
        return c.redis

    @property
    def elector(self) -> Elector | None:
        """The group's [elector][trunner.election.Elector], from start-up on; ``None`` before.

        Its events, fence number and current leader are the group's leadership.
        """
        c = self._components
        return c.elector if c is not None else None

    @property
    def consumers(self) -> list[str]:
        """The consumer names of this instance's fetchers.

        ``consumer_name``, then ``consumer_name/1``, ``consumer_name/2`` ... up to
        ``num_fetchers`` names.
        """
        return [self._fetcher_consumer(i) for i in range(self.config.num_fetchers)]

    def _fetcher_consumer(self, index: int) -> str:
        return self.consumer_name if index == 0 else f"{self.consumer_name}/{index}"

    def task_totals(self) -> dict[str, TaskTotals]:
        """Outcomes per task on this instance since it started.

        Returns:
            For each task name that ran here, a copy of its totals: the numbers of
            ``succeeded``, ``failed`` and ``retried`` attempts and of ``dead_lettered``
            messages. Messages of no registered task (unknown names, undecodable
            entries) count under the one name ``"(unregistered)"``: names read from
            Redis never get figures of their own, so this, the timings and the
            Prometheus metrics stay bounded by the registry.
        """
        return {name: attrs.evolve(t) for name, t in self._counters.per_task.items()}

    def statistics(self) -> RunnerStatistics:
        """An immutable snapshot of this instance's counters since it started.

        Local and synchronous: it can be called in any state, before the start and after
        the stop included. The group's statistics are
        [``group_stats``][trunner.Runner.group_stats].
        """
        c = self._counters
        parts = self._components
        mover = parts.mover if parts else None
        return RunnerStatistics(
            state=self._state,
            capacity=parts.pool.capacity if parts else self.config.num_workers,
            in_flight=parts.pool.in_flight if parts else 0,
            max_in_flight=c.max_in_flight,
            fetched=c.fetched,
            reclaimed=c.reclaimed,
            processed=c.succeeded + c.failed,
            succeeded=c.succeeded,
            failed=c.failed,
            retried=c.retried,
            dead_lettered=c.dead_lettered,
            released=c.released,
            interrupted=c.interrupted,
            abandoned=c.abandoned,
            expired=c.expired,
            cancelled=c.cancelled,
            skipped=c.skipped,
            reservations_lost=c.reservations_lost,
            discarded=c.discarded,
            acked=c.acked,
            errors=self._errors.captured,
            scheduler_passes=mover.passes if mover else 0,
            scheduler_seconds=mover.pass_seconds if mover else 0.0,
            delayed_moved=mover.moved if mover else 0,
            cron_fired=parts.cron.fired if parts else 0,
            unique_dropped=mover.unique_dropped if mover else 0,
            quarantined=c.quarantined,
            chores_restarted=c.chores_restarted,
            deferred_rate=c.deferred_rate,
            deferred_concurrency=c.deferred_concurrency,
            slots_held=parts.holdings.slots_held() if parts else 0,
            lanes=self._lane_counts(),
            paused=parts.gate.paused if parts else False,
        )

    def _lane_counts(self) -> dict[str, int]:
        """Messages fetched per lane this runner reads (counted by the fetch loops with
        more than one lane; with one, all of them)."""
        c = self._counters
        lanes = self.config.lane_names
        if len(lanes) == 1:
            return {lanes[0]: c.fetched + c.reclaimed}
        return {lane: c.lanes.get(lane, 0) for lane in lanes}

    async def wait_paused(self) -> None:
        """Wait until this runner knows its group is paused and its fetch loops have
        stopped: from then on it reads and claims nothing until the group is resumed
        (see [Pausing a group](pause.md)). Returns at once if that is so already.

        Raises:
            RunnerNotRunning: The runner was never started.
        """
        await self._open_gate().wait_halted()

    async def wait_resumed(self) -> None:
        """Wait until this runner knows its group is not paused (its fetch loops fetch).
        Returns at once if that is so already.

        Raises:
            RunnerNotRunning: The runner was never started.
        """
        await self._open_gate().wait_open()

    def _open_gate(self) -> PauseGate:
        c = self._components
        if c is None:
            raise RunnerNotRunning(f"{self!r} was never started")
        return c.gate

    def errors(self) -> AsyncIterator[BaseException]:
        """The errors the runner handled, as they happen.

        It yields:

        - [``TaskFailed``][trunner.TaskFailed], for every attempt that raised;
        - [``MaxRetryExceeded``][trunner.MaxRetryExceeded],
          [``TaskNotFound``][trunner.TaskNotFound] or
          [``InvalidMessage``][trunner.InvalidMessage], for every message given up;
        - the exception raised by a failed-task handler, or by a ``retry_backoff``
          callable;
        - [``ReservationLost``][trunner.ReservationLost], when a running message was
          taken over;
        - [``PayloadTooLarge``][trunner.PayloadTooLarge], when the leader skipped a cron
          tick whose message is larger than this runner's ``max_payload_bytes``;
        - [``BackendError``][trunner.BackendError] subclasses
          ([``RedisUnavailable``][trunner.RedisUnavailable],
          [``RedisCommandError``][trunner.RedisCommandError]), for Redis failures the
          runner retried or gave up on;
        - unexpected internal errors that were contained to one message.

        The runner never waits for the reader: the newest 1000 errors are kept and older
        ones are dropped (``statistics().errors`` counts them all). Each error is yielded
        to one reader only. The iteration ends once the runner has stopped and every kept
        error was read. A cancelled read takes no error: the next read yields it.
        """
        return aiter(self._errors)

    def stop(self, *, drain: bool = True) -> None:
        """Ask for a graceful shutdown; returns at once.

        [``run``][trunner.Runner.run] returns when the shutdown is done (see
        [Shutdown](concepts.md#shutdown)). Calling it again does nothing, except with
        ``drain=False``.

        Args:
            drain: With ``False`` (also when called again with it during a drain), running
                tasks are cancelled at once instead of being given up to
                ``drain_timeout`` to finish; their messages are released for immediate
                reclaim, never acknowledged.
        """
        if not drain:
            self._hurry = True
            if self._drain_scope is not None:
                self._drain_scope.cancel()
        self._stop_requested.set()

    # -- what components call back ----------------------------------------------------------

    def _apply_capacity(self, value: int) -> None:
        """Apply the capacity the leader published (within this instance's bounds).

        Lowering it cancels nothing; blocked reads are interrupted so that they give back
        the worker slots they hold, and take only what the new capacity allows.
        """
        c = self._components
        if c is None:
            return
        low, high = self.config.worker_bounds
        capacity = max(low, min(high, value))
        before = c.pool.capacity
        if capacity == before:
            return
        logger.info("capacity: %d -> %d workers", before, capacity)
        c.pool.capacity = capacity
        if capacity < before:
            for fetcher in c.fetchers:
                fetcher.nudge()

    async def _record_progress(self, job: Job) -> None:
        """Write a task's progress (``trunner.report_progress``)."""
        c = self._components
        if c is None:
            raise RunnerNotRunning(f"{self!r} is not running")
        await c.outcomes.progress(job)

    def _scheduled(self, due_ms: int) -> None:
        if self._components is not None:
            self._components.mover.due_at(due_ms)

    # -- life -------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start, report readiness through ``task_status.started()``, serve, shut down.

        It serves until [``stop``][trunner.Runner.stop] or cancellation. A runner runs
        once. Started with ``nursery.start``, its errors arrive inside exception groups;
        [``open_runner``][trunner.open_runner] unwraps them.

        Cancellation: cancelling ``run`` does not cut the shutdown short. It stops the
        runner gracefully, like ``stop()``: running tasks still get up to
        ``drain_timeout`` to finish, and each shutdown step that talks to Redis is shielded
        and bounded (5 s). The cancellation then propagates.

        Raises:
            RunnerAlreadyStarted: The runner was started before.
            RedisUnavailable: Redis cannot be reached or did not answer within
                ``connect_timeout``, or start-up took longer than that again.
            RedisCommandError: Redis refused a start-up command.
        """
        if self._state is not RunnerState.INIT:
            raise RunnerAlreadyStarted(f"{self!r} was already started; create a new Runner")
        self._state = RunnerState.STARTING
        try:
            async with open_transport(
                self._url,
                client_name=connection_name(f"trunner:{self.consumer_name}"),
                max_connections=self.config.max_connections,
                connect_timeout=self.config.connect_timeout,
                command_timeout=self.config.command_timeout,
            ) as transport:
                broker = Broker(
                    transport,
                    self.keys,
                    delete_on_ack=self.config.delete_on_ack,
                    lanes=self.config.lane_names,
                )
                await self._prepare(broker)
                self._components = self._build(broker)
                async with trio.open_nursery() as watcher:
                    watcher.start_soon(self._stop_on_cancel)
                    with trio.CancelScope(shield=True):
                        await self._serve(self._components, task_status)
                    watcher.cancel_scope.cancel()
        finally:
            self._broker = None
            self._waiters = None
            self._state = RunnerState.STOPPED
            self._errors.close()
            if self._components is not None:
                logger.info("runner stopped: %s", _stop_summary(self.statistics()))
                self._components.elector._close()

    async def _stop_on_cancel(self) -> None:
        try:
            await trio.sleep_forever()
        finally:
            self.stop()

    async def _prepare(self, broker: Broker) -> None:
        timeout = self.config.connect_timeout
        try:
            with trio.fail_after(timeout):
                await broker.load_scripts()
                await self._ensure_group(broker)
                await self._declare_task_lanes(broker)
                policy = await broker.eviction_policy()
        except trio.TooSlowError:
            raise RedisUnavailable(
                f"Redis at {broker.description} did not finish start-up within {timeout} s"
            ) from None
        if policy is not None and policy[0] != "noeviction":
            limit = f"maxmemory is {policy[1]} bytes" if policy[1] else "maxmemory is not set yet"
            logger.warning(
                "Redis at %s has maxmemory-policy %s (%s): when it is full it may evict "
                "trunner's keys (queued tasks, delayed tasks, locks, the lease); use "
                "maxmemory-policy noeviction",
                broker.description,
                policy[0],
                limit,
            )

    async def _declare_task_lanes(self, broker: Broker) -> None:
        """Name the lanes of its tasks' ``priority`` (other than those it reads, which
        ``ensure_group`` named) in the queue's registry of lanes: their cron ticks go
        there, and a lane nobody reads shows up in ``inspect`` and in the leader's
        warning (see [Priority lanes](lanes.md))."""
        lanes = self._own_lanes() - {DEFAULT_LANE}
        extra = sorted(lanes - set(self.config.lane_names))
        if extra:
            await broker.declare_lanes(extra)
        self._declared.update(lanes)

    async def _ensure_group(self, broker: Broker) -> None:
        """Create the consumer group if missing. When the stream (or the group's floor)
        holds a value of another type, written by something else, it is set aside first:
        otherwise no runner of the group could ever start."""
        try:
            await broker.ensure_group()
        except RedisCommandError as exc:
            quarantine = Quarantine(broker, self._counters, self._errors, self.consumer_name)
            if not await quarantine.after_error(exc):
                raise
            await broker.ensure_group()

    def _build(self, broker: Broker) -> _Components:
        config, counters, errors = self.config, self._counters, self._errors
        metrics = MetricsBuffer(cumulative=self.timings)
        holdings = Holdings()
        quarantine = Quarantine(broker, counters, errors, self.consumer_name)
        acks = AckBuffer(broker, config, holdings, counters, errors)
        mover = DelayedMover(broker, errors, quarantine, metrics.schedule_pass)
        outcomes = Outcomes(
            broker,
            config,
            holdings,
            acks,
            counters,
            errors,
            mover.due_at,
            quarantine,
            task_names=lambda: self.tasks.names,
        )
        admission = None
        if any(task.limits is not None for task in self.tasks):
            admission = Admission(broker, holdings, counters, errors, quarantine, mover.due_at)
        pool = WorkerPool(
            self.tasks, config, holdings, outcomes, counters, metrics.task_time, errors, admission
        )
        releaser = Releaser(broker, holdings, counters)
        schedule = ReclaimSchedule(config.reclaim_interval, config.lane_names)
        elector = Elector(
            broker.transport,
            self.keys.leader,
            ttl=config.leader_ttl,
            wait=config.leader_wait,
            jitter=config.leader_jitter,
            id=self.consumer_name,
            on_bad_data=lambda key, repaired: quarantine.set_aside(
                "leader", key, repaired, b"", "renamed aside"
            ),
        )
        cron = CronScheduler(broker, self.tasks, errors, quarantine, config.max_payload_bytes)
        aggregator = Aggregator(broker, config, errors, quarantine)
        janitor = Janitor(
            broker,
            config,
            errors,
            quarantine,
            self.consumers,
            {t.name: t.concurrency for t in self.tasks if t.concurrency is not None},
        )
        chores = [mover.run, cron.run, aggregator.run, janitor.run, *self._leader_chores]
        gate = PauseGate(config.num_fetchers)
        pauser = Pauser(broker, gate, quarantine, errors)
        return _Components(
            broker=broker,
            redis=RedisHandle(broker.transport),
            waiters=Waiters(broker),
            canceller=Canceller(
                broker,
                holdings,
                pool.cancel_task,
                errors,
                on_notice=pauser.heard,
                on_subscribed=pauser.resync,
            ),
            gate=gate,
            pauser=pauser,
            holdings=holdings,
            quarantine=quarantine,
            acks=acks,
            outcomes=outcomes,
            pool=pool,
            releaser=releaser,
            heartbeater=Heartbeater(broker, holdings, pool.min_beat_interval, counters, errors),
            fetchers=tuple(
                Fetcher(
                    broker,
                    pool,
                    releaser,
                    quarantine,
                    config,
                    consumer,
                    schedule,
                    counters,
                    errors,
                    gate,
                )
                for consumer in self.consumers
            ),
            reporter=Reporter(
                broker,
                config,
                self.consumer_name,
                config.host or socket.gethostname(),
                metrics,
                lambda: pool.capacity,
                self._apply_capacity,
                errors,
                quarantine,
            ),
            elector=elector,
            leadership=Leadership(elector, chores, counters, errors),
            mover=mover,
            cron=cron,
            aggregator=aggregator,
            janitor=janitor,
        )

    async def _serve(self, c: _Components, task_status: trio.TaskStatus[None]) -> None:
        _current_runner.set(self)  # inherited by every task the nurseries below start
        clean = False
        try:
            async with trio.open_nursery() as services:
                await self._start_services(services, c)
                jobs = JobHost()
                c.pool.bind(await jobs.start())
                services.start_soon(jobs.watch)
                try:
                    async with trio.open_nursery() as fetching:
                        for fetcher in c.fetchers:
                            await fetching.start(fetcher.run)
                        self._started(c.broker)
                        task_status.started()
                        await self._stop_requested.wait()
                        self._begin_stopping(c)  # 0
                        await self._stop_fetching(fetching, c)  # 1
                    await self._release_unstarted(c)  # 2
                    await self._drain(c)  # 3
                finally:
                    await self._close_jobs(jobs, c)  # 3, and on a failure too
                await self._stop_services(services, c)  # 4
            clean = True
        finally:
            if not clean:  # a component failed: save what can be saved, then re-raise
                with trio.CancelScope(shield=True):
                    await self._cleanup("flushing acknowledgements", c.acks.flush())
                    await self._cleanup("releasing after a failure", self._release(c, True))
        await self._leave(c)  # 5

    async def _start_services(self, services: trio.Nursery, c: _Components) -> None:
        await services.start(c.redis.run)
        await services.start(c.waiters.run)
        await services.start(c.canceller.run)
        await services.start(c.pauser.run)  # read before any fetch: a paused group stays so
        await services.start(c.reporter.run)  # registered before the runner is started
        await services.start(c.acks.run)
        await services.start(c.heartbeater.run)
        await services.start(c.elector.run)  # the first election attempt is made
        await services.start(c.leadership.run)

    def _started(self, broker: Broker) -> None:
        self._broker = broker
        self._waiters = self._components.waiters if self._components else None
        self._state = RunnerState.STARTED
        config = self.config
        delay = config.reclaim_delay
        logger.info(
            "runner started: group %r (queue %r), consumer %r, %d workers, Redis at %s; "
            "reclaim_delay "
            "%g s: the tasks of an instance that dies run again after about %g s, and an "
            "event-loop stall or Redis outage longer than about %g s may run a task twice",
            config.consumer_group,
            self.keys.queue,
            self.consumer_name,
            config.num_workers,
            broker.description,
            delay,
            delay + config.reclaim_interval,
            round(delay * 2 / 3, 1),
            extra={"reclaim_delay": delay},
        )
        if len(config.lanes) > 1:
            logger.info(
                "priority lanes %s, served %s",
                ", ".join(f"{lane} ({weight})" for lane, weight in config.lanes),
                "strictly in that order" if config.strict_lanes else "by weight",
            )
        _log_registry(config.consumer_group, self.tasks)

    # -- the shutdown steps, in order -------------------------------------------------------

    def _begin_stopping(self, c: _Components) -> None:
        """0. Messages read from now on are released, and a follower stops campaigning."""
        self._state = RunnerState.STOPPING
        logger.info("runner stopping: %d tasks running", c.pool.in_flight)
        c.pool.start_stopping()
        if not c.elector.is_leader:
            c.elector.stop()  # a stopping follower must not take the lead

    async def _stop_fetching(self, fetching: trio.Nursery, c: _Components) -> None:
        """1. Nothing new is read or claimed."""
        for fetcher in c.fetchers:
            fetcher.stop()
        with trio.move_on_after(FETCHER_GRACE):
            for fetcher in c.fetchers:
                await fetcher.stopped.wait()
        fetching.cancel_scope.cancel()

    async def _release_unstarted(self, c: _Components) -> None:
        """2. Messages fetched but not started are released for immediate reclaim."""
        await self._cleanup("releasing unstarted messages", self._release(c, False))

    async def _drain(self, c: _Components) -> None:
        """3. Running tasks get ``drain_timeout``; then they are cancelled (interrupted)."""
        pool = c.pool
        if not pool.in_flight:
            return
        timeout = 0.0 if self._hurry else self.config.drain_timeout
        logger.info("draining %d running tasks for up to %s s", pool.in_flight, timeout)
        with trio.move_on_after(timeout) as self._drain_scope:
            await pool.wait_idle()
        self._drain_scope = None
        if not pool.in_flight:
            return
        cancelled = pool.cancel_running()
        if self._hurry:
            logger.warning("stopping at once: cancelling %d running tasks", cancelled)
        else:
            logger.warning("drain timeout passed: cancelling %d running tasks", cancelled)

    async def _close_jobs(self, jobs: JobHost, c: _Components) -> None:
        """3. The job loops end: cancelled, and given ``cancel_grace`` to unwind; tasks that
        ignore the cancellation longer are abandoned (left to end on their own), and
        their messages released."""
        grace = self.config.cancel_grace
        with trio.CancelScope(shield=True):
            if await jobs.close(grace):
                return
        stuck = list(c.holdings.running.values())
        for job in stuck:
            c.holdings.release_later(job.consumer, job.message_id)
        self._counters.abandoned += len(stuck)
        logger.error(
            "%d tasks still ran %s s after they were cancelled (they ignore cancellation): "
            "abandoned, their messages released for another instance: %s",
            len(stuck),
            grace,
            ", ".join(job.about() for job in stuck[:10]) + (" ..." if len(stuck) > 10 else ""),
        )

    async def _stop_services(self, services: trio.Nursery, c: _Components) -> None:
        """4. The services stop in the order of :data:`SERVICE_SHUTDOWN`."""
        for what, step in SERVICE_SHUTDOWN:
            await self._cleanup(what, step(c))
        services.cancel_scope.cancel()

    async def _leave(self, c: _Components) -> None:
        """5. What is still pending for this instance is released; empty consumers go."""
        await self._cleanup("final release", self._release(c, True))
        await self._cleanup("deleting consumers", self._delete_consumers(c.broker))

    async def _release(self, c: _Components, final: bool) -> None:
        released = await c.releaser.release_queued()
        for consumer in self.consumers:
            released += await c.releaser.release_orphans(consumer, final=final)
        if released:
            logger.info("released %d messages for immediate reclaim", released)

    async def _delete_consumers(self, broker: Broker) -> None:
        for consumer in self.consumers:
            await broker.delete_consumer_if_idle(consumer)

    async def _cleanup(self, what: str, step: Awaitable[Any]) -> None:
        """Run one shutdown step that talks to Redis: bounded, errors logged and captured."""
        with trio.move_on_after(CLEANUP_TIMEOUT) as scope:
            try:
                await step
            except BackendError as exc:
                self._errors.capture(exc)
                logger.warning("shutdown: %s failed: %s", what, exc)
        if scope.cancelled_caught:
            logger.warning("shutdown: %s did not finish within %s s", what, CLEANUP_TIMEOUT)


@asynccontextmanager
async def open_runner(
    redis: str, config: RunnerConfig, tasks: TaskRegistry
) -> AsyncIterator[Runner]:
    """Run one runner instance of ``config.consumer_group`` for the duration of the block.

    When the block starts, the runner is ``STARTED`` and ready: Redis answered, the scripts
    are loaded, the consumer group exists, every component runs, and the first attempt to
    take the group's leadership lease was made (``is_leader`` tells its outcome). Leaving
    the block, in any way, shuts the runner down in order (see
    [Shutdown](concepts.md#shutdown)), and the exit waits for the shutdown to finish.

    Cancellation: a cancellation of the block shuts the runner down gracefully, like any
    other exit: running tasks get up to ``drain_timeout`` to finish, and every shutdown
    step that talks to Redis is shielded and bounded. The cancellation then propagates.

    Args:
        redis: The Redis URL: ``redis://``, ``rediss://``, ``unix://``,
            ``redis+cluster://``, ``redis+sentinel://`` (and their ``rediss+`` forms), or
            ``memory://NAME``, an in-process server shared by name (see
            [Deployment](deployment.md#connecting)).
        config: The configuration of this instance.
        tasks: The registry whose tasks this instance runs.

    Yields:
        The started [``Runner``][trunner.Runner].

    Raises:
        TypeError: ``config`` is not a [``RunnerConfig``][trunner.RunnerConfig], ``tasks``
            is not a [``TaskRegistry``][trunner.TaskRegistry], or ``redis`` is not a
            string. Raised before anything starts.
        ValueError: An unsupported URL scheme, an invalid URL, or ``memory://`` without a
            name. Raised before anything starts.
        TaskNotFound: A cron schedule of ``tasks`` names a task that is not registered
            ([``TaskRegistry.check``][trunner.TaskRegistry.check]). Raised before
            anything starts.
        RedisUnavailable: Redis cannot be reached or did not answer within
            ``config.connect_timeout`` (wrong credentials also end up here), or start-up
            (loading the scripts, creating the group) took longer than that again.
        RedisCommandError: Redis refused a start-up command (ACL, out of memory ...).
        RunnerCrashed: A component of the runner failed; ``__cause__`` is the exception
            group. See [Exceptions](concepts.md#exceptions).

    An exception raised in the block leaves as itself, after the shutdown.
    """
    runner = Runner(redis, config, tasks)

    def crashed(what: str) -> RunnerCrashed:
        return RunnerCrashed(f"the runner failed: {what}")

    async with run_in_background(runner.run, runner.stop, crashed):
        yield runner


def _stop_summary(stats: RunnerStatistics) -> str:
    """The counters of a stopping runner that are not 0, in one short line (the whole
    snapshot is ``statistics()``)."""
    parts = [f"ran with capacity {stats.capacity}"]
    for field in attrs.fields(RunnerStatistics):
        value = getattr(stats, field.name)
        if field.name in _NOT_SUMMED or not value or isinstance(value, bool):
            continue
        shown = f"{value:.3f}" if isinstance(value, float) else value
        parts.append(f"{field.name.replace('_', ' ')} {shown}")
    return ", ".join(parts)


_NOT_SUMMED = frozenset({"state", "capacity", "in_flight"})
