"""Leader election: one leader at a time, fencing, handover, failover, faults.

The elector on its own (election.py), then inside the runner: the lease of its group and the
leader chores that live exactly as long as a leadership (leadership.py).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, TypedDict

import pytest
import redis
import trio

import trunner
from trunner._redis import SCRIPTS, open_transport
from trunner._wire.keys import fence_key_for, hash_tag
from trunner.election import Demoted, ElectionFailed, Elector, Promoted, open_elector
from trunner.keys import Keys

from ..conftest import REPO, config, open_checked_runner
from ..support.faults import FaultyTransport, script_call
from ..support.servers import RedisServer


class Timings(TypedDict, total=False):
    ttl: float
    wait: float
    jitter: float


FAST: Timings = {"ttl": 0.3, "wait": 0.4, "jitter": 0.01}


def leading(*electors: Elector) -> int:
    """How many of ``electors`` believe they lead."""
    return sum(e.is_leader for e in electors)


@pytest.fixture
def key() -> str:
    return f"lease-{uuid.uuid4().hex[:8]}"


@asynccontextmanager
async def faulty_elector(
    url: str, key: str, **timings: float
) -> AsyncIterator[tuple[Elector, FaultyTransport]]:
    """An elector on a transport whose commands the test can fail or hold."""
    async with open_transport(url, client_name="t", max_connections=4, connect_timeout=5) as t:
        faulty = FaultyTransport(t)
        elector = Elector(faulty, key, **FAST)
        async with trio.open_nursery() as nursery:
            await nursery.start(elector.run)
            try:
                yield elector, faulty
            finally:
                faulty.release_held()
                faulty.fail(None)
                elector.stop()


async def collect(elector: Elector, count: int) -> list[Any]:
    events = []
    async for event in elector.events():
        events.append(event)
        if len(events) == count:
            break
    return events


def spawn_elector(url: str, key: str, ttl: float, wait: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.processes.elector_process", url, key, str(ttl), str(wait)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )


def kill(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
        process.wait()


def fast_leader(group: str, **more: Any) -> trunner.RunnerConfig:
    return config(group, leader_ttl=0.3, leader_wait=0.4, leader_jitter=0.01, **more)


def test_fence_key_shares_the_lease_hash_slot() -> None:
    assert fence_key_for("trunner:{emails}:leader") == "trunner:{emails}:leader:fence"
    assert fence_key_for("plain") == "{plain}:fence"
    assert hash_tag(fence_key_for("plain")) == "plain"
    assert hash_tag("a{}b") is None
    assert fence_key_for("a{}b") == "{a{}b}:fence"
    # A group's fence counter is the one its elector increments, and is deleted with it.
    keys = trunner.keys.Keys("trunner", "emails")
    assert keys.fence == fence_key_for(keys.leader) == "trunner:{emails}:leader:fence"
    assert keys.fence in keys.fixed()


@pytest.mark.parametrize("count", [2, 5])
async def test_never_two_leaders_at_once(url: str, key: str, count: int) -> None:
    """Sample every candidate's view while leadership moves: by handover, and by loss."""
    async with AsyncExitStack() as stack:
        electors = [
            await stack.enter_async_context(open_elector(url, key, **FAST)) for _ in range(count)
        ]
        leaders_seen: set[str] = set()
        end = trio.current_time() + 10 * FAST["ttl"]
        next_rotation = trio.current_time() + FAST["ttl"]
        rotations = 0
        while trio.current_time() < end:
            leaders = [e for e in electors if e.is_leader]
            assert len(leaders) <= 1, [e.id for e in leaders]
            leaders_seen.update(e.id for e in leaders)
            if leaders and trio.current_time() >= next_rotation:
                if rotations % 2:
                    # Loss: the leader steps down as if a fenced write was refused; its
                    # lease lingers in Redis until it expires.
                    leaders[0].step_down("test rotation")
                else:
                    # Handover: the leader leaves; a new candidate joins.
                    leaders[0].stop()
                    electors.append(await stack.enter_async_context(open_elector(url, key, **FAST)))
                rotations += 1
                next_rotation = trio.current_time() + FAST["ttl"]
            await trio.sleep(0.002)
        assert rotations >= 3
        assert len(leaders_seen) >= 2, "leadership moved"


