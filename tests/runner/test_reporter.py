"""Timing metrics, the long-queue hook, membership, and leader-decided capacity."""

from __future__ import annotations

import itertools
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import trio

import trunner
from trunner.group_stats import BUCKETS, compute_stats
from trunner.reporter import MetricsBuffer

from ..conftest import config, redis_state
from ..support.servers import RedisServer
from .test_recovery import Worker

FAST = {
    "leader_ttl": 0.5,
    "leader_wait": 0.6,
    "report_interval": 0.1,
    "stats_interval": 0.3,
    "instance_ttl": 1.0,
}


def fields_of(buffer: MetricsBuffer) -> dict[str, float]:
    return dict(buffer.take())


def test_stats_from_the_metrics_hash() -> None:
    buffer = MetricsBuffer()
    for _ in range(90):
        buffer.task_time("fast", 0.004)  # bucket (0.003, 0.005]
    for _ in range(10):
        buffer.task_time("fast", 1.2)  # bucket (1, 1.5]
    buffer.task_time("slow", 30.0)
    buffer.schedule_pass(0.002)
    buffer.schedule_pass(0.004)
    fields = fields_of(buffer)
    fields["since"] = 1_000_000.0  # ms: the window started 10 s before "now"
    instance = trunner.InstanceInfo(
        id="a", host="h", pid=1, capacity=4, started_at=0.0, last_seen=0.0, leader=True
    )
    stats = compute_stats(fields, queue_length=20, instances=[instance], now=1010.0)
    fast = stats.tasks["fast"]
    assert fast.count == 100
    assert fast.average == pytest.approx((90 * 0.004 + 10 * 1.2) / 100)
    assert 0.003 <= fast.p50 <= 0.005
    assert 1.0 <= fast.p95 <= 1.5
    assert 1.0 <= fast.p99 <= 1.5
    assert 20.0 <= stats.tasks["slow"].p50 <= 30.0
    assert stats.average == pytest.approx((90 * 0.004 + 10 * 1.2 + 30) / 101)
    assert stats.schedule_average == pytest.approx(0.003)
    assert stats.window == pytest.approx(10.0)
    assert stats.throughput == pytest.approx(10.1)
    assert stats.predicted_wait == pytest.approx(stats.average * 20 / 4)
    assert trunner.GroupStats.from_json(stats.to_json()) == stats
    assert all(b / a <= 2.0 for a, b in itertools.pairwise(BUCKETS))


def test_percentiles_never_exceed_the_longest_sample() -> None:
    """A 3.01 s run lands in the 3-5 s bucket; interpolation alone reads p99 as 4.98 s."""
    buffer = MetricsBuffer()
    buffer.task_time("once", 3.01)
    for seconds in (0.011, 0.012, 0.0125):
        buffer.task_time("few", seconds)  # bucket (0.01, 0.015]
    fields = fields_of(buffer)
    assert fields["t:once:max"] == 3.01
    stats = compute_stats(fields, queue_length=0, instances=[], now=0.0)
    once, few = stats.tasks["once"], stats.tasks["few"]
    assert (once.p50, once.p95, once.p99) == (3.01, 3.01, 3.01)
    assert 0.01 < few.p50 <= few.p95 <= few.p99 <= 0.0125
    # A report that failed is put back: the maximum stays a maximum, counts add up.
    again = MetricsBuffer()
    again.task_time("once", 1.0)
    again.put_back(list(fields.items()))
    merged = fields_of(again)
    assert (merged["t:once:max"], merged["t:once:n"]) == (3.01, 2.0)


async def test_the_metrics_hash_keeps_the_largest_sample(url: str, group: str) -> None:
    async with trunner.open_client(url, group) as client:
        broker = client._open_broker()
        await broker.report("a", 1000, "{}", [("t:x:n", 1.0), ("t:x:max", 2.5)])
        await broker.report("b", 1001, "{}", [("t:x:n", 1.0), ("t:x:max", 0.5)])
        await broker.report("c", 1002, "{}", [("t:x:n", 2.0), ("t:x:max", 4.25)])
        fields = await client.redis.hgetall(broker.keys.metrics)
        await client.redis.delete(broker.keys.metrics, broker.keys.instances)
    assert float(fields[b"t:x:max"]) == 4.25
    assert float(fields[b"t:x:n"]) == 4.0


