"""The runner: wires the components into the nursery tree and owns the shutdown order.

::

    Runner.run ── watcher (turns an outer cancellation into a graceful stop)
       └── shielded: services nursery   ack flusher, heartbeats, delayed mover, elector,
              │                          leadership (chores in a nursery per leadership)
              └── jobs nursery          worker tasks running the fetched messages
                     └── fetchers       XREADGROUP new messages, XAUTOCLAIM abandoned ones

Leaving ``open_runner`` (normally, by an exception, or by cancellation) runs, in order:
1. fetchers stop: nothing new is read or claimed;
2. messages fetched but not started are released for immediate reclaim;
3. running tasks get ``drain_timeout`` to finish (and are acknowledged if they do); the
   ones still running are cancelled and their messages released, never acknowledged;
4. buffered acknowledgements are flushed; leadership is released (followers are told at
   once); the delayed mover and heartbeats stop;
5. anything still pending for this instance is released (a finished task whose
   acknowledgement could not be written stays pending), its consumers are deleted when
   empty, connections are closed, and ``state`` becomes STOPPED.
Every step that talks to Redis is shielded and bounded.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from ._producer import Producer
from ._redis import Broker, Transport, check_url, open_transport
from ._runner_context import _current_runner
from ._util import ErrorLog, logger, run_in_background
from .aggregator import Aggregator
from .config import RunnerConfig
from .cron import CronScheduler
from .election import Elector
from .errors import (
    BackendError,
    LeadershipLost,
    RedisUnavailable,
    RunnerAlreadyStarted,
    RunnerCrashed,
    RunnerNotRunning,
)
from .fetcher import Fetcher, ReclaimSchedule
from .janitor import Janitor
from .keys import Keys
from .mover import DelayedMover
from .pool import AckBuffer, WorkerPool
from .redis_handle import RedisHandle
from .reporter import LocalTimings, MetricsBuffer, Reporter
from .statistics import Counters, RunnerState, RunnerStatistics, TaskTotals
from .task import TaskRegistry

__all__ = ["Runner", "open_runner"]

#: Bound on each cleanup step that talks to Redis during shutdown.
CLEANUP_TIMEOUT = 5.0
#: How long stopped fetchers may take to return before they are cancelled.
FETCHER_GRACE = 1.0
#: How long cancelled tasks may take to unwind after the drain timeout.
CANCEL_GRACE = 5.0


def default_consumer_name(host: str | None) -> str:
    name = host or re.sub(r"[\s{}]+", "-", socket.gethostname()) or "host"
    return f"{name}:{os.getpid()}:{secrets.token_hex(3)}"


@attrs.frozen
class _Parts:
    """The components of one run of a runner."""

    pool_transport: Transport
    acks: AckBuffer
    mover: DelayedMover
    pool: WorkerPool
    fetchers: list[Fetcher]
    elector: Elector
    reporter: Reporter


class Runner(Producer):
    """One runner instance of a consumer group. Use :func:`open_runner`.

    ``Runner(...).run`` follows Trio's ``task_status`` convention, so a runner can also be
    started with ``await nursery.start(runner.run)`` and stopped with :meth:`stop`.
    """

    def __init__(self, redis: str, config: RunnerConfig, tasks: TaskRegistry) -> None:
        if not isinstance(config, RunnerConfig):
            raise TypeError(f"config must be a RunnerConfig, got {type(config).__name__}")
        if not isinstance(tasks, TaskRegistry):
            raise TypeError(f"tasks must be a TaskRegistry, got {type(tasks).__name__}")
        tasks.check()
        check_url(redis)
        self._url = redis
        self.config = config
        self.tasks = tasks
        self._registry = tasks
        self._max_payload_bytes = config.max_payload_bytes
        self._instance_ttl = config.instance_ttl
        self.keys = Keys(config.prefix, config.consumer_group)
        self.consumer_name = config.consumer_name or default_consumer_name(config.host)
        self._state = RunnerState.INIT
        self._counters = Counters()
        self._errors = ErrorLog()
        self._stop_requested = trio.Event()
        self._hurry = False
        self._drain_scope: trio.CancelScope | None = None
        self._pool: WorkerPool | None = None
        self._elector: Elector | None = None
        self._redis: RedisHandle | None = None
        self._mover: DelayedMover | None = None
        self._cron: CronScheduler | None = None
        self._aggregator: Aggregator | None = None
        self._janitor: Janitor | None = None
        self._fetchers: list[Fetcher] = []
        #: This instance's execution-time histograms per task (cumulative, for exporters).
        self.timings = LocalTimings()
        #: Leader-only work: each runs in a nursery opened on promotion, cancelled on demotion.
        self._leader_chores: list[Callable[[Elector], Awaitable[None]]] = []

    def __repr__(self) -> str:
        return (
            f"<Runner group={self.config.consumer_group!r} consumer={self.consumer_name!r} "
            f"state={self._state.name}>"
        )

    # -- public face ------------------------------------------------------------------------

    @property
    def state(self) -> RunnerState:
        return self._state

    @property
    def is_leader(self) -> bool:
        """Whether this instance holds the group's leadership lease now."""
        return self._elector is not None and self._elector.is_leader

    @property
    def redis(self) -> RedisHandle:
        """A Redis handle for task code, batching commands of concurrent tasks."""
        if self._redis is None:
            raise RunnerNotRunning(f"{self!r} is not running")
        return self._redis

    @property
    def elector(self) -> Elector | None:
        """The group's elector while the runner runs (events, fence, current leader)."""
        return self._elector

    async def _apply_capacity(self, value: int) -> None:
        """Apply the capacity the leader published (within this instance's bounds).

        Lowering it cancels nothing; blocked reads are interrupted so that they give back
        the worker slots they hold, and take only what the new capacity allows.
        """
        if self._pool is None:
            return
        low, high = self.config.worker_bounds
        capacity = max(low, min(high, value))
        before = int(self._pool.limiter.total_tokens)
        if capacity == before:
            return
        logger.info("capacity: %d -> %d workers", before, capacity)
        self._pool.limiter.total_tokens = capacity
        if capacity < before:
            for fetcher in self._fetchers:
                await fetcher.nudge()

    def _scheduled(self, due_ms: int) -> None:
        if self._mover is not None:
            self._mover.due_at(due_ms)

    def task_totals(self) -> dict[str, TaskTotals]:
        """Outcomes per task on this instance since it started (copies)."""
        return {name: attrs.evolve(t) for name, t in self._counters.per_task.items()}

    def statistics(self) -> RunnerStatistics:
        c = self._counters
        pool = self._pool
        mover = self._mover
        return RunnerStatistics(
            state=self._state,
            capacity=int(pool.limiter.total_tokens) if pool else self.config.num_workers,
            in_flight=pool.in_flight if pool else 0,
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
            reservations_lost=c.reservations_lost,
            acked=c.acked,
            errors=self._errors.captured,
            scheduler_passes=mover.passes if mover else 0,
            scheduler_seconds=mover.pass_seconds if mover else 0.0,
            delayed_moved=mover.moved if mover else 0,
            cron_fired=self._cron.fired if self._cron else 0,
            unique_dropped=mover.unique_dropped if mover else 0,
        )

    def errors(self) -> AsyncIterator[BaseException]:
        """Errors the runner captured (task failures, Redis errors ...), as they happen.

        The runner never waits for a reader: the newest 1000 are kept. Iteration ends when
        the runner has stopped and every captured error was read.
        """
        return aiter(self._errors)

    def stop(self, *, drain: bool = True) -> None:
        """Ask the runner to shut down (see the module docs); returns at once.

        With ``drain=False`` (or when called again with it during a drain) running tasks
        are cancelled at once instead of given ``drain_timeout``; their messages are
        released for immediate reclaim, never acknowledged.
        """
        if not drain:
            self._hurry = True
            if self._drain_scope is not None:
                self._drain_scope.cancel()
        self._stop_requested.set()

    @property
    def consumers(self) -> list[str]:
        """The consumer names this instance reads and claims with."""
        return [self._fetcher_consumer(i) for i in range(self.config.num_fetchers)]

    def _fetcher_consumer(self, index: int) -> str:
        return self.consumer_name if index == 0 else f"{self.consumer_name}/{index}"

    # -- life -------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start, report started (ready) through ``task_status``, serve until stopped."""
        if self._state is not RunnerState.INIT:
            raise RunnerAlreadyStarted(f"{self!r} was already started; create a new Runner")
        self._state = RunnerState.STARTING
        try:
            async with open_transport(
                self._url,
                client_name=f"trunner:{self.consumer_name}",
                max_connections=self.config.max_connections,
                connect_timeout=self.config.connect_timeout,
                command_timeout=self.config.command_timeout,
            ) as transport:
                broker = Broker(transport, self.keys, delete_on_ack=self.config.delete_on_ack)
                await self._prepare(broker)
                async with trio.open_nursery() as watcher:
                    watcher.start_soon(self._stop_on_cancel)
                    with trio.CancelScope(shield=True):
                        await self._serve(broker, task_status)
                    watcher.cancel_scope.cancel()
        finally:
            self._broker = None
            self._state = RunnerState.STOPPED
            self._errors.close()
            if self._pool is not None:
                logger.info("runner stopped: %s", self.statistics())
            if self._elector is not None:
                self._elector._close()

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
                await broker.ensure_group()
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

    def _build(self, broker: Broker) -> _Parts:
        config, counters, errors = self.config, self._counters, self._errors
        self.timings = LocalTimings()
        metrics = MetricsBuffer(cumulative=self.timings)
        acks = AckBuffer(broker, config, counters, errors)
        mover = self._mover = DelayedMover(broker, errors, metrics.schedule_pass)
        self._cron = CronScheduler(broker, self.tasks, errors, config.max_payload_bytes)
        self._aggregator = Aggregator(broker, config, errors)
        self._janitor = Janitor(broker, config, errors, self.consumers)
        pool = WorkerPool(
            broker, self.tasks, config, counters, errors, acks, mover.due_at, metrics.task_time
        )
        reporter = Reporter(
            broker,
            config,
            self.consumer_name,
            self.config.host or socket.gethostname(),
            metrics,
            lambda: int(pool.limiter.total_tokens),
            self._apply_capacity,
            errors,
        )
        schedule = ReclaimSchedule(config.reclaim_interval)
        fetchers = [
            Fetcher(broker, pool, config, consumer, schedule, counters, errors)
            for consumer in self.consumers
        ]
        elector = Elector(
            broker.transport,
            self.keys.leader,
            ttl=config.leader_ttl,
            wait=config.leader_wait,
            jitter=config.leader_jitter,
            id=self.consumer_name,
        )
        self._fetchers = fetchers
        return _Parts(broker.transport, acks, mover, pool, fetchers, elector, reporter)

    async def _serve(self, broker: Broker, task_status: trio.TaskStatus[None]) -> None:
        _current_runner.set(self)  # inherited by every task the nurseries below start
        parts = self._build(broker)
        pool = self._pool = parts.pool
        clean = False
        try:
            async with trio.open_nursery() as services:
                await self._start_services(services, parts)
                async with trio.open_nursery() as jobs:
                    pool.bind(jobs)
                    async with trio.open_nursery() as fetching:
                        for fetcher in parts.fetchers:
                            await fetching.start(fetcher.run)
                        self._started(broker)
                        task_status.started()
                        await self._stop_requested.wait()
                        self._state = RunnerState.STOPPING
                        logger.info("runner stopping: %d tasks running", pool.in_flight)
                        pool.start_stopping()
                        if not parts.elector.is_leader:
                            parts.elector.stop()  # a stopping follower must not take the lead
                        await self._stop_fetchers(fetching, parts.fetchers)
                    await self._cleanup("releasing unstarted messages", self._release(pool, False))
                    await self._drain(pool)
                await self._stop_services(services, parts)
            clean = True
        finally:
            if not clean:  # a component failed: save what can be saved, then re-raise
                with trio.CancelScope(shield=True):
                    await self._cleanup("flushing acknowledgements", parts.acks.flush())
                    await self._cleanup("releasing after a failure", self._release(pool, True))
        await self._cleanup("final release", self._release(pool, True))
        await self._cleanup("deleting consumers", self._delete_consumers(broker))

    async def _start_services(self, services: trio.Nursery, parts: _Parts) -> None:
        self._redis = RedisHandle(parts.pool_transport)
        await services.start(self._redis.run)
        await services.start(parts.reporter.run)
        services.start_soon(parts.acks.run)
        await services.start(parts.pool.heartbeat_loop)
        await services.start(parts.elector.run)
        self._elector = parts.elector
        services.start_soon(self._lead, parts.elector)

    def _started(self, broker: Broker) -> None:
        self._broker = broker
        self._state = RunnerState.STARTED
        logger.info(
            "runner started: group %r, consumer %r, %d workers, Redis at %s",
            self.config.consumer_group,
            self.consumer_name,
            self.config.num_workers,
            broker.description,
        )

    async def _stop_services(self, services: trio.Nursery, parts: _Parts) -> None:
        """Release interrupted messages, flush acknowledgements and timings, release the
        leadership, leave the group."""
        await self._cleanup("releasing interrupted messages", parts.pool.release_queued())
        parts.acks.close()
        with trio.move_on_after(CLEANUP_TIMEOUT):
            await parts.acks.closed.wait()
        await self._cleanup("flushing timings", parts.reporter.report())
        parts.elector.stop()
        with trio.move_on_after(CLEANUP_TIMEOUT):
            await parts.elector.done.wait()
        await self._cleanup("leaving the group", parts.reporter.deregister())
        if self._redis is not None:
            self._redis.close()
        services.cancel_scope.cancel()

    async def _lead(self, elector: Elector) -> None:
        """Run the leader chores for as long as each leadership lasts."""
        components = (self._mover, self._cron, self._aggregator, self._janitor)
        builtin = [c.run for c in components if c is not None]
        while True:
            await elector.wait_promoted()
            async with trio.open_nursery() as chores:
                for chore in [*builtin, *self._leader_chores]:
                    chores.start_soon(self._chore, chore, elector)
                await elector.wait_demoted()
                chores.cancel_scope.cancel()

    @staticmethod
    async def _chore(chore: Callable[[Elector], Awaitable[None]], elector: Elector) -> None:
        try:
            await chore(elector)
        except* LeadershipLost as group:  # a fenced write was refused: the lease is gone
            elector.step_down(str(group.exceptions[0]))

    async def _stop_fetchers(self, nursery: trio.Nursery, fetchers: list[Fetcher]) -> None:
        with trio.move_on_after(FETCHER_GRACE):
            for fetcher in fetchers:
                await fetcher.stop()
            for fetcher in fetchers:
                await fetcher.done.wait()
        nursery.cancel_scope.cancel()

    async def _release(self, pool: WorkerPool, final: bool) -> None:
        released = await pool.release_queued()
        for consumer in self.consumers:
            released += await pool.release_orphans(consumer, final=final)
        if released:
            logger.info("released %d messages for immediate reclaim", released)

    async def _drain(self, pool: WorkerPool) -> None:
        if not pool.in_flight:
            return
        timeout = 0.0 if self._hurry else self.config.drain_timeout
        logger.info("draining %d running tasks for up to %s s", pool.in_flight, timeout)
        with trio.move_on_after(timeout) as self._drain_scope:
            await pool.wait_idle()
        self._drain_scope = None
        if pool.in_flight:
            cancelled = pool.cancel_running()
            if self._hurry:
                logger.warning("stopping at once: cancelling %d running tasks", cancelled)
            else:
                logger.warning("drain timeout passed: cancelling %d running tasks", cancelled)
            with trio.move_on_after(CANCEL_GRACE):
                await pool.wait_idle()

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
    """Run a runner of ``config.consumer_group`` for the block's duration.

    ``redis`` is a URL: ``redis://``, ``rediss://``, ``unix://``, or ``memory://NAME`` (an
    in-process server shared by name). On entry the runner is started and ready; leaving the
    block shuts it down in order (see :mod:`trunner.runner`). An exception raised in the
    block propagates as itself; a failure of the runner itself raises
    :class:`~trunner.RunnerCrashed`.
    """
    runner = Runner(redis, config, tasks)

    def crashed(what: str) -> RunnerCrashed:
        return RunnerCrashed(f"the runner failed: {what}")

    async with run_in_background(runner.run, runner.stop, crashed):
        yield runner