async def test_a_leader_renews_and_keeps_the_lease(url: str, key: str) -> None:
    # A second of lease: FAST's 0.3 s leaves a renewal 0.15 s of margin, which a busy
    # machine's stall can take, and the leader then steps down as it must.
    timings: Timings = {"ttl": 1.0, "wait": 1.2, "jitter": 0.01}
    async with open_elector(url, key, **timings) as a, open_elector(url, key, **timings) as b:
        assert a.is_leader
        assert not b.is_leader
        assert a.fence is not None
        assert a.fence >= 1
        assert await b.current_leader() == a.id
        with trio.move_on_after(6 * timings["ttl"]):
            await a.wait_demoted()
        assert a.is_leader, "renewed for six lease periods"
        assert (a.promotions, b.promotions) == (1, 0)


async def test_fence_numbers_increase_across_leaders(url: str, key: str) -> None:
    # Each elector leaves with a graceful release, so the lease's TTL costs no time here;
    # with FAST's 0.3 s, a grant answered 0.15 s late on a busy machine is given back (it
    # would be due for renewal already), and the next elector was not leading on entry.
    fences: list[int] = []
    for _ in range(3):
        async with open_elector(url, key, ttl=5.0, wait=6.0) as elector:
            assert elector.is_leader
            assert elector.fence is not None
            fences.append(elector.fence)
    assert fences == sorted(set(fences))
    assert len(fences) == 3


async def test_graceful_handover_is_immediate(url: str, key: str) -> None:
    slow: Timings = {"ttl": 5.0, "wait": 6.0}  # without the notification: a 6 s wait
    async with open_elector(url, key, **slow) as a:
        assert a.is_leader
        async with open_elector(url, key, **slow) as b:
            assert not b.is_leader
            released = trio.current_time()
            a.stop()
            with trio.fail_after(1.0):
                await b.wait_promoted()
            handover = trio.current_time() - released
    assert handover < 1.0, handover
    events = await collect(a, 2)
    assert isinstance(events[0], Promoted)
    assert isinstance(events[1], Demoted)
    assert events[1].reason == "released"


async def test_a_stale_leaders_fenced_write_is_rejected(url: str, key: str, raw: Any) -> None:
    async with open_elector(url, key, ttl=5.0, wait=6.0) as elector:
        assert elector.is_leader
        target = f"{{{key}}}:target" if hash_tag(key) is None else f"{key}:target"
        body = "return redis.call('SET', KEYS[2], ARGV[2])"
        assert await elector.eval_fenced(body, [target], ["by-leader"]) == b"OK"
        raw.set(key, "someone-else")  # the lease was taken while we did not notice
        with pytest.raises(trunner.errors.LeadershipLost):
            await elector.eval_fenced(body, [target], ["by-stale-leader"])
        assert raw.get(target) == b"by-leader", "the stale write did nothing"


async def test_renew_errors_demote_within_one_renew_period(url: str, key: str, raw: Any) -> None:
    async with faulty_elector(url, key) as (elector, faulty):
        assert elector.is_leader
        faulty.fail(script_call(SCRIPTS.lease_renew))
        failing_since = trio.current_time()
        with trio.fail_after(FAST["ttl"] / 2 + FAST["jitter"] + 0.2):
            await elector.wait_demoted()
        assert trio.current_time() - failing_since <= FAST["ttl"]
        with trio.fail_after(0.1):  # given back, long before it would expire
            while raw.exists(key):  # noqa: ASYNC110 - Redis state
                await trio.sleep(0.005)
        events = await collect(elector, 3)
        assert [type(e) for e in events] == [Promoted, ElectionFailed, Demoted]
        assert events[1].during == "renew"
        assert "renewing failed" in events[2].reason
        faulty.fail(None)
        with trio.fail_after(FAST["wait"] + 1.0):
            await elector.wait_promoted()  # runs again after wait


async def test_acquire_errors_are_reported_and_leave_a_follower(url: str, key: str) -> None:
    async with open_elector(url, key, **FAST) as holder:
        assert holder.is_leader
        holder_id = holder.id
    async with faulty_elector(url, key) as (elector, faulty):
        assert elector.is_leader
        elector.stop()
    async with open_transport(url, client_name="t", max_connections=4, connect_timeout=5) as t:
        faulty = FaultyTransport(t)
        faulty.fail(script_call(SCRIPTS.lease_acquire))
        elector = Elector(faulty, key, **FAST)
        async with trio.open_nursery() as nursery:
            await nursery.start(elector.run)
            assert not elector.is_leader
            events = await collect(elector, 2)
            assert all(isinstance(e, ElectionFailed) and e.during == "acquire" for e in events)
            assert not elector.is_leader
            faulty.fail(None)
            await elector.wait_promoted()
            elector.stop()
    assert holder_id != elector.id


