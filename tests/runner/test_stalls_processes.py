"""A task that blocks its worker's event loop, across real worker processes
(tests/processes/stall_worker.py): while it is within its limits, the stall watchdog keeps
its reservation and its neighbours' fresh, so no other instance runs them again; past its
limit the worker counts as hung and loses them, and its late end changes no outcome.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

import trunner
from trunner import TaskState
from trunner.keys import Keys

from ..conftest import raw_client
from ..support.servers import RedisServer
from ..support.workers import Worker, read_log

MODULE = "tests.processes.stall_worker"
RECLAIM_DELAY = 2.0
FAST = {"reclaim_delay": RECLAIM_DELAY, "reclaim_interval": 0.2, "stall_threshold": 0.2}


async def logged(log: Path, event: str, payload: Any, pid: int | None = None) -> None:
    """Wait until a worker process logged ``event`` with ``payload`` (from ``pid``)."""
    while not any(  # noqa: ASYNC110 - a file another process writes: polled
        e == event and p == payload and pid in (None, who) for who, e, p in read_log(log)
    ):
        await trio.sleep(0.05)


def dead_letters(url: str, keys: Keys) -> int:
    raw = raw_client(url)
    try:
        return int(raw.xlen(keys.dead))
    finally:
        raw.close()


async def test_a_task_blocking_the_loop_within_its_limits_is_never_run_twice(
    redis_server: RedisServer, group: str, keys: Keys, tmp_path: Path, workers: list[Worker]
) -> None:
    """The flip of the issue: ``time.sleep`` past ``reclaim_delay`` in an ``async def``
    had the task (and a neighbour) reclaimed, run again and dead-lettered while it ran to
    success. Now: one run each, one outcome each, no dead letter."""
    log, flag = tmp_path / "log", tmp_path / "flag"
    options = {"config": FAST, "flag": str(flag)}
    a = Worker(redis_server.url, group, log, options, module=MODULE)
    workers.append(a)
    await a.ready()
    async with trunner.open_client(redis_server.url, group) as client:
        neighbour = await client.dispatch("neighbour", "n")
        await logged(log, "started", "n")
        blocker = await client.dispatch("blocker", "b")
        await logged(log, "started", "b")  # a's event loop is blocked from here on
        b = Worker(redis_server.url, group, log, options, module=MODULE)
        workers.append(b)
        await b.ready()
        # b's reclaim passes (every 0.2 s) take what has been idle past reclaim_delay:
        # they get three such delays to find a's messages aged. No event says "b looked",
        # so this is a wait, not a margin: a slow machine only gives b fewer looks.
        await trio.sleep(3 * RECLAIM_DELAY)
        await logged(log, "stall", "blocker", a.process.pid)  # named, while blocked
        flag.touch()
        assert await blocker.result() == a.process.pid
        assert await neighbour.result() == a.process.pid
        assert (await blocker.status()).state is TaskState.SUCCEEDED
    started = [(pid, p) for pid, e, p in read_log(log) if e == "started"]
    assert started == [(a.process.pid, "n"), (a.process.pid, "b")], "each ran once, on a"
    assert dead_letters(redis_server.url, keys) == 0
    assert a.terminate() == 0


async def test_a_worker_blocked_past_the_task_timeout_loses_it_and_its_late_end_records_nothing(
    redis_server: RedisServer, group: str, keys: Keys, tmp_path: Path, workers: list[Worker]
) -> None:
    """A truly hung worker still loses its reservations: past the blocking task's own
    timeout the watchdog stops keeping them, another instance runs the task, and the hung
    one's late end (a timeout, retried) is fenced out: the outcome stays the other's."""
    log, flag = tmp_path / "log", tmp_path / "flag"
    options = {"config": FAST, "flag": str(flag), "timeout": 0.5}
    a = Worker(redis_server.url, group, log, options, module=MODULE)
    workers.append(a)
    await a.ready()
    async with trunner.open_client(redis_server.url, group) as client:
        blocker = await client.dispatch("blocker", "b")
        await logged(log, "started", "b", a.process.pid)
        b = Worker(redis_server.url, group, log, options, module=MODULE)
        workers.append(b)
        await b.ready()
        assert await blocker.result() == b.process.pid  # reclaimed: its second delivery
        flag.touch()
        await logged(log, "ran", "b", a.process.pid)  # a's body ended, late
        assert a.terminate() == 0  # a's shutdown wrote (or discarded) all it had
        status = await blocker.status()
        assert status.state is TaskState.SUCCEEDED
        assert await blocker.result() == b.process.pid
    assert dead_letters(redis_server.url, keys) == 0
    assert b.terminate() == 0
