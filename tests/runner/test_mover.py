"""The delayed mover (trunner/_leader/mover.py): delayed tasks and retries move into the stream when
due, by the leader alone, in capped batches, across failovers."""

from __future__ import annotations

import datetime
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio

import trunner
from trunner._engine.counters import Counters
from trunner._engine.quarantine import Quarantine
from trunner._leader.mover import MOVE_BATCH, DelayedMover
from trunner._redis import Broker, open_transport
from trunner._wire.keys import Keys
from trunner.election import Elector

from ..conftest import Timeline, config, open_checked_runner, parts, redis_state
from ..support.servers import RedisServer
from ..support.workers import Worker, read_log

LEADER = {"leader_ttl": 0.5, "leader_wait": 0.6, "leader_jitter": 0.01}


def recorder(timeline: Timeline) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def record(payload: Any) -> None:
        timeline.record(payload)

    return tasks


async def test_a_delayed_task_runs_when_due_not_before(
    url: str, group: str, timeline: Timeline
) -> None:
    async with open_checked_runner(url, config(group), recorder(timeline)) as runner:
        due = time.time() + 0.4
        task_id = await runner.dispatch_delayed("record", "later", 0.4)
        assert await runner.admin.delayed_count() == 1
        now_id = await runner.dispatch_delayed("record", "now", datetime.timedelta(0))
        await timeline.wait(2)
    (first, _ran_first, first_id), (second, ran_second, second_id) = timeline.runs
    assert (first, first_id) == ("now", now_id)
    assert (second, second_id) == ("later", task_id), "the delayed id is the task id"
    assert ran_second >= due - 0.005
    assert runner.statistics().delayed_moved == 2


async def test_schedule_for_an_aware_datetime(url: str, group: str, timeline: Timeline) -> None:
    async with open_checked_runner(url, config(group), recorder(timeline)) as runner:
        when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=0.3)
        await runner.schedule_for("record", "at", when)
        past = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
        await runner.schedule_for("record", "past", past)
        await timeline.wait(2)
    assert [p for p, _, _ in timeline.runs] == ["past", "at"]
    assert timeline.runs[1][1] >= when.timestamp() - 0.005


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda r: r.dispatch_delayed("record", 1, -1), ValueError),
        (lambda r: r.dispatch_delayed("record", 1, float("nan")), ValueError),
        (lambda r: r.dispatch_delayed("record", 1, "5"), TypeError),
        (lambda r: r.dispatch_delayed("nope", 1, 5), trunner.TaskNotFound),
        (lambda r: r.dispatch_delayed("record", {1}, 5), trunner.InvalidPayload),
        (lambda r: r.schedule_for("record", 1, datetime.datetime(2030, 1, 1)), ValueError),
        (lambda r: r.schedule_for("record", 1, 12.5), TypeError),
        (lambda r: r.cancel_delayed(5), TypeError),
    ],
)
async def test_bad_delayed_dispatch_raises_and_writes_nothing(
    url: str, group: str, timeline: Timeline, call: Any, error: type[Exception]
) -> None:
    async with open_checked_runner(url, config(group), recorder(timeline)) as runner:
        with pytest.raises(error):
            await call(runner)
        assert await runner.admin.delayed_count() == 0


async def test_cancel_a_delayed_task(url: str, group: str, timeline: Timeline) -> None:
    async with open_checked_runner(url, config(group), recorder(timeline)) as runner:
        cancelled = await runner.dispatch_delayed("record", "cancelled", 0.3)
        kept = await runner.dispatch_delayed("record", "kept", 0.3)
        assert await runner.cancel_delayed(cancelled) is True
        assert await runner.cancel_delayed(cancelled) is False
        await timeline.wait(1)
        assert await runner.cancel_delayed(kept) is False, "already moved into the stream"
    assert [p for p, _, _ in timeline.runs] == ["kept"]


async def test_only_the_leader_moves_due_tasks(url: str, group: str, timeline: Timeline) -> None:
    tasks = recorder(timeline)
    cfg = config(group, **LEADER)
    async with (
        open_checked_runner(url, cfg, tasks) as leader,
        open_checked_runner(url, cfg, tasks) as follower,
        trunner.open_client(url, group) as client,
    ):
        assert leader.is_leader
        assert not follower.is_leader
        for i in range(20):
            await client.dispatch_delayed("record", i, 0.05 * (i % 5))
        await follower.dispatch_delayed("record", 20, 0.1)
        await timeline.wait(21)
    stats = (leader.statistics(), follower.statistics())
    assert Counter(p for p, _, _ in timeline.runs) == Counter(range(21)), "each ran once"
    assert stats[0].delayed_moved == 21
    assert stats[0].scheduler_passes > 0
    assert stats[0].scheduler_seconds > 0
    assert stats[1].delayed_moved == stats[1].scheduler_passes == 0, "followers do not poll"


