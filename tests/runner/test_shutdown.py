"""Deterministic shutdown: drain, release, exceptions, cancellation, nothing left behind.

Crosses runner.py (the shutdown order), pool.py (the drain), release.py, acks.py, fetcher.py
(deliveries it never saw) and client.py. These tests look at the shutdown themselves, so
they open their runners with trunner.open_runner rather than through the test kit.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import pytest
import redis
import trio
import trio_asyncio

import trunner
import trunner._engine.heartbeat
from trunner._wire.keys import RELEASED_CONSUMER
from trunner.keys import Keys

from ..conftest import Gate, Tally, config, redis_state
from ..support.servers import RedisServer

_OURS = (
    os.path.dirname(trunner.__file__) + os.sep,
    os.path.dirname(trio_asyncio.__file__) + os.sep,
)


def _trunner_tasks() -> list[str]:
    """Names of live Trio tasks running code of trunner or of the asyncio bridge."""
    found: list[str] = []

    def walk(task: trio.lowlevel.Task) -> None:
        frame = getattr(task.coro, "cr_frame", None)
        code_file = frame.f_code.co_filename if frame is not None else ""
        if code_file.startswith(_OURS):
            found.append(task.name)
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    root = trio.lowlevel.current_root_task()
    assert root is not None
    walk(root)
    return found


def _client_names(server: RedisServer) -> list[str]:
    with redis.Redis.from_url(server.url) as observer:
        clients = observer.client_list()
    return sorted(c["name"] for c in clients if c.get("cmd") != "client|list")


async def test_leaving_the_block_drains_running_tasks(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    gate = Gate()
    async with trunner.open_runner(url, config(group), gate.registry(seconds=0.3)) as runner:
        await runner.dispatch_many("gated", [1, 2, 3])
        await gate.wait_started(3)
        leaving = trio.current_time()
    took = trio.current_time() - leaving
    assert sorted(gate.finished) == [1, 2, 3]
    assert gate.cancelled == []
    assert 0.2 < took < 2.0, took
    stats = runner.statistics()
    assert (stats.succeeded, stats.acked, stats.interrupted) == (3, 3, 0)
    assert raw.xlen(keys.stream) == 0


async def test_drain_timeout_cancels_and_releases_without_acknowledging(
    url: str, group: str, keys: Keys, raw: Any, tally: Tally
) -> None:
    gate = Gate()
    cfg = config(group, drain_timeout=0.3)
    async with trunner.open_runner(url, cfg, gate.registry()) as runner:
        ids = await runner.dispatch_many("gated", [1, 2, 3, 4])
        await gate.wait_started(4)
        leaving = trio.current_time()
    took = trio.current_time() - leaving
    assert 0.25 < took < 2.0, took
    assert sorted(gate.cancelled) == [1, 2, 3, 4]
    assert gate.finished == []
    stats = runner.statistics()
    assert (stats.interrupted, stats.acked, stats.released) == (4, 0, 4)
    pending = raw.xpending_range(keys.stream, group, "-", "+", 10)
    assert sorted(p["message_id"].decode() for p in pending) == sorted(ids)
    for entry in pending:
        assert entry["consumer"].decode() == RELEASED_CONSUMER
        assert entry["times_delivered"] == 0, "an interrupted run does not use up an attempt"

    # Another instance picks them up at once (not after the 300 s reclaim delay) as attempt 1.
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def gated(payload: Any) -> None:
        tally.record(payload)

    started = trio.current_time()
    async with trunner.open_runner(url, config(group), tasks):
        await tally.wait(4)
        picked_up = trio.current_time() - started
    assert picked_up < 1.5, picked_up
    assert sorted(tally.payloads) == [1, 2, 3, 4]
    assert {attempt for _, attempt, _ in tally.runs} == {1}


async def test_stop_without_drain_during_a_drain_cancels_at_once(
    url: str, group: str, keys: Keys, raw: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A second, impatient stop (the CLI's second signal) ends the 30 s drain at once."""
    caplog.set_level(logging.INFO, logger="trunner")
    gate = Gate()
    cfg = config(group, drain_timeout=30.0)
    async with trunner.open_runner(url, cfg, gate.registry()) as runner:
        ids = await runner.dispatch_many("gated", [1, 2])
        await gate.wait_started(2)
        runner.stop()  # graceful: the drain begins

        async def draining() -> bool:
            return "draining 2 running tasks" in caplog.text

        await redis_state(draining)
        hurried = trio.current_time()
        runner.stop(drain=False)
    took = trio.current_time() - hurried
    assert took < 2.0, f"a forced stop took {took:.2f} s"
    assert sorted(gate.cancelled) == [1, 2]
    stats = runner.statistics()
    assert (stats.interrupted, stats.acked, stats.released) == (2, 0, 2)
    pending = raw.xpending_range(keys.stream, group, "-", "+", 10)
    assert sorted(p["message_id"].decode() for p in pending) == sorted(ids)
    assert "stopping at once: cancelling 2 running tasks" in caplog.text
    assert "drain timeout passed" not in caplog.text


