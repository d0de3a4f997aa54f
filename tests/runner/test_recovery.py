"""Crash recovery: reclaiming from dead consumers, heartbeats, real killed processes.

Crosses fetcher.py (reclaim passes), heartbeat.py (reservations kept fresh), pool.py and
outcomes.py (a crash redelivery runs the same attempt again, up to max_redeliveries) and
worker processes (tests/processes/worker_process.py).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio

import trunner
from trunner.keys import Keys
from trunner.testing import run_until_idle

from ..conftest import Tally, config, open_checked_runner, redis_state
from ..support.servers import RedisServer
from ..support.workers import Worker, read_log


def take_as_dead_consumer(raw: Any, keys: Keys, count: int, deliveries: int = 1) -> list[str]:
    """Deliver ``count`` messages to a consumer that then "dies" (never acks); each was
    delivered ``deliveries`` times (its earlier runs lost as well)."""
    raw.xgroup_create(keys.stream, keys.group, id="0", mkstream=True)
    reply = raw.xreadgroup(keys.group, "dead-consumer", {keys.stream: ">"}, count=count)
    ids = [entry_id.decode() for entry_id, _ in reply[0][1]]
    if deliveries > 1:
        raw.xclaim(keys.stream, keys.group, "dead-consumer", 0, ids, retrycount=deliveries)
    return ids


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
    assert {attempt for _, attempt, _ in tally.runs} == {1}, "a crash is not an attempt"
    assert stats.reclaimed == 5
    assert stats.fetched == 0


async def test_a_crash_runs_the_task_again_with_the_default_options(
    url: str, group: str, keys: Keys, raw: Any, tally: Tally
) -> None:
    """The default max_retry=0 is about failures: a run lost to a crash is no failure, and
    its task runs again (before, it was dead-lettered without running)."""
    async with trunner.open_client(url, group) as client:
        await client.dispatch("record", "x")
    (taken,) = take_as_dead_consumer(raw, keys, 1)
    tasks = trunner.TaskRegistry()

    @tasks.task  # the defaults: max_retry=0, max_redeliveries=3
    async def record(payload: Any) -> None:
        tally.record(payload)

    cfg = config(group, reclaim_delay=0.2, reclaim_interval=0.05)
    async with open_checked_runner(url, cfg, tasks) as runner:
        await tally.wait(1)
        await run_until_idle(runner)
        assert await runner.admin.dead_letter_count() == 0
    assert tally.runs == [("x", 1, taken)]


@pytest.mark.parametrize("lost", [3, 1])
async def test_the_last_redelivery_allowed_runs(
    url: str, group: str, keys: Keys, raw: Any, tally: Tally, lost: int
) -> None:
    """``max_redeliveries`` runs lost (each delivered and never finished): the next
    delivery still runs."""
    async with trunner.open_client(url, group) as client:
        await client.dispatch("record", "x")
    take_as_dead_consumer(raw, keys, 1, deliveries=lost)
    tasks = trunner.TaskRegistry()

    @tasks.task(max_redeliveries=lost)
    async def record(payload: Any) -> None:
        tally.record(payload)
        assert trunner.current_message().deliveries == lost + 1

    cfg = config(group, reclaim_delay=0.2, reclaim_interval=0.05)
    async with open_checked_runner(url, cfg, tasks) as runner:
        await tally.wait(1)
        await run_until_idle(runner)
        assert await runner.admin.dead_letter_count() == 0
    assert tally.payloads == ["x"]


@pytest.mark.parametrize("max_redeliveries", [None, 0])
async def test_a_task_lost_more_often_than_max_redeliveries_is_given_up_without_running(
    url: str, group: str, keys: Keys, raw: Any, tally: Tally, max_redeliveries: int | None
) -> None:
    """A task that crashes its worker every time ends: dead-lettered with the reason."""
    allowed = 3 if max_redeliveries is None else max_redeliveries
    async with trunner.open_client(url, group) as client:
        await client.dispatch("record", "x")
    take_as_dead_consumer(raw, keys, 1, deliveries=allowed + 1)
    tasks = trunner.TaskRegistry()
    given_up: list[tuple[trunner.TaskMessage, BaseException]] = []

    async def handler(message: trunner.TaskMessage, error: BaseException) -> None:
        given_up.append((message, error))

    if max_redeliveries is None:
        tasks.task(record_to(tally))  # the default: 3
    else:
        tasks.task(max_redeliveries=max_redeliveries)(record_to(tally))

    cfg = config(group, reclaim_delay=0.2, reclaim_interval=0.05, failed_task_handler=handler)
    async with open_checked_runner(url, cfg, tasks) as runner:

        async def dead_lettered() -> bool:
            return await runner.admin.dead_letter_count() == 1

        await redis_state(dead_lettered)
        assert await runner.admin.pending_count() == 0
    assert tally.runs == []
    ((_, fields),) = raw.xrange(keys.dead)
    assert fields[b"reason"] == b"max redeliveries exceeded"
    assert fields[b"attempt"] == b"1"
    assert b"delivered %d times" % (allowed + 2) in fields[b"error"]
    ((message, error),) = given_up
    assert (message.attempt, message.deliveries) == (1, allowed + 2)
    assert isinstance(error, trunner.MaxRetryExceeded)
    assert error.redelivered
    assert error.deliveries == allowed + 2
    assert "max_redeliveries" in str(error)


def record_to(tally: Tally) -> Any:
    async def record(payload: Any) -> None:
        tally.record(payload)

    return record


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
        # (every 0.1 s) keep resetting the entry's idle time, so it never reaches the
        # reclaim delay. Counted as resets seen, not as a margin under the delay: a busy
        # machine may delay a beat without the guarantee being at stake.
        max_idle = 0
        resets = 0
        last_idle = 0
        with trio.move_on_after(6 * reclaim_delay):
            while True:
                (pending,) = raw.xpending_range(keys.stream, group, "-", "+", 10)
                assert pending["times_delivered"] == 1
                idle = pending["time_since_delivered"]
                resets += idle < last_idle
                last_idle = idle
                max_idle = max(max_idle, idle)
                await trio.sleep(0.02)
        finish.set()
        stats = [a.statistics(), b.statistics()]
    assert len(starts) == 1, "the live task was never run a second time"
    assert resets >= 3, "the heartbeats kept refreshing the reservation"
    assert max_idle < reclaim_delay * 1000, max_idle
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
            return await client.admin.pending_count() == 0

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
    assert {attempt for _, attempt, _ in tally.runs} == {1}, "a crash is not an attempt"


@pytest.mark.deadline(60)
async def test_a_sigkilled_workers_tasks_run_again_with_the_default_options(
    redis_server: RedisServer, group: str, workers: list[Worker], tmp_path: Path
) -> None:
    """SIGKILL a worker process while it runs tasks of default options (max_retry=0):
    another worker runs each of them again, and each succeeds (before, they were all
    dead-lettered)."""
    log = tmp_path / "log"
    fast = {"reclaim_delay": 0.5, "reclaim_interval": 0.05}
    victim = Worker(redis_server.url, group, log, {"linger": True, "config": fast})
    workers.append(victim)
    await victim.ready()
    async with trunner.open_client(redis_server.url, group) as client:
        await client.dispatch_many("lingering", range(6))

        async def all_started() -> bool:
            await trio.lowlevel.checkpoint()
            return len(read_log(log)) == 6

        await redis_state(all_started)
        victim.kill()
        survivor = Worker(redis_server.url, group, log, {"config": fast})
        workers.append(survivor)
        await survivor.ready()

        async def all_ran() -> bool:
            await trio.lowlevel.checkpoint()
            return sorted(p for _, e, p in read_log(log) if e == "ran") == list(range(6))

        await redis_state(all_ran)
        assert await client.admin.dead_letter_count() == 0
    survivor_pid = survivor.process.pid
    assert {pid for pid, e, _ in read_log(log) if e == "ran"} == {survivor_pid}


@pytest.mark.deadline(90)
async def test_a_task_that_kills_its_worker_every_time_ends_dead_lettered(
    redis_server: RedisServer, group: str, workers: list[Worker], tmp_path: Path, tally: Tally
) -> None:
    """Default options: the task runs 1 + max_redeliveries (3) times, killing a worker
    process each time; its next delivery gives it up, with the reason."""
    log = tmp_path / "log"
    fast = {"reclaim_delay": 0.5, "reclaim_interval": 0.05}
    for _ in range(4):
        workers.append(Worker(redis_server.url, group, log, {"config": fast}))
    for worker in workers:
        await worker.ready()
    async with trunner.open_client(redis_server.url, group) as client:
        await client.dispatch("poison", "p")

        async def all_killed() -> bool:
            await trio.lowlevel.checkpoint()
            return all(worker.process.poll() is not None for worker in workers)

        await redis_state(all_killed)
    assert len(read_log(log)) == 4, "one run per delivery allowed, each in its own worker"
    assert {worker.process.returncode for worker in workers} == {-9}

    tasks = trunner.TaskRegistry()

    @tasks.task
    async def poison(payload: Any) -> None:  # here harmless: must not run
        tally.record(payload)

    cfg = config(group, reclaim_delay=0.5, reclaim_interval=0.05)
    async with open_checked_runner(redis_server.url, cfg, tasks) as runner:

        async def dead_lettered() -> bool:
            return await runner.admin.dead_letter_count() == 1

        await redis_state(dead_lettered)
        (letter,) = await runner.admin.dead_letters()
        assert await runner.admin.pending_count() == 0
    assert tally.runs == []
    assert letter.reason == "max redeliveries exceeded"
    assert "delivered 5 times" in letter.error


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