async def test_the_leader_is_woken_by_a_task_due_sooner_from_another_process(
    url: str, group: str, timeline: Timeline
) -> None:
    async with open_checked_runner(url, config(group), recorder(timeline)) as runner:
        await runner.dispatch_delayed("record", "far", 60)  # the mover sleeps toward this
        await trio.sleep(0.2)
        async with trunner.open_client(url, group) as client:  # another connection
            scheduled = trio.current_time()
            await client.dispatch_delayed("record", "soon", 0.1)
            await timeline.wait(1)
            took = trio.current_time() - scheduled
    assert [p for p, _, _ in timeline.runs] == ["soon"]
    # Without the wake-up the mover would sleep its full 5 s.
    assert took < 2.0, took


async def test_retries_use_the_delayed_path(url: str, group: str, timeline: Timeline) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task(max_retry=1, retry_backoff=lambda _: 0.2)
    async def flaky(payload: Any) -> None:
        if trunner.current_message().attempt == 1:
            raise RuntimeError("once")
        timeline.record(payload)

    async with open_checked_runner(url, config(group), tasks) as runner:
        task_id = await runner.dispatch("flaky", "x")
        await timeline.wait(1)
    stats = runner.statistics()
    assert timeline.runs[0][2] == task_id
    assert (stats.retried, stats.delayed_moved) == (1, 1)


@pytest.mark.deadline(120)
async def test_a_backlog_drains_batch_after_batch(redis_server: RedisServer, group: str) -> None:
    count = 100_000
    async with open_transport(
        redis_server.url, client_name="t", max_connections=4, connect_timeout=5
    ) as transport:
        broker = Broker(transport, Keys("trunner", group))
        await broker.ensure_group()
        commands: list[tuple[str, str, str | int, str | bytes]] = []
        for i in range(count):
            commands.append(("ZADD", broker.keys.delayed, 1000, f"t{i}"))
            commands.append(("HSET", broker.keys.delayed_messages, f"t{i}", b"m"))
        for start in range(0, len(commands), 20_000):
            await transport.pipeline(commands[start : start + 20_000])
        elector = Elector(transport, broker.keys.leader, ttl=5.0)
        errors = trunner._util.ErrorLog()
        mover = DelayedMover(broker, errors, Quarantine(broker, Counters(), errors, "test"))
        async with trio.open_nursery() as nursery:
            await nursery.start(elector.run)
            assert elector.is_leader
            nursery.start_soon(mover.run, elector)

            async def drained() -> bool:
                return await broker.queue_length() == count

            await redis_state(drained, poll=0.05)
            nursery.cancel_scope.cancel()
        assert await broker.delayed_count() == 0
    assert mover.moved == count
    assert mover.passes >= count // MOVE_BATCH, "moved in capped batches"


@pytest.mark.deadline(60)
async def test_failover_neither_loses_nor_doubles_delayed_tasks(
    redis_server: RedisServer, group: str, tmp_path: Path, timeline: Timeline
) -> None:
    log = tmp_path / "log"
    leader = Worker(redis_server.url, group, log, {"config": LEADER})
    try:
        await leader.ready()
        tasks = recorder(timeline)
        async with open_checked_runner(redis_server.url, config(group, **LEADER), tasks) as me:
            assert not me.is_leader
            for i in range(60):
                await me.dispatch_delayed("record", i, 0.05 * i)  # due over three seconds
            await trio.sleep(0.8)
            leader.kill()
            assert me.elector is not None
            with trio.fail_after(LEADER["leader_ttl"] + LEADER["leader_wait"] + 1):
                await me.elector.wait_promoted()

            async def all_ran() -> bool:
                await trio.lowlevel.checkpoint()
                return len(timeline.runs) + len(read_log(log)) >= 60

            await redis_state(all_ran)
            assert await me.admin.delayed_count() == 0
    finally:
        leader.close()
    ran = [p for p, _, _ in timeline.runs] + [p for _, e, p in read_log(log) if e == "ran"]
    assert Counter(ran) == Counter(range(60)), "every delayed task ran exactly once"


async def test_a_task_scheduled_during_a_pass_wakes_the_mover(url: str, group: str) -> None:
    """The pass's reply did not see it, and it was compared with the due time the last
    pass found: not earlier, so the mover slept up to MAX_SLEEP before moving it."""
    tasks = trunner.TaskRegistry()
    ran: list[Any] = []

    @tasks.task
    async def record(payload: Any) -> None:
        ran.append(payload)

    cfg = config(group, leader_wait=0.1)
    async with open_checked_runner(url, cfg, tasks) as runner:
        elector = runner.elector
        assert elector is not None
        await elector.wait_promoted()
        mover = parts(runner).mover
        broker = parts(runner).broker
        original = broker.move_due
        woken: list[bool] = []
        checked = trio.Event()

        async def move_due(*args: Any, **kwargs: Any) -> Any:
            reply = await original(*args, **kwargs)
            if reply[0] and not woken:  # "first" moved: schedule one before the pass ends
                await runner.dispatch_delayed("record", "during", 0)
                woken.append(mover._wake.is_set())
                checked.set()
            return reply

        broker.move_due = move_due  # type: ignore[method-assign]
        await runner.dispatch_delayed("record", "first", 0)
        await checked.wait()
        assert woken == [True]
