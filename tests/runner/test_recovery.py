"""Crash recovery: reclaiming from dead consumers, heartbeats, real killed processes.

Crosses fetcher.py (reclaim passes), heartbeat.py (reservations kept fresh), outcomes.py
(a crash counts as an attempt) and worker processes (tests/processes/worker_process.py).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio

import trunner
from trunner import Keys
from trunner.testing import run_until_idle

from ..conftest import Tally, config, open_checked_runner, redis_state
from ..support.servers import RedisServer
from ..support.workers import Worker, read_log


def take_as_dead_consumer(raw: Any, keys: Keys, count: int) -> list[str]:
    """Deliver ``count`` messages to a consumer that then "dies" (never acks)."""
    raw.xgroup_create(keys.stream, keys.group, id="0", mkstream=True)
    reply = raw.xreadgroup(keys.group, "dead-consumer", {keys.stream: ">"}, count=count)
    return [entry_id.decode() for entry_id, _ in reply[0][1]]


async def test_messages_of_a_dead_consumer_are_reclaimed(
    url: str, group: str, keys: Keys, raw: Any, tally: Tally
) -> None:
    async with trunner.open_client(url, group) as client:
        await client.dispatch_many("record", range(5))
    taken = take_as_dead_consumer(raw, keys, 5)
    tasks = trunner.TaskRegistry()

    @tasks.task(max_retry=2)
    async def record(payload: Any) -> None:
        tally.record(payload)

    cfg = config(group, reclaim_delay=0.3, reclaim_interval=0.05)
    async with open_checked_runner(url, cfg, tasks) as runner:
        await tally.wait(5)

        await run_until_idle(runner)
        stats = runner.statistics()
    assert sorted(tally.payloads) == list(range(5))
    assert {mid for _, _, mid in tally.runs} == set(taken)
    assert {attempt for _, attempt, _ in tally.runs} == {2}, "the crash counts as an attempt"
    assert stats.reclaimed == 5
    assert stats.fetched == 0


async def test_a_crash_on_the_last_attempt_gives_up_without_running(
    url: str, group: str, keys: Keys, raw: Any, tally: Tally
) -> None:
    async with trunner.open_client(url, group) as client:
        await client.dispatch("record", "x")
    take_as_dead_consumer(raw, keys, 1)
    tasks = trunner.TaskRegistry()

    @tasks.task  # max_retry=0: one attempt, which the dead consumer used
    async def record(payload: Any) -> None:
        tally.record(payload)

    cfg = config(group, reclaim_delay=0.2, reclaim_interval=0.05)
    async with open_checked_runner(url, cfg, tasks) as runner:

        async def dead_lettered() -> bool:
            return await runner.dead_letter_count() == 1

        await redis_state(dead_lettered)
    assert tally.runs == []
    ((_, fields),) = raw.xrange(keys.dead)
    assert fields[b"reason"] == b"max retries exceeded (redelivered)"


@pytest.mark.deadline(20)
async def test_heartbeats_keep_a_long_task_from_being_reclaimed(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    starts: list[str] = []
    started = trio.Event()
    finish = trio.Event()
    tasks = trunner.TaskRegistry()

    @tasks.task(reservation_timeout=0.3)
    async def long(_: Any) -> None:
        starts.append(trunner.current_message().message_id)
        started.set()
        await finish.wait()

    reclaim_delay = 0.5
    cfg = config(group, reclaim_delay=reclaim_delay, reclaim_interval=0.02)
    async with (
        open_checked_runner(url, cfg, tasks) as a,
        open_checked_runner(url, cfg, tasks) as b,
    ):
        await a.dispatch("long", None)
        await started.wait()
        # For six reclaim delays the other runner keeps trying to reclaim; the heartbeats
        # (every 0.1 s) keep the entry's idle time well below the reclaim delay.
        max_idle = 0
        with trio.move_on_after(6 * reclaim_delay):
            while True:
                (pending,) = raw.xpending_range(keys.stream, group, "-", "+", 10)
                assert pending["times_delivered"] == 1
                max_idle = max(max_idle, pending["time_since_delivered"])
                await trio.sleep(0.02)
        finish.set()
        stats = [a.statistics(), b.statistics()]
    assert len(starts) == 1, "the live task was never run a second time"
    assert max_idle < reclaim_delay * 1000 * 0.6, max_idle
    assert sum(s.reclaimed for s in stats) == 0
    assert sum(s.reservations_lost for s in stats) == 0


# -- real processes -----------------------------------------------------------------------


@pytest.mark.deadline(60)
async def test_worker_processes_share_a_group(
    redis_server: RedisServer, group: str, workers: list[Worker], tmp_path: Path
) -> None:
    log = tmp_path / "log"
    for _ in range(3):
        workers.append(Worker(redis_server.url, group, log, {}))
    for worker in workers:
        await worker.ready()
    async with trunner.open_client(redis_server.url, group) as client:
        await client.dispatch_many("record", range(600))

        async def all_ran() -> bool:
            await trio.lowlevel.checkpoint()
            return len(read_log(log)) >= 600

        await redis_state(all_ran)

        async def drained() -> bool:
            return await client.pending_count() == 0

        await redis_state(drained)
    for worker in workers:
        assert worker.terminate() == 0
    runs = read_log(log)
    assert Counter(p for _, _, p in runs) == Counter(range(600)), "each task ran exactly once"
    pids = Counter(pid for pid, _, _ in runs)
    assert len(pids) >= 2, pids


@pytest.mark.deadline(60)
async def test_tasks_of_a_killed_worker_process_are_reclaimed(
    redis_server: RedisServer, group: str, workers: list[Worker], tmp_path: Path, tally: Tally
) -> None:
    log = tmp_path / "log"
    victim = Worker(redis_server.url, group, log, {"config": {"num_workers": 3}})
    workers.append(victim)
    await victim.ready()
    async with trunner.open_client(redis_server.url, group) as client:
        ids = await client.dispatch_many("block", ["a", "b", "c"])

        async def all_started() -> bool:
            await trio.lowlevel.checkpoint()
            return len(read_log(log)) == 3

        await redis_state(all_started)
    victim.kill()
    assert {p for _, _, p in read_log(log)} == {"a", "b", "c"}

    tasks = trunner.TaskRegistry()

    @tasks.task(max_retry=1)
    async def block(payload: Any) -> None:
        tally.record(payload)

    cfg = config(group, reclaim_delay=0.5, reclaim_interval=0.05)
    async with open_checked_runner(redis_server.url, cfg, tasks) as runner:
        with trio.fail_after(5):
            await tally.wait(3)

        await run_until_idle(runner)
    assert sorted(tally.payloads) == ["a", "b", "c"]
    assert sorted(mid for _, _, mid in tally.runs) == sorted(ids)
    assert {attempt for _, attempt, _ in tally.runs} == {2}


@pytest.mark.deadline(60)
async def test_sigterm_drains_and_releases_to_the_other_workers(
    redis_server: RedisServer, group: str, workers: list[Worker], tmp_path: Path
) -> None:
    """A worker told to stop hands its queued work back at once, not after reclaim_delay."""
    log = tmp_path / "log"
    options = {"slow_seconds": 0.2, "config": {"num_workers": 5, "drain_timeout": 5.0}}
    for _ in range(2):
        workers.append(Worker(redis_server.url, group, log, options))
    for worker in workers:
        await worker.ready()
    async with trunner.open_client(redis_server.url, group) as client:
        await client.dispatch_many("slow", range(40))

        async def some_started() -> bool:
            await trio.lowlevel.checkpoint()
            return len({pid for pid, e, _ in read_log(log) if e == "started"}) == 2

        await redis_state(some_started)
        assert workers[0].terminate() == 0

        async def all_ran() -> bool:
            await trio.lowlevel.checkpoint()
            return len({p for _, e, p in read_log(log) if e == "ran"}) == 40

        await redis_state(all_ran)
    runs = [p for _, e, p in read_log(log) if e == "ran"]
    assert Counter(runs) == Counter(range(40)), "nothing lost, nothing run twice"