async def test_timings_of_two_runners_add_up_in_one_window(url: str, group: str) -> None:
    tasks = trunner.TaskRegistry()
    done = 0
    all_done = trio.Event()

    @tasks.task
    async def sleepy(seconds: float) -> None:
        nonlocal done
        await trio.sleep(seconds)
        done += 1
        if done == 40:
            all_done.set()

    cfg = config(group, **{**FAST, "stats_interval": 3600.0})  # no reset during the test
    async with (
        trunner.open_runner(url, cfg, tasks) as a,
        trunner.open_runner(url, cfg, tasks) as b,
    ):
        await a.dispatch_many("sleepy", [0.02] * 20 + [0.06] * 20)
        await all_done.wait()

        async def reported() -> bool:
            return "sleepy" in (s := await b.group_stats()).tasks and s.tasks["sleepy"].count == 40

        await redis_state(reported)
        from_a, from_b = await a.group_stats(), await b.group_stats()
    assert from_a.tasks == from_b.tasks, "the same figures from any instance"
    timing = from_a.tasks["sleepy"]
    assert timing.average >= 0.04
    assert timing.p50 >= 0.02
    assert timing.p99 >= 0.05
    assert from_a.instances == 2
    assert from_a.total_capacity == 2 * cfg.num_workers


async def test_timings_are_flushed_at_shutdown(url: str, group: str, raw: Any) -> None:
    tasks = trunner.TaskRegistry()
    done = trio.Event()
    count = 0

    @tasks.task
    async def quick(_: Any) -> None:
        nonlocal count
        count += 1
        if count == 5:
            done.set()

    cfg = config(group, report_interval=60.0, instance_ttl=120.0)  # only the final flush
    async with trunner.open_runner(url, cfg, tasks) as runner:
        await runner.dispatch_many("quick", range(5))
        await done.wait()
    assert float(raw.hget(f"trunner:{{{group}}}:metrics", "t:quick:n")) == 5


async def test_the_hook_fires_when_and_only_when_the_predicted_wait_is_too_long(
    url: str, group: str, raw: Any
) -> None:
    hooked: list[trunner.GroupStats] = []
    hook_called = trio.Event()

    async def hook(stats: trunner.GroupStats) -> None:
        hooked.append(stats)
        hook_called.set()

    hold = trio.Event()
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def work(_: Any) -> None:
        await trio.sleep(0.05)

    @tasks.task
    async def blocker(_: Any) -> None:
        await hold.wait()

    # One worker. Warm-up: a few 50 ms tasks, nothing queued -> predicted wait ~0.
    cfg = config(group, **FAST, num_workers=1, long_queue_threshold=0.5, long_queue_hook=hook)
    async with trunner.open_runner(url, cfg, tasks) as runner:
        await runner.dispatch_many("work", range(3))

        async def a_window_with_timings() -> bool:
            stats = raw.get(f"trunner:{{{group}}}:stats")
            return stats is not None and json.loads(stats)["average"] > 0

        await redis_state(a_window_with_timings)
        assert hooked == [], "an empty queue never fires the hook"
        # The worker is held; 30 tasks of ~50 ms queue behind it: 30 x 0.05 / 1 = 1.5 s.
        await runner.dispatch("blocker", None)
        await runner.dispatch_many("work", range(30))
        with trio.fail_after(10):
            await hook_called.wait()
        hold.set()
    stats = hooked[0]
    assert stats.predicted_wait > 0.5
    assert stats.queue_length >= 30
    assert stats.total_capacity == 1


async def test_a_follower_cannot_reset_or_publish(url: str, group: str, raw: Any) -> None:
    cfg = config(group, **FAST)
    async with (
        trunner.open_runner(url, cfg, trunner.TaskRegistry()) as leader,
        trunner.open_runner(url, cfg, trunner.TaskRegistry()) as follower,
    ):
        assert leader.is_leader
        raw.hset(f"trunner:{{{group}}}:metrics", "t:x:n", 3)
        broker = follower._open_broker()
        assert follower.elector is not None
        with pytest.raises(trunner.LeadershipLost):
            await broker.take_metrics(_AsIf(follower.elector), 0)
        with pytest.raises(trunner.LeadershipLost):
            await broker.publish(_AsIf(follower.elector), 99, 1, "{}")
        assert raw.hget(f"trunner:{{{group}}}:metrics", "t:x:n") == b"3"
        assert raw.hget(f"trunner:{{{group}}}:capacity", "value") != b"99"


class _AsIf:
    """A follower's elector used as if it led: runs the fenced script regardless."""

    def __init__(self, elector: Any) -> None:
        self._elector = elector

    async def run_fenced(self, script: Any, keys: Any, args: Any) -> Any:
        return await self._elector._store.fenced(script, self._elector.id, keys, args)


async def test_membership_lists_live_instances_and_the_leader(url: str, group: str) -> None:
    cfg = config(group, **FAST)
    async with trunner.open_runner(url, cfg, trunner.TaskRegistry()) as a:
        async with trunner.open_runner(url, cfg, trunner.TaskRegistry()) as b:
            instances = await a.instances()
            assert [i.id for i in instances] == sorted([a.consumer_name, b.consumer_name])
            by_id = {i.id: i for i in instances}
            assert by_id[a.consumer_name].leader
            assert not by_id[b.consumer_name].leader
            assert by_id[b.consumer_name].pid == os.getpid()
            assert by_id[b.consumer_name].host == socket.gethostname()
            assert by_id[b.consumer_name].capacity == cfg.num_workers
        # b left gracefully: gone at once, not after instance_ttl
        assert [i.id for i in await a.instances()] == [a.consumer_name]


