"""The aggregator (trunner/_leader/aggregator.py), the leader's view of the group: the long-queue
hook, fenced resets and publishing, and the capacity it decides for every pool."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

import trunner
import trunner._engine.pool
from trunner.keys import Keys

from ..conftest import config, open_checked_runner, redis_state

FAST = {
    "leader_ttl": 0.5,
    "leader_wait": 0.6,
    "report_interval": 0.1,
    "stats_interval": 0.3,
    "instance_ttl": 1.0,
}


class _AsIf:
    """A follower's elector used as if it led: runs the fenced script regardless."""

    def __init__(self, elector: Any) -> None:
        self._elector = elector

    async def run_fenced(self, script: Any, keys: Any, args: Any) -> Any:
        return await self._elector._store.fenced(script, self._elector.id, keys, args)


async def test_the_hook_fires_when_and_only_when_the_predicted_wait_is_too_long(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    hooked: list[trunner.admin.GroupStats] = []
    hook_called = trio.Event()

    async def hook(stats: trunner.admin.GroupStats) -> None:
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
    async with open_checked_runner(url, cfg, tasks) as runner:
        await runner.dispatch_many("work", range(3))

        async def a_window_with_timings() -> bool:
            stats = raw.get(keys.stats)
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


async def test_a_follower_cannot_reset_or_publish(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    cfg = config(group, **FAST)
    async with (
        open_checked_runner(url, cfg, trunner.TaskRegistry()) as leader,
        open_checked_runner(url, cfg, trunner.TaskRegistry()) as follower,
    ):
        assert leader.is_leader
        raw.hset(keys.metrics, "t:x:n", 3)
        broker = follower._open_broker()
        assert follower.elector is not None
        with pytest.raises(trunner.errors.LeadershipLost):
            await broker.take_metrics(_AsIf(follower.elector), 0, 0)
        with pytest.raises(trunner.errors.LeadershipLost):
            await broker.publish(_AsIf(follower.elector), 99, 1, "{}")
        assert raw.hget(keys.metrics, "t:x:n") == b"3"
        assert raw.hget(keys.capacity, "value") != b"99"


async def test_capacity_follows_the_backlog_within_bounds(
    url: str, group: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = trio.Event()
    over_capacity: list[tuple[int, int]] = []
    admitted_peak = 0
    original_submit = trunner._engine.pool.WorkerPool.submit

    def submit(
        pool: trunner._engine.pool.WorkerPool, entries: Any, slots: Any, consumer: str
    ) -> int:
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

    monkeypatch.setattr(trunner._engine.pool.WorkerPool, "submit", submit)
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
        open_checked_runner(url, cfg, tasks) as a,
        open_checked_runner(url, cfg, tasks) as b,
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
            return (await a.admin.queue_length()) == 0 and a.statistics().capacity == 1

        await redis_state(back_to_min)
    assert over_capacity == [], "a fetch started tasks beyond the applied capacity"
    assert admitted_peak == 6