async def test_a_lease_granted_too_late_is_given_back_not_led_on(
    url: str, key: str, raw: Any
) -> None:
    """Redis answers the election request only after a pause: leading on that answer
    would step down at once and leave the lease to expire with nobody leading."""
    async with open_transport(url, client_name="t", max_connections=4, connect_timeout=5) as t:
        faulty = FaultyTransport(t)
        faulty.hold(script_call(SCRIPTS.lease_acquire))
        elector = Elector(faulty, key, **FAST)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(elector.run)
            while not faulty.held:  # noqa: ASYNC110 - the request is on its way
                await trio.sleep(0.005)
            await trio.sleep(FAST["ttl"])  # "paused" for a whole lease period
            faulty.release_held()
            with trio.fail_after(0.2):  # granted (the fence counter moved), then deleted
                while not raw.exists(fence_key_for(key)) or raw.exists(key):  # noqa: ASYNC110
                    await trio.sleep(0.005)
            assert elector.promotions == 0, "never led on the late answer"
            with trio.fail_after(FAST["wait"] + 1.0):
                await elector.wait_promoted()  # the next attempt, answered in time
            elector.stop()


async def test_a_leader_whose_renewal_hangs_steps_down_before_the_lease_expires(
    url: str, key: str
) -> None:
    """Redis stops answering (paused): the leader gives up at the lease's end, not later."""
    async with faulty_elector(url, key) as (elector, faulty):
        assert elector.is_leader
        faulty.hold(script_call(SCRIPTS.lease_renew))
        held_from = trio.current_time()
        await elector.wait_demoted()
        assert trio.current_time() - held_from <= FAST["ttl"] + 0.05
        (_, demoted) = await collect(elector, 2)
        assert isinstance(demoted, Demoted)
        assert "expired before its renewal was answered" in demoted.reason


async def test_client_pause_longer_than_the_ttl(redis_server: RedisServer, key: str) -> None:
    async with (
        open_elector(redis_server.url, key, **FAST) as a,
        open_elector(redis_server.url, key, **FAST) as b,
    ):
        leader, follower = (a, b) if a.is_leader else (b, a)
        with redis.Redis.from_url(redis_server.url) as admin:
            admin.client_pause(int(FAST["ttl"] * 3 * 1000))
        await leader.wait_demoted()
        assert not follower.is_leader
        # After the pause one of them leads again, and never both.
        with trio.fail_after(3 * FAST["ttl"] + FAST["wait"] + 2):
            while not leading(a, b):  # noqa: ASYNC110 - sampling both
                await trio.sleep(0.005)
        assert leading(a, b) == 1


@pytest.mark.redis  # starts a redis-server of its own
@pytest.mark.deadline(40)
async def test_electors_survive_a_redis_restart(key: str) -> None:
    with RedisServer() as server:
        async with (
            open_elector(server.url, key, **FAST) as a,
            open_elector(server.url, key, **FAST) as b,
        ):
            server.stop()
            with trio.fail_after(FAST["ttl"] + 0.5):
                while leading(a, b):  # noqa: ASYNC110 - sampling both
                    await trio.sleep(0.005)
            server.start()
            with trio.fail_after(10):
                while not leading(a, b):  # noqa: ASYNC110 - sampling both
                    await trio.sleep(0.01)
            assert leading(a, b) == 1


@pytest.mark.deadline(30)
async def test_crash_failover_within_ttl_plus_wait(redis_server: RedisServer, key: str) -> None:
    ttl, wait = 1.0, 1.2
    process = spawn_elector(redis_server.url, key, ttl, wait)
    try:
        assert process.stdout is not None
        for expected in ("ready", "leader"):
            line = await trio.to_thread.run_sync(process.stdout.readline)
            assert line.strip() == expected
        async with open_elector(redis_server.url, key, ttl=ttl, wait=wait) as follower:
            assert not follower.is_leader
            kill(process)
            killed = trio.current_time()
            with trio.fail_after(ttl + wait + 1.0):
                await follower.wait_promoted()
            failover = trio.current_time() - killed
    finally:
        kill(process)
        if process.stdout:
            process.stdout.close()
    assert failover <= ttl + wait + 1.0


# -- inside the runner ----------------------------------------------------------------------


