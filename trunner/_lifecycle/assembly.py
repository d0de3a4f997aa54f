"""The composition root of a runner: connects to and prepares Redis for a run, wires every
component of the run into one :class:`Components`, and starts the services in order (the
figures they keep are read by :mod:`trunner._lifecycle.statistics`).

Every component has one lifecycle: ``await nursery.start(component.run)``, a synchronous
``stop()``, and a ``stopped`` event. They share what they must through values and one
ledger, :class:`~trunner._engine.holdings.Holdings`, never through each other's fields.

It wires the leader's chores (``_leader/``) and the handles task code holds (the Redis
handle, the result waiters) as much as the engine's services, so it sits above them all
in the import layers (``tests/unit/test_imports.py`` lists it beside the runner), though
it lives with the engine whose services it wires.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager

import attrs
import trio

from .._engine.acks import AckBuffer
from .._engine.admission import Admission
from .._engine.cancellation import Canceller
from .._engine.counters import Counters
from .._engine.fetcher import Fetcher, ReclaimSchedule
from .._engine.heartbeat import Heartbeater
from .._engine.holdings import Holdings
from .._engine.outcomes import Outcomes
from .._engine.pausing import PauseGate, Pauser
from .._engine.pool import WorkerPool
from .._engine.quarantine import Quarantine
from .._engine.release import Releaser
from .._engine.reporter import LocalTimings, MetricsBuffer, Reporter
from .._engine.stalls import open_watchdog
from .._executors.watchdog import Watchdog
from .._leader.aggregator import Aggregator
from .._leader.cron import CronScheduler
from .._leader.election import Elector
from .._leader.janitor import Janitor
from .._leader.leadership import Chore, Leadership
from .._leader.mover import DelayedMover
from .._redis import Broker, StallLink, open_transport
from .._util import ErrorLog, connection_name, logger
from .._waiting.waiters import Waiters
from .._wire.envelope import message_growth
from .._wire.keys import Keys
from ..config import RunnerConfig
from ..errors import RedisCommandError, RedisUnavailable
from ..redis_handle import RedisHandle
from ..registry import TaskRegistry

__all__ = [
    "Components",
    "build",
    "log_started",
    "open_broker",
    "prepare",
    "start_services",
]

#: At most this many task names are listed in the start-up log line.
LOGGED_NAMES = 50


@attrs.frozen
class Components:
    """Everything one run of a runner is made of, built once by :func:`build`: the
    services, and the values of the run they share (its configuration, counters, error
    log and consumer names)."""

    config: RunnerConfig
    counters: Counters
    errors: ErrorLog
    consumers: tuple[str, ...]
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
    watchdog: Watchdog | None  # None with stall_threshold=None; and its Redis link
    stall_link: StallLink | None


@asynccontextmanager
async def open_broker(
    url: str, config: RunnerConfig, keys: Keys, consumer_name: str
) -> AsyncIterator[Broker]:
    """Connect to Redis for one run: the transport, and the group's broker over it."""
    async with open_transport(
        url,
        client_name=connection_name(f"trunner:{consumer_name}"),
        max_connections=config.max_connections,
        connect_timeout=config.connect_timeout,
        command_timeout=config.command_timeout,
    ) as transport:
        broker = Broker(
            transport,
            keys,
            delete_on_ack=config.delete_on_ack,
            lanes=config.lane_names,
        )
        # A workflow's step larger than a runner reads fails when it would start.
        broker.max_message_bytes = config.max_payload_bytes + message_growth(keys.group)
        yield broker


async def prepare(
    broker: Broker,
    config: RunnerConfig,
    counters: Counters,
    errors: ErrorLog,
    consumer_name: str,
    declare_lanes: Callable[[Broker], Awaitable[None]],
) -> None:
    """Make Redis ready for the run, within ``connect_timeout``: the scripts loaded, the
    consumer group there, the lanes of the tasks declared (``declare_lanes``); warn when
    Redis may evict trunner's keys."""
    timeout = config.connect_timeout
    try:
        with trio.fail_after(timeout):
            await broker.load_scripts()
            await _ensure_group(broker, counters, errors, consumer_name)
            await declare_lanes(broker)
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


async def _ensure_group(
    broker: Broker, counters: Counters, errors: ErrorLog, consumer_name: str
) -> None:
    """Create the consumer group if missing. When the stream (or the group's floor)
    holds a value of another type, written by something else, it is set aside first:
    otherwise no runner of the group could ever start."""
    try:
        await broker.ensure_group()
    except RedisCommandError as exc:
        quarantine = Quarantine(broker, counters, errors, consumer_name)
        if not await quarantine.after_error(exc):
            raise
        await broker.ensure_group()


