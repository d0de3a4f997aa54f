"""The ordered shutdown of a runner: the nursery tree its components run in, whose nesting
orders the steps, and the steps, as functions over the run's components.

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
              ├── JobHost.watch                   jobhost.py       a failure of the job loops
              └── fetching nursery                fetcher.py       num_fetchers loops (step 1)

    a Trio system task: the job host's nursery   jobhost.py       (closed by step 3)
        └── job loops                             pool.py          running the messages

The job loops run outside the runner's tree so that a task ignoring cancellation cannot
hold the runner's exit: leaving ``open_runner`` takes at most ``drain_timeout +
cancel_grace`` plus the bounded clean-up steps (each at most ``CLEANUP_TIMEOUT``).

Until a stop is asked the components run in this tree (:func:`serve`). Leaving
``open_runner`` (normally, by an exception, or by cancellation) then runs, in order, each
step where the nesting needs it:

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

Every step that talks to Redis is shielded and bounded (:func:`cleanup`).

It imports the components' wiring (:mod:`~trunner._lifecycle.assembly`), so it sits beside it
in the import layers, above the services it stops.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import attrs
import trio

from .._engine.jobhost import JobHost
from .._engine.reporter import Reporter
from .._executors.places import executors_open
from .._util import ErrorLog, logger
from ..errors import BackendError
from ..statistics import RunnerStatistics
from .assembly import Components, start_services

__all__ = [
    "CLEANUP_TIMEOUT",
    "FETCHER_GRACE",
    "SERVICE_SHUTDOWN",
    "StopRequest",
    "Stoppable",
    "begin_stopping",
    "cleanup",
    "close_jobs",
    "drain",
    "leave",
    "release_unstarted",
    "save_after_failure",
    "serve",
    "stop_fetching",
    "stop_services",
    "stop_summary",
]

#: Bound on each shutdown step that talks to Redis.
CLEANUP_TIMEOUT = 5.0
#: How long stopped fetchers may take to return before they are cancelled.
FETCHER_GRACE = 1.0


class StopRequest:
    """A runner's request to stop (``Runner.stop``): asked for once, and hurried by
    ``drain=False``, which also cuts a drain under way short."""

    def __init__(self) -> None:
        self.asked = trio.Event()
        self.hurry = False
        self.drain_scope: trio.CancelScope | None = None

    def ask(self, *, drain: bool) -> None:
        if not drain:
            self.hurry = True
            if self.drain_scope is not None:
                self.drain_scope.cancel()
        self.asked.set()


class Stoppable(Protocol):
    """The lifecycle every component shares: ``run`` until ``stop()``, then ``stopped``."""

    @property
    def stopped(self) -> trio.Event: ...

    def stop(self) -> None: ...


async def _stopped(component: Stoppable) -> None:
    """Stop ``component`` and wait until it has (bounded by the step's timeout)."""
    component.stop()
    await component.stopped.wait()


async def _stopped_watchdog(c: Components) -> None:
    """Stop the stall watchdog (its thread joined), then close its Redis link."""
    if c.watchdog is not None:
        await _stopped(c.watchdog)
    if c.stall_link is not None:
        c.stall_link.close()


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
SERVICE_SHUTDOWN: tuple[tuple[str, Callable[[Components], Awaitable[Any]]], ...] = (
    ("releasing interrupted messages", lambda c: c.releaser.release_queued()),
    ("flushing acknowledgements", lambda c: _stopped(c.acks)),
    ("flushing timings", lambda c: _last_report(c.reporter)),
    ("stopping the leader chores", lambda c: _stopped(c.leadership)),
    ("releasing the leadership", lambda c: _stopped(c.elector)),
    ("leaving the group", lambda c: c.reporter.deregister()),
    ("stopping heartbeats", lambda c: _stopped(c.heartbeater)),
    ("stopping the stall watchdog", _stopped_watchdog),
    ("stopping the result waiters", lambda c: _stopped(c.waiters)),
    ("stopping the pause watcher", lambda c: _stopped(c.pauser)),
    ("stopping the canceller", lambda c: _stopped(c.canceller)),
    ("closing the Redis handle", lambda c: _stopped(c.redis)),
)


async def serve(
    c: Components,
    request: StopRequest,
    started: Callable[[], None],
    stopping: Callable[[], None],
    task_status: trio.TaskStatus[None],
) -> None:
    """Run the components in their nursery tree until a stop is asked (``started`` is
    called just before ``task_status.started()``), then shut them down in order, each step
    where the nesting needs it (``stopping`` is called first)."""
    clean = False
    try:
        async with trio.open_nursery() as services:
            await start_services(services, c)
            async with executors_open(c.pool.executors):  # worker processes: after the jobs
                jobs = JobHost()
                c.pool.bind(await jobs.start())
                services.start_soon(jobs.watch)
                try:
                    async with trio.open_nursery() as fetching:
                        for fetcher in c.fetchers:
                            await fetching.start(fetcher.run)
                        started()
                        task_status.started()
                        await request.asked.wait()
                        stopping()
                        begin_stopping(c)  # 0
                        await stop_fetching(fetching, c)  # 1
                    await release_unstarted(c)  # 2
                    await drain(c, request)  # 3
                finally:
                    await close_jobs(jobs, c)  # 3, and on a failure too
            await stop_services(services, c)  # 4
        clean = True
    finally:
        if not clean:  # a component failed: save what can be saved, then re-raise
            await save_after_failure(c)
    await leave(c)  # 5


def begin_stopping(c: Components) -> None:
    """0. Messages read from now on are released, and a follower stops campaigning."""
    logger.info("runner stopping: %d tasks running", c.pool.in_flight)
    c.pool.start_stopping()
    if not c.elector.is_leader:
        c.elector.stop()  # a stopping follower must not take the lead


async def stop_fetching(fetching: trio.Nursery, c: Components) -> None:
    """1. Nothing new is read or claimed."""
    for fetcher in c.fetchers:
        fetcher.stop()
    with trio.move_on_after(FETCHER_GRACE):
        for fetcher in c.fetchers:
            await fetcher.stopped.wait()
    fetching.cancel_scope.cancel()


async def release_unstarted(c: Components) -> None:
    """2. Messages fetched but not started are released for immediate reclaim."""
    await cleanup("releasing unstarted messages", _release(c, False), c.errors)


async def drain(c: Components, request: StopRequest) -> None:
    """3. Running tasks get ``drain_timeout``; then they are cancelled (interrupted)."""
    pool = c.pool
    if not pool.in_flight:
        return
    timeout = 0.0 if request.hurry else c.config.drain_timeout
    logger.info("draining %d running tasks for up to %s s", pool.in_flight, timeout)
    with trio.move_on_after(timeout) as request.drain_scope:
        await pool.wait_idle()
    request.drain_scope = None
    if not pool.in_flight:
        return
    cancelled = pool.cancel_running()
    if request.hurry:
        logger.warning("stopping at once: cancelling %d running tasks", cancelled)
    else:
        logger.warning("drain timeout passed: cancelling %d running tasks", cancelled)


async def close_jobs(jobs: JobHost, c: Components) -> None:
    """3. The job loops end: cancelled, and given ``cancel_grace`` to unwind; tasks that
    ignore the cancellation longer are abandoned (left to end on their own), and
    their messages released."""
    grace = c.config.cancel_grace
    with trio.CancelScope(shield=True):
        if await jobs.close(grace):
            return
    stuck = list(c.holdings.running.values())
    for job in stuck:
        c.holdings.release_later(job.consumer, job.message_id)
    c.counters.abandoned += len(stuck)
    logger.error(
        "%d tasks still ran %s s after they were cancelled (they ignore cancellation): "
        "abandoned, their messages released for another instance: %s",
        len(stuck),
        grace,
        ", ".join(job.about() for job in stuck[:10]) + (" ..." if len(stuck) > 10 else ""),
    )


async def stop_services(services: trio.Nursery, c: Components) -> None:
    """4. The services stop in the order of :data:`SERVICE_SHUTDOWN`."""
    for what, step in SERVICE_SHUTDOWN:
        await cleanup(what, step(c), c.errors)
    services.cancel_scope.cancel()


async def save_after_failure(c: Components) -> None:
    """After a component failed: save what can be saved (shielded), before step 5."""
    with trio.CancelScope(shield=True):
        await cleanup("flushing acknowledgements", c.acks.flush(), c.errors)
        await cleanup("releasing after a failure", _release(c, True), c.errors)


async def leave(c: Components) -> None:
    """5. What is still pending for this instance is released; empty consumers go."""
    await cleanup("final release", _release(c, True), c.errors)
    await cleanup("deleting consumers", _delete_consumers(c), c.errors)


async def _release(c: Components, final: bool) -> None:
    released = await c.releaser.release_queued()
    for consumer in c.consumers:
        released += await c.releaser.release_orphans(consumer, final=final)
    if released:
        logger.info("released %d messages for immediate reclaim", released)


async def _delete_consumers(c: Components) -> None:
    for consumer in c.consumers:
        await c.broker.delete_consumer_if_idle(consumer)


async def cleanup(what: str, step: Awaitable[Any], errors: ErrorLog) -> None:
    """Run one shutdown step that talks to Redis: bounded, errors logged and captured."""
    with trio.move_on_after(CLEANUP_TIMEOUT) as scope:
        try:
            await step
        except BackendError as exc:
            errors.capture(exc)
            logger.warning("shutdown: %s failed: %s", what, exc)
    if scope.cancelled_caught:
        logger.warning("shutdown: %s did not finish within %s s", what, CLEANUP_TIMEOUT)


def stop_summary(stats: RunnerStatistics) -> str:
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