async def test_one_runner_of_a_group_leads(url: str, group: str) -> None:
    tasks = trunner.TaskRegistry()
    async with (
        open_checked_runner(url, fast_leader(group), tasks) as a,
        open_checked_runner(url, fast_leader(group), tasks) as b,
        open_checked_runner(url, fast_leader(group), tasks) as c,
    ):
        for _ in range(100):
            assert sum(r.is_leader for r in (a, b, c)) == 1
            await trio.sleep(0.01)
        assert a.is_leader, "the first runner took the lease at start"
        assert a.elector is not None
        assert await a.elector.current_leader() == a.consumer_name


async def test_a_leading_runner_releases_the_lease_before_its_block_exits(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    tasks = trunner.TaskRegistry()
    slow = config(group)  # default timings: without the release a follower waits up to 6 s
    lease = keys.leader
    leader = trunner.Runner(url, slow, tasks)
    exited = trio.Event()

    async def run_leader(task_status: trio.TaskStatus[None]) -> None:
        await leader.run(task_status=task_status)
        exited.set()

    async with trio.open_nursery() as nursery:
        await nursery.start(run_leader)
        assert leader.is_leader
        async with open_checked_runner(url, slow, tasks) as follower:
            assert not follower.is_leader
            assert follower.elector is not None
            leader.stop()
            await exited.wait()
            assert raw.get(lease) != leader.consumer_name.encode(), "released before exit"
            with trio.fail_after(1.0):
                await follower.elector.wait_promoted()
            assert raw.get(lease) == follower.consumer_name.encode()


async def test_leader_chores_live_exactly_as_long_as_the_leadership(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    started: list[int | None] = []
    cancelled: list[int | None] = []
    running = trio.Event()

    async def chore(elector: Elector) -> None:
        started.append(elector.fence)
        running.set()
        try:
            await trio.sleep_forever()
        finally:
            cancelled.append(elector.fence)

    runner = trunner.Runner(url, fast_leader(group), trunner.TaskRegistry())
    runner._leader_chores.append(chore)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        await running.wait()
        assert runner.is_leader
        assert len(started) == 1
        elector = runner.elector
        assert elector is not None
        raw.set(keys.leader, "usurper")  # the lease is lost
        await elector.wait_demoted()
        await trio.testing.wait_all_tasks_blocked()
        assert len(cancelled) == 1, "the chore ended with the leadership"
        raw.delete(keys.leader)
        await elector.wait_promoted()
        await trio.testing.wait_all_tasks_blocked()
        assert len(started) == 2
        runner.stop()
    assert len(cancelled) == 2
    first, second = started
    assert first is not None
    assert second is not None
    assert second > first


async def test_a_fenced_refusal_demotes_the_runner(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    refused = trio.Event()

    async def chore(elector: Elector) -> None:
        raw.set(keys.leader, "usurper")
        try:
            await elector.eval_fenced("return 1")
        finally:
            refused.set()

    runner = trunner.Runner(url, fast_leader(group), trunner.TaskRegistry())
    runner._leader_chores.append(chore)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        await refused.wait()
        assert runner.elector is not None
        await runner.elector.wait_demoted()
        events = await collect(runner.elector, 2)
        assert isinstance(events[1], Demoted)
        assert "not the leader" in events[1].reason
        runner.stop()


async def test_a_stopping_runner_does_not_take_the_lead(url: str, group: str) -> None:
    """A follower that is draining must not be promoted when the leader leaves."""
    release = trio.Event()
    both_started = trio.Event()
    running = 0
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def slow(_: Any) -> None:
        nonlocal running
        running += 1
        if running == 2:
            both_started.set()
        await release.wait()

    leader = trunner.Runner(url, fast_leader(group, num_workers=1, drain_timeout=0.1), tasks)
    follower = trunner.Runner(url, fast_leader(group, num_workers=1, drain_timeout=10), tasks)
    async with trio.open_nursery() as nursery:
        await nursery.start(leader.run)
        await nursery.start(follower.run)
        assert leader.is_leader
        await follower.dispatch_many("slow", [1, 2])  # one each: one worker apiece
        await both_started.wait()
        follower.stop()  # draining: its task keeps it in STOPPING
        leader.stop()  # cancels its task after 0.1 s, then releases the lease
        assert follower.elector is not None
        with trio.move_on_after(leader.config.leader_wait * 3):
            await follower.elector.wait_promoted()
        assert not follower.is_leader
        assert leader.state is trunner.RunnerState.STOPPED
        release.set()
    events = [e async for e in follower.elector.events()]  # ends: the runner stopped
    assert not any(isinstance(e, Promoted) for e in events)
