"""Delayed tasks and cron: the leader's fenced, precise scheduler."""

from __future__ import annotations

import datetime
import itertools
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio

import trunner
from trunner._redis import Broker, open_transport
from trunner.election import Elector
from trunner.keys import Keys
from trunner.mover import MOVE_BATCH, DelayedMover
from trunner.task import CronSchedule

from ..conftest import config, redis_state
from ..support.servers import RedisServer
from .test_recovery import Worker, read_log

LEADER = {"leader_ttl": 0.5, "leader_wait": 0.6, "leader_jitter": 0.01}


class Timeline:
    """Records (payload, wall time, task id) of each run; tests await counts."""

    def __init__(self) -> None:
        self.runs: list[tuple[Any, float, str]] = []
        self._lot = trio.lowlevel.ParkingLot()

    def record(self, payload: Any) -> None:
        self.runs.append((payload, time.time(), trunner.current_message().task_id))
        self._lot.unpark_all()

    async def wait(self, count: int) -> None:
        while len(self.runs) < count:
            await self._lot.park()


@pytest.fixture
def tally() -> Timeline:
    return Timeline()


def recorder(tally: Timeline) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def record(payload: Any) -> None:
        tally.record(payload)

    return tasks


async def test_a_delayed_task_runs_when_due_not_before(
    url: str, group: str, tally: Timeline
) -> None:
    async with trunner.open_runner(url, config(group), recorder(tally)) as runner:
        due = time.time() + 0.4
        task_id = await runner.dispatch_delayed("record", "later", 0.4)
        assert await runner.delayed_count() == 1
        now_id = await runner.dispatch_delayed("record", "now", datetime.timedelta(0))
        await tally.wait(2)
    (first, _ran_first, first_id), (second, ran_second, second_id) = tally.runs
    assert (first, first_id) == ("now", now_id)
    assert (second, second_id) == ("later", task_id), "the delayed id is the task id"
    assert ran_second >= due - 0.005
    assert runner.statistics().delayed_moved == 2


async def test_schedule_for_an_aware_datetime(url: str, group: str, tally: Timeline) -> None:
    async with trunner.open_runner(url, config(group), recorder(tally)) as runner:
        when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=0.3)
        await runner.schedule_for("record", "at", when)
        past = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
        await runner.schedule_for("record", "past", past)
        await tally.wait(2)
    assert [p for p, _, _ in tally.runs] == ["past", "at"]
    assert tally.runs[1][1] >= when.timestamp() - 0.005


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
    url: str, group: str, tally: Timeline, call: Any, error: type[Exception]
) -> None:
    async with trunner.open_runner(url, config(group), recorder(tally)) as runner:
        with pytest.raises(error):
            await call(runner)
        assert await runner.delayed_count() == 0


async def test_cancel_a_delayed_task(url: str, group: str, tally: Timeline) -> None:
    async with trunner.open_runner(url, config(group), recorder(tally)) as runner:
        cancelled = await runner.dispatch_delayed("record", "cancelled", 0.3)
        kept = await runner.dispatch_delayed("record", "kept", 0.3)
        assert await runner.cancel_delayed(cancelled) is True
        assert await runner.cancel_delayed(cancelled) is False
        await tally.wait(1)
        assert await runner.cancel_delayed(kept) is False, "already moved into the stream"
    assert [p for p, _, _ in tally.runs] == ["kept"]


async def test_only_the_leader_moves_due_tasks(url: str, group: str, tally: Timeline) -> None:
    tasks = recorder(tally)
    cfg = config(group, **LEADER)
    async with (
        trunner.open_runner(url, cfg, tasks) as leader,
        trunner.open_runner(url, cfg, tasks) as follower,
        trunner.open_client(url, group) as client,
    ):
        assert leader.is_leader
        assert not follower.is_leader
        for i in range(20):
            await client.dispatch_delayed("record", i, 0.05 * (i % 5))
        await follower.dispatch_delayed("record", 20, 0.1)
        await tally.wait(21)
    stats = (leader.statistics(), follower.statistics())
    assert Counter(p for p, _, _ in tally.runs) == Counter(range(21)), "each ran once"
    assert stats[0].delayed_moved == 21
    assert stats[0].scheduler_passes > 0
    assert stats[0].scheduler_seconds > 0
    assert stats[1].delayed_moved == stats[1].scheduler_passes == 0, "followers do not poll"


async def test_the_leader_is_woken_by_a_task_due_sooner_from_another_process(
    url: str, group: str, tally: Timeline
) -> None:
    async with trunner.open_runner(url, config(group), recorder(tally)) as runner:
        await runner.dispatch_delayed("record", "far", 60)  # the mover sleeps toward this
        await trio.sleep(0.2)
        async with trunner.open_client(url, group) as client:  # another connection
            scheduled = trio.current_time()
            await client.dispatch_delayed("record", "soon", 0.1)
            await tally.wait(1)
            took = trio.current_time() - scheduled
    assert [p for p, _, _ in tally.runs] == ["soon"]
    # Without the wake-up the mover would sleep its full 5 s.
    assert took < 2.0, took


