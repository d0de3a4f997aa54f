"""The reporter (trunner/_engine/reporter.py): each instance's task timings reach the group's
metrics hash, and its membership the list of live instances.

What the leader makes of them (statistics, the long-queue hook, capacity) is tested in
test_aggregator.py; the statistics as values in tests/unit/test_group_stats.py.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import trio

import trunner
from trunner.keys import Keys

from ..conftest import config, open_checked_runner, redis_state
from ..support.servers import RedisServer
from ..support.workers import Worker

FAST = {
    "leader_ttl": 0.5,
    "leader_wait": 0.6,
    "report_interval": 0.1,
    "stats_interval": 0.3,
    "instance_ttl": 1.0,
}


async def test_the_metrics_hash_keeps_the_largest_sample(url: str, group: str, keys: Keys) -> None:
    async with trunner.open_client(url, group) as client:
        broker = client._open_broker()
        await broker.report("a", 1000, "{}", [("t:x:n", 1.0), ("t:x:max", 2.5)])
        await broker.report("b", 1001, "{}", [("t:x:n", 1.0), ("t:x:max", 0.5)])
        await broker.report("c", 1002, "{}", [("t:x:n", 2.0), ("t:x:max", 4.25)])
        fields = await client.redis.hgetall(broker.keys.metrics)
        await client.redis.delete(broker.keys.metrics, broker.keys.instances)
    assert float(fields[b"t:x:max"]) == 4.25
    assert float(fields[b"t:x:n"]) == 4.0


async def test_a_maximum_below_a_tenth_of_a_millisecond_is_stored_as_a_plain_decimal(
    url: str, group: str
) -> None:
    # Python writes such a float as 2.433e-06; a task that quick (a cron tick doing
    # nothing) must not leave a maximum the next report refuses and sets aside.
    async with trunner.open_client(url, group) as client:
        broker = client._open_broker()
        _, _, bad = await broker.report("a", 1000, "{}", [("t:x:n", 1.0), ("t:x:max", 2.433e-06)])
        assert bad == []
        _, _, bad = await broker.report("a", 1001, "{}", [("t:x:n", 1.0), ("t:x:max", 1.5e-06)])
        fields = await client.redis.hgetall(broker.keys.metrics)
        await client.redis.delete(broker.keys.metrics, broker.keys.instances)
    assert bad == []
    assert b"e" not in fields[b"t:x:max"].lower()
    assert float(fields[b"t:x:max"]) == pytest.approx(2.433e-06, abs=1e-9)


async def test_the_longest_sample_of_a_fast_task_is_not_bad_data(
    url: str, group: str, keys: Keys
) -> None:
    """A task that takes less than 100 µs: its longest sample, sent as ``1.5e-05``, was
    stored as sent; the next report read it as no number (numbers.lua takes no exponent)
    and set the runner's own metric aside as bad data, once per report."""
    async with trunner.open_client(url, group) as client:
        broker = client._open_broker()
        await broker.report("a", 1000, "{}", [("t:x:max", 1.5e-05)])
        *_, bad = await broker.report("a", 1001, "{}", [("t:x:max", 1e-05)])
        *_, bad_again = await broker.report("a", 1002, "{}", [("t:x:max", 2.5e-05)])
        fields = await client.redis.hgetall(broker.keys.metrics)
        await client.redis.delete(broker.keys.metrics, broker.keys.instances)
    assert bad == bad_again == []
    assert float(fields[b"t:x:max"]) == 2.5e-05


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
        open_checked_runner(url, cfg, tasks) as a,
        open_checked_runner(url, cfg, tasks) as b,
    ):
        await a.dispatch_many("sleepy", [0.02] * 20 + [0.06] * 20)
        await all_done.wait()

        async def reported() -> bool:
            return (
                "sleepy" in (s := await b.admin.group_stats()).tasks
                and s.tasks["sleepy"].count == 40
            )

        await redis_state(reported)
        from_a, from_b = await a.admin.group_stats(), await b.admin.group_stats()
    assert from_a.tasks == from_b.tasks, "the same figures from any instance"
    timing = from_a.tasks["sleepy"]
    assert timing.average >= 0.04
    assert timing.p50 >= 0.02
    assert timing.p99 >= 0.05
    assert from_a.instances == 2
    assert from_a.total_capacity == 2 * cfg.num_workers


async def test_timings_are_flushed_at_shutdown(url: str, group: str, keys: Keys, raw: Any) -> None:
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
    async with open_checked_runner(url, cfg, tasks) as runner:
        await runner.dispatch_many("quick", range(5))
        await done.wait()
    assert float(raw.hget(keys.metrics, "t:quick:n")) == 5


async def test_membership_lists_live_instances_and_the_leader(url: str, group: str) -> None:
    cfg = config(group, **FAST)
    async with open_checked_runner(url, cfg, trunner.TaskRegistry()) as a:
        async with open_checked_runner(url, cfg, trunner.TaskRegistry()) as b:
            instances = await a.admin.instances()
            assert [i.id for i in instances] == sorted([a.consumer_name, b.consumer_name])
            by_id = {i.id: i for i in instances}
            assert by_id[a.consumer_name].leader
            assert not by_id[b.consumer_name].leader
            assert by_id[b.consumer_name].pid == os.getpid()
            assert by_id[b.consumer_name].host == socket.gethostname()
            assert by_id[b.consumer_name].capacity == cfg.num_workers
        # b left gracefully: gone at once, not after instance_ttl
        assert [i.id for i in await a.admin.instances()] == [a.consumer_name]


async def test_a_client_judges_liveness_by_the_groups_instance_ttl(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    """An instance last seen 5 s ago is live for a group whose instance_ttl is 15 s, and
    gone for one whose instance_ttl is 2 s: a client told the group's TTL agrees."""
    seen_ms = int((time.time() - 5) * 1000)
    raw.zadd(keys.instances, {"old:1:aa": seen_ms})
    raw.hset(keys.instances_info, "old:1:aa", '{"host":"h","pid":1,"capacity":3}')
    async with trunner.open_client(url, group) as default:
        assert [i.id for i in await default.admin.instances()] == ["old:1:aa"]
    async with trunner.open_client(url, group, instance_ttl=2.0) as short:
        assert await short.admin.instances() == []
        assert (await short.admin.group_stats()).instances == 0


@pytest.mark.deadline(60)
async def test_a_killed_instance_drops_out_after_the_ttl(
    redis_server: RedisServer, group: str, tmp_path: Path
) -> None:
    worker = Worker(redis_server.url, group, tmp_path / "log", {"config": FAST})
    try:
        await worker.ready()
        cfg = config(group, **FAST)
        async with open_checked_runner(redis_server.url, cfg, trunner.TaskRegistry()) as me:
            assert len(await me.admin.instances()) == 2
            worker.kill()
            killed = trio.current_time()

            async def dropped() -> bool:
                return len(await me.admin.instances()) == 1

            await redis_state(dropped)
            assert trio.current_time() - killed >= FAST["instance_ttl"] - FAST["report_interval"]
    finally:
        worker.close()