async def test_deliveries_the_runner_never_saw_are_released_at_shutdown(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    """A read that delivered entries but whose reply was lost (a "ghost delivery")."""
    cfg = config(group, consumer_name="fixed-consumer")
    async with trunner.open_runner(url, cfg, trunner.TaskRegistry()) as runner:
        ghost = raw.xadd(keys.stream, {b"payload": b"{}"})
        # Deliver the entry to the runner's own consumer behind its back.
        raw.xreadgroup(group, "fixed-consumer", {keys.stream: ">"}, count=1)
        assert await runner.admin.pending_count() == 1
    (pending,) = raw.xpending_range(keys.stream, group, "-", "+", 10)
    assert pending["message_id"] == ghost
    assert pending["consumer"].decode() == RELEASED_CONSUMER
    assert pending["times_delivered"] == 0
    consumers = {c["name"].decode() for c in raw.xinfo_consumers(keys.stream, group)}
    assert "fixed-consumer" not in consumers, "the emptied consumer is deleted"


async def test_an_exception_in_the_block_propagates_as_itself_after_draining(
    url: str, group: str
) -> None:
    gate = Gate()

    class Boom(Exception):
        pass

    with pytest.raises(Boom) as info:
        async with trunner.open_runner(url, config(group), gate.registry(seconds=0.2)) as r:
            await r.dispatch_many("gated", [1, 2])
            await gate.wait_started(2)
            raise Boom("from the body")
    assert str(info.value) == "from the body"
    assert sorted(gate.finished) == [1, 2], "running tasks still drained"
    assert r.state is trunner.RunnerState.STOPPED


async def test_an_outer_cancellation_drains_then_propagates(url: str, group: str) -> None:
    gate = Gate()
    with trio.move_on_after(5) as scope:
        async with trunner.open_runner(url, config(group), gate.registry(seconds=0.3)) as r:
            await r.dispatch_many("gated", [1, 2])
            await gate.wait_started(2)
            scope.cancel()
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert sorted(gate.finished) == [1, 2]
    assert gate.cancelled == []
    assert r.statistics().acked == 2


async def test_keyboard_interrupt_in_the_body_is_not_wrapped(url: str, group: str) -> None:
    with pytest.raises(KeyboardInterrupt):
        async with trunner.open_runner(url, config(group), trunner.TaskRegistry()):
            raise KeyboardInterrupt


@pytest.mark.parametrize("when", ["at start", "while running"])
async def test_an_internal_failure_surfaces_as_runner_crashed(
    url: str, group: str, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    fail = trio.Event()

    async def broken(*_: Any, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        if when == "while running":
            task_status.started()
            await fail.wait()
        raise ZeroDivisionError("bug")

    monkeypatch.setattr(trunner._engine.heartbeat.Heartbeater, "run", broken)
    with pytest.raises(trunner.errors.RunnerCrashed) as info:
        async with trunner.open_runner(url, config(group), trunner.TaskRegistry()):
            fail.set()
            await trio.sleep_forever()
    assert isinstance(info.value.__cause__, BaseExceptionGroup)
    assert "ZeroDivisionError" in str(info.value)


async def test_stop_ends_run_started_in_a_nursery(url: str, group: str, tally: Tally) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def record(payload: Any) -> None:
        tally.record(payload)

    runner = trunner.Runner(url, config(group), tasks)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        await runner.dispatch("record", 1)
        await tally.wait(1)
        runner.stop()
    assert runner.state is trunner.RunnerState.STOPPED


@pytest.mark.parametrize("num_fetchers", [1, 3])
async def test_nothing_is_left_after_the_block(
    redis_server: RedisServer, group: str, tally: Tally, num_fetchers: int
) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def record(payload: Any) -> None:
        tally.record(payload)

    clients_before = _client_names(redis_server)
    threads_before = set(threading.enumerate())
    tasks_before = _trunner_tasks()
    cfg = config(group, num_fetchers=num_fetchers)
    async with (
        trunner.open_runner(redis_server.url, cfg, tasks) as runner,
        trunner.open_client(redis_server.url, group) as client,
    ):
        await client.dispatch_many("record", range(50))
        await tally.wait(50)
        during = _client_names(redis_server)
        assert len(during) >= len(clients_before) + num_fetchers + 1
        assert any(runner.consumer_name in name for name in during)
        assert _trunner_tasks() != []
    assert _client_names(redis_server) == clients_before, "every Redis connection closed"
    # Trio's idle worker threads of earlier tests may end meanwhile: only new ones count.
    assert set(threading.enumerate()) - threads_before == set(), "no thread left"
    assert _trunner_tasks() == tasks_before == [], "no Trio task left"


async def test_memory_runner_leaves_no_task(memory_url: str, group: str) -> None:
    async with trunner.open_runner(memory_url, config(group), trunner.TaskRegistry()):
        assert _trunner_tasks() != []
    assert _trunner_tasks() == []


async def test_shutdown_is_quick_when_idle(url: str, group: str) -> None:
    cfg = config(group, block_duration=5.0)
    for _ in range(3):
        async with trunner.open_runner(url, cfg, trunner.TaskRegistry()):
            await trio.sleep(0.05)
            leaving = trio.current_time()
        assert trio.current_time() - leaving < 0.5, "a blocked read is interrupted, not waited"


async def test_many_interrupted_tasks_are_all_released(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    """Many tasks in flight at the drain timeout: all released, none acknowledged twice."""
    gate = Gate()
    cfg = config(group, num_workers=40, batch_size=40, drain_timeout=0.1)
    async with trunner.open_runner(url, cfg, gate.registry()) as runner:
        await runner.dispatch_many("gated", range(100))
        await gate.wait_started(40)
    pending = raw.xpending_range(keys.stream, group, "-", "+", 200)
    assert len(pending) == 40
    assert {p["consumer"].decode() for p in pending} == {RELEASED_CONSUMER}
    assert raw.xlen(keys.stream) == 100


async def test_an_exception_group_from_the_block_leaves_as_itself(url: str, group: str) -> None:
    """A nursery inside the block whose child fails raises a group: it is not ours."""

    async def child() -> None:
        raise ValueError("child failed")

    with pytest.raises(ExceptionGroup) as info:
        async with (
            trunner.open_runner(url, config(group), trunner.TaskRegistry()),
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(child)
    assert [type(e) for e in info.value.exceptions] == [ValueError]

    mine = ExceptionGroup("mine", [KeyError("k")])
    with pytest.raises(ExceptionGroup) as info:
        async with trunner.open_client(url, group):
            raise mine
    assert info.value is mine


async def test_a_crash_still_writes_the_finished_tasks_acknowledgements(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    tasks = trunner.TaskRegistry()
    done = trio.Event()

    @tasks.task
    async def fine(_: Any) -> None:
        done.set()

    @tasks.task
    async def fatal(_: Any) -> None:
        raise SystemExit(3)  # not a task failure: it ends the runner

    cfg = config(group, ack_flush_interval=30.0, ack_batch_size=1000)  # acks wait in the buffer
    with pytest.raises(BaseExceptionGroup) as info:
        async with trunner.open_runner(url, cfg, tasks) as runner:
            await runner.dispatch("fine", None)
            await done.wait()
            await runner.dispatch("fatal", None)
            await trio.sleep_forever()
    assert info.group_contains(SystemExit)
    pending = raw.xpending_range(keys.stream, group, "-", "+", 10)
    assert len(pending) == 1, "the finished task was acknowledged on the way out"
    assert raw.xlen(keys.stream) == 1