async def test_retries_use_the_delayed_path(url: str, group: str, tally: Timeline) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task(max_retry=1, retry_backoff=lambda _: 0.2)
    async def flaky(payload: Any) -> None:
        if trunner.current_message().attempt == 1:
            raise RuntimeError("once")
        tally.record(payload)

    async with trunner.open_runner(url, config(group), tasks) as runner:
        task_id = await runner.dispatch("flaky", "x")
        await tally.wait(1)
    stats = runner.statistics()
    assert tally.runs[0][2] == task_id
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
        mover = DelayedMover(broker, trunner._util.ErrorLog())
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
    redis_server: RedisServer, group: str, tmp_path: Path, tally: Timeline
) -> None:
    log = tmp_path / "log"
    leader = Worker(redis_server.url, group, log, {"config": LEADER})
    try:
        await leader.ready()
        tasks = recorder(tally)
        async with trunner.open_runner(redis_server.url, config(group, **LEADER), tasks) as me:
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
                return len(tally.runs) + len(read_log(log)) >= 60

            await redis_state(all_ran)
            assert await me.delayed_count() == 0
    finally:
        leader.close()
    ran = [p for p, _, _ in tally.runs] + [p for _, e, p in read_log(log) if e == "ran"]
    assert Counter(ran) == Counter(range(60)), "every delayed task ran exactly once"


# -- cron -------------------------------------------------------------------------------


def test_cron_schedules_compute_ticks() -> None:
    every_5 = CronSchedule("r", "*/5 * * * *", "t")
    at = datetime.datetime(2026, 11, 29, 10, 7, 30, tzinfo=datetime.UTC).timestamp()
    assert (
        every_5.next_tick(at)
        == datetime.datetime(2026, 11, 29, 10, 10, tzinfo=datetime.UTC).timestamp()
    )
    assert (
        every_5.prev_tick(at)
        == datetime.datetime(2026, 11, 29, 10, 5, tzinfo=datetime.UTC).timestamp()
    )
    assert every_5.prev_tick(every_5.next_tick(at)) == every_5.next_tick(at), "on a tick"
    paris = CronSchedule("p", "0 9 * * *", "t", timezone="Europe/Paris")
    assert datetime.datetime.fromtimestamp(paris.next_tick(at), datetime.UTC).hour == 8


def test_cron_registration_checks() -> None:
    tasks = trunner.TaskRegistry()
    with pytest.raises(ValueError, match="not a valid cron expression"):
        tasks.cron("every minute", "t")
    with pytest.raises(ValueError, match="unknown timezone"):
        tasks.cron("* * * * *", "t", timezone="Mars/Olympus")
    tasks.cron("* * * * *", "missing")
    with pytest.raises(trunner.TaskNotFound):
        trunner.Runner("memory://x", config("g"), tasks)

    @tasks.cron("0 * * * *", payload={"k": 1}, max_retry=2)
    async def hourly(_: Any) -> None:
        pass

    assert tasks.get("hourly").max_retry == 2
    with pytest.raises(ValueError, match="already registered"):
        tasks.cron("0 * * * *", "hourly")
    assert [c.name for c in tasks.crons] == ["missing", "hourly"]


def cron_registry(tally: Timeline) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.cron("* * * * * *", payload="tick")  # every second (six fields: seconds last)
    async def every_second(payload: Any) -> None:
        tally.record(payload)

    return tasks


@pytest.mark.deadline(30)
async def test_each_cron_tick_fires_once_group_wide(url: str, group: str, tally: Timeline) -> None:
    tasks = cron_registry(tally)
    cfg = config(group, **LEADER)
    async with (
        trunner.open_runner(url, cfg, tasks) as a,
        trunner.open_runner(url, cfg, tasks),
        trunner.open_runner(url, cfg, tasks),
    ):
        await tally.wait(2)
        assert a.elector is not None
        a.stop()  # hand over in the middle: the next leader carries on
        await tally.wait(5)
    ids = [task_id for _, _, task_id in tally.runs]
    assert len(ids) == len(set(ids)), "no tick fired twice"
    ticks = sorted(int(i.rsplit(":", 1)[1]) for i in ids)
    assert all(b - a == 1000 for a, b in itertools.pairwise(ticks)), ticks


@pytest.mark.deadline(30)
async def test_a_new_leader_fires_the_latest_missed_tick_once(
    url: str, group: str, tally: Timeline, raw: Any
) -> None:
    tasks = cron_registry(tally)
    async with trunner.open_runner(url, config(group), tasks):
        await tally.wait(1)
    first = int(tally.runs[0][2].rsplit(":", 1)[1])
    await trio.sleep(2.5)  # no leader for more than two ticks
    async with trunner.open_runner(url, config(group), tasks) as runner:
        await tally.wait(2)
        catch_up = tally.runs[1]
    stats = runner.statistics()
    missed = int(catch_up[2].rsplit(":", 1)[1])
    assert missed > first + 1000, "a tick missed while nobody led"
    assert missed <= catch_up[1] * 1000, "fired late, for its own tick"
    assert json.loads(raw.hget(f"trunner:{{{group}}}:cron", "every_second")) >= missed
    assert stats.cron_fired >= 1


def test_a_cron_payload_that_cannot_be_sent_is_refused_when_registered() -> None:
    tasks = trunner.TaskRegistry()
    with pytest.raises(trunner.InvalidPayload):
        tasks.cron("* * * * *", "t", {1, 2})
    with pytest.raises(trunner.InvalidPayload):

        @tasks.cron("* * * * *", payload=object())
        async def nightly(_: Any) -> None:
            pass

    assert tasks.crons == []


async def test_a_cron_payload_too_large_for_the_runner_skips_the_tick(url: str, group: str) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.cron("* * * * * *", payload="x" * 5000)
    async def big(_: Any) -> None:
        pass

    cfg = config(group, max_payload_bytes=1000)
    async with trunner.open_runner(url, cfg, tasks) as runner:
        async for error in runner.errors():
            assert isinstance(error, trunner.PayloadTooLarge)
            break
        assert runner.state is trunner.RunnerState.STARTED, "the leader keeps running"