def build(
    broker: Broker,
    *,
    config: RunnerConfig,
    tasks: TaskRegistry,
    keys: Keys,
    consumer_name: str,
    consumers: list[str],
    counters: Counters,
    errors: ErrorLog,
    timings: LocalTimings,
    leader_chores: Sequence[Chore],
    url: str = "memory://",
) -> Components:
    """Wire the components of one run on ``broker`` (reached at ``url``); nothing runs
    yet."""
    metrics = MetricsBuffer(cumulative=timings)
    holdings = Holdings()
    quarantine = Quarantine(broker, counters, errors, consumer_name)
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
        task_names=lambda: tasks.names,
    )
    admission = None
    if any(task.limits is not None for task in tasks):
        admission = Admission(broker, holdings, counters, errors, quarantine, mover.due_at)
    pool = WorkerPool(
        tasks, config, holdings, outcomes, counters, metrics.task_time, errors, admission
    )
    releaser = Releaser(broker, holdings, counters)
    schedule = ReclaimSchedule(config.reclaim_interval, config.lane_names)
    elector = Elector(
        broker.transport,
        keys.leader,
        ttl=config.leader_ttl,
        wait=config.leader_wait,
        jitter=config.leader_jitter,
        id=consumer_name,
        on_bad_data=lambda key, repaired: quarantine.set_aside(
            "leader", key, repaired, b"", "renamed aside"
        ),
    )
    cron = CronScheduler(broker, tasks, errors, quarantine, config.max_payload_bytes)
    aggregator = Aggregator(broker, config, errors, quarantine)
    janitor = Janitor(
        broker,
        config,
        errors,
        quarantine,
        consumers,
        {t.name: t.concurrency for t in tasks if t.concurrency is not None},
        marks=holdings.cancelled.keys,
    )
    chores = [mover.run, cron.run, aggregator.run, janitor.run, *leader_chores]
    watchdog, link = open_watchdog(url, broker, config, holdings, counters, pool.min_beat_interval)
    gate = PauseGate(config.num_fetchers)
    pauser = Pauser(broker, gate, quarantine, errors)
    components = Components(
        config=config,
        counters=counters,
        errors=errors,
        consumers=tuple(consumers),
        broker=broker,
        redis=RedisHandle(broker.transport),
        waiters=Waiters(broker),
        canceller=Canceller(
            broker,
            holdings,
            _cancelling(pool.cancel_task, janitor.workflows.heard),
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
            for consumer in consumers
        ),
        reporter=Reporter(
            broker,
            config,
            consumer_name,
            config.host or socket.gethostname(),
            metrics,
            lambda: pool.capacity,
            lambda value: _apply_capacity(components, value),
            errors,
            quarantine,
        ),
        elector=elector,
        leadership=Leadership(elector, chores, counters, errors),
        mover=mover,
        cron=cron,
        aggregator=aggregator,
        janitor=janitor,
        watchdog=watchdog,
        stall_link=link,
    )
    return components


def _cancelling(
    cancel_task: Callable[[str], bool], heard: Callable[[str], None]
) -> Callable[[str], bool]:
    """What the canceller does with a cancel mark: the pool cancels the task (or the
    workflow's steps) it holds, and the leader sweeps a workflow's steps nobody holds."""

    def cancel(mark: str) -> bool:
        heard(mark)
        return cancel_task(mark)

    return cancel


def _apply_capacity(c: Components, value: int) -> None:
    """Apply the capacity the leader published (within this instance's bounds).

    Lowering it cancels nothing; blocked reads are interrupted so that they give back
    the worker slots they hold, and take only what the new capacity allows.
    """
    low, high = c.config.worker_bounds
    capacity = max(low, min(high, value))
    before = c.pool.capacity
    if capacity == before:
        return
    logger.info("capacity: %d -> %d workers", before, capacity)
    c.pool.capacity = capacity
    if capacity < before:
        for fetcher in c.fetchers:
            fetcher.nudge()


async def start_services(services: trio.Nursery, c: Components) -> None:
    """Start the services in ``services``, in the order they depend on one another."""
    await services.start(c.redis.run)
    await services.start(c.waiters.run)
    await services.start(c.canceller.run)
    await services.start(c.pauser.run)  # read before any fetch: a paused group stays so
    await services.start(c.reporter.run)  # registered before the runner is started
    await services.start(c.acks.run)
    await services.start(c.heartbeater.run)
    if c.watchdog is not None:
        await services.start(c.watchdog.run)
    await services.start(c.elector.run)  # the first election attempt is made
    await services.start(c.leadership.run)


def log_started(
    config: RunnerConfig, keys: Keys, consumer_name: str, broker: Broker, tasks: TaskRegistry
) -> None:
    """Log that the runner has started: where, with what, and what it can run."""
    delay = config.reclaim_delay
    logger.info(
        "runner started: group %r (queue %r), consumer %r, %d workers, Redis at %s; "
        "reclaim_delay "
        "%g s: the tasks of an instance that dies run again after about %g s, and an "
        "event-loop stall or Redis outage longer than about %g s may run a task twice",
        config.consumer_group,
        keys.queue,
        consumer_name,
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
    _log_registry(config.consumer_group, tasks)


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