async def test_a_client_judges_liveness_by_the_groups_instance_ttl(
    url: str, group: str, raw: Any
) -> None:
    """An instance last seen 5 s ago is live for a group whose instance_ttl is 15 s, and
    gone for one whose instance_ttl is 2 s: a client told the group's TTL agrees."""
    keys = trunner.Keys("trunner", group)
    seen_ms = int((time.time() - 5) * 1000)
    raw.zadd(keys.instances, {"old:1:aa": seen_ms})
    raw.hset(keys.instances_info, "old:1:aa", '{"host":"h","pid":1,"capacity":3}')
    async with trunner.open_client(url, group) as default:
        assert [i.id for i in await default.instances()] == ["old:1:aa"]
    async with trunner.open_client(url, group, instance_ttl=2.0) as short:
        assert await short.instances() == []
        assert (await short.group_stats()).instances == 0


@pytest.mark.deadline(60)
async def test_a_killed_instance_drops_out_after_the_ttl(
    redis_server: RedisServer, group: str, tmp_path: Path
) -> None:
    worker = Worker(redis_server.url, group, tmp_path / "log", {"config": FAST})
    try:
        await worker.ready()
        cfg = config(group, **FAST)
        async with trunner.open_runner(redis_server.url, cfg, trunner.TaskRegistry()) as me:
            assert len(await me.instances()) == 2
            worker.kill()
            killed = trio.current_time()

            async def dropped() -> bool:
                return len(await me.instances()) == 1

            await redis_state(dropped)
            assert trio.current_time() - killed >= FAST["instance_ttl"] - FAST["report_interval"]
    finally:
        worker.close()


async def test_capacity_follows_the_backlog_within_bounds(
    url: str, group: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = trio.Event()
    over_capacity: list[tuple[int, int]] = []
    admitted_peak = 0
    original_submit = trunner.pool.WorkerPool.submit

    def submit(pool: trunner.pool.WorkerPool, entries: Any, slots: Any, consumer: str) -> int:
        # The invariant: a fetch never starts a task while as many run as the capacity
        # (tasks running when the capacity was lowered keep running).
        nonlocal admitted_peak
        before = pool.in_flight
        queued = original_submit(pool, entries, slots, consumer)
        after = pool.in_flight
        capacity = pool.capacity
        if after > before and after > capacity:
            over_capacity.append((after, capacity))
        admitted_peak = max(admitted_peak, after)
        return queued

    monkeypatch.setattr(trunner.pool.WorkerPool, "submit", submit)
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def work(_: Any) -> None:
        await trio.sleep(0.02)
        await release.wait()

    cfg = config(
        group,
        **FAST,
        num_workers=2,
        min_workers=1,
        max_workers=6,
        long_queue_threshold=0.2,
    )
    async with (
        trunner.open_runner(url, cfg, tasks) as a,
        trunner.open_runner(url, cfg, tasks) as b,
    ):
        release.set()
        await a.dispatch_many("work", range(10))  # a first window with timings

        async def at_min() -> bool:
            await trio.lowlevel.checkpoint()
            return a.statistics().capacity == b.statistics().capacity == 1

        await redis_state(at_min)  # idle: down to min_workers
        release = trio.Event()
        await a.dispatch_many("work", range(300))

        async def at_max() -> bool:
            await trio.lowlevel.checkpoint()
            return a.statistics().capacity == b.statistics().capacity == 6

        await redis_state(at_max)  # a backlog: up to max_workers, on both
        release.set()

        async def back_to_min() -> bool:
            await trio.lowlevel.checkpoint()
            return (await a.queue_length()) == 0 and a.statistics().capacity == 1

        await redis_state(back_to_min)
    assert over_capacity == [], "a fetch started tasks beyond the applied capacity"
    assert admitted_peak == 6


async def test_fixed_capacity_and_config_checks(group: str) -> None:
    with pytest.raises(ValueError, match="needs long_queue_threshold"):
        trunner.RunnerConfig(consumer_group=group, num_workers=3, min_workers=1, max_workers=5)
    with pytest.raises(ValueError, match="must lie within"):
        trunner.RunnerConfig(consumer_group=group, num_workers=10, max_workers=5)
    with pytest.raises(ValueError, match="instance_ttl"):
        trunner.RunnerConfig(consumer_group=group, instance_ttl=0.5, report_interval=1.0)
    with pytest.raises(TypeError, match="long_queue_hook must be an async function"):
        trunner.RunnerConfig(consumer_group=group, long_queue_hook=print)  # type: ignore[arg-type]
    assert trunner.RunnerConfig(consumer_group=group).worker_bounds == (10, 10)
    await trio.lowlevel.checkpoint()
