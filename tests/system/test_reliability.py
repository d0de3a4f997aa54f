"""The reliability suite: real worker processes and real Redis servers under faults.

Each scenario runs `trunner worker` processes (tests/processes/reliability_worker.py) whose
tasks log their executions, dispatches from this process, injects a fault, waits until every
acknowledged dispatch finished and the group drained, and checks the merged history
(tests/support/history.py): nothing lost, nothing unexpected, and duplicates within the bound
the scenario states. Each prints its figures (docs/reliability.md collects them).

Timings are scaled down from the defaults (reclaim_delay 300 s, leader_ttl 5 s, BLOCK 5 s)
to seconds, so that every fault heals within the test's deadline.
"""

from __future__ import annotations

import logging
import os
import random
import statistics
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import trunner
from trunner.keys import Keys

from ..conftest import Tally, config, raw_client, redis_state
from ..support.fleet import Fleet, feed, open_fleet, payloads
from ..support.history import Report
from ..support.proxy import Proxy, open_proxy
from ..support.servers import RedisServer

pytestmark = pytest.mark.redis  # real servers and worker processes, every test


@pytest.fixture
def raw(redis_server: RedisServer) -> Iterator[Any]:
    client = raw_client(redis_server.url)
    yield client
    client.close()


def options(group: str, *, max_retry: int = 10, **overrides: Any) -> dict[str, Any]:
    """Worker options: scaled-down timings, then ``overrides`` (RunnerConfig arguments)."""
    values: dict[str, Any] = {
        "consumer_group": group,
        "num_workers": 8,
        "block_duration": 0.5,
        "reclaim_delay": 1.5,
        "reclaim_interval": 0.2,
        "leader_ttl": 0.8,
        "leader_wait": 0.4,
        "drain_timeout": 5.0,
    }
    values.update(overrides)
    return {"config": values, "max_retry": max_retry}


def show(scenario: str, report: Report, **figures: Any) -> None:
    extra = "; ".join(f"{k} {v}" for k, v in figures.items())
    print(f"\n[{scenario}] {report.summary()}" + (f"; {extra}" if extra else ""))


def assert_valid(report: Report) -> None:
    assert report.valid, f"lost {report.lost[:20]}, unexpected {report.unexpected[:20]}"
    assert report.unacked == [], f"finished but left pending: {report.unacked[:20]}"
    assert report.multi_entry == {}, f"ran from several stream entries: {report.multi_entry}"


def leader_pid(raw: Any, group: str) -> int | None:
    """The process id of the group's leader (consumer names are ``host:pid:random``)."""
    holder = raw.get(Keys("trunner", group).leader)
    return None if holder is None else int(holder.decode().split(":")[-2])


async def new_leader(fleet: Fleet, raw: Any, group: str, not_pid: int | None) -> int:
    """Wait until a running worker other than ``not_pid`` holds the lease; its pid."""
    while True:
        pid = leader_pid(raw, group)
        if pid is not None and pid != not_pid and pid in {w.pid for w in fleet.ready}:
            return pid
        await trio.sleep(0.01)


async def chaos(proxy: Proxy, seconds: float, rng: random.Random, done: dict[str, float]) -> None:
    """Break the proxied connections at random for ``seconds``: cut every connection (and
    refuse new ones) for up to 0.4 s, hold replies back up to 0.2 s for a while, or lose the
    next replies (their connections close). ``done`` counts the faults, and the seconds cut.

    The first three faults are one of each kind, in a random order: a busy machine fits
    fewer faults in ``seconds``, and every kind must happen in every run."""
    end = trio.current_time() + seconds
    kinds = ["cut", "delay", "drop"]
    first = rng.sample(kinds, len(kinds))
    while first or trio.current_time() < end:
        action = first.pop() if first else rng.choice(kinds)
        done[action] = done.get(action, 0) + 1
        if action == "cut":
            proxy.cut()
            outage = rng.uniform(0.05, 0.4)
            done["seconds cut"] = round(done.get("seconds cut", 0) + outage, 2)
            await trio.sleep(outage)
            proxy.restore()
        elif action == "delay":
            proxy.delay = rng.uniform(0.01, 0.2)
            await trio.sleep(rng.uniform(0.2, 0.6))
            proxy.delay = 0.0
        else:
            proxy.drop_replies(rng.randint(1, 3))
        await trio.sleep(rng.uniform(0.1, 0.4))


def not_reclaimed_after_idle(fleet: Fleet, ids: Iterable[str], reclaim_delay: float) -> list[str]:
    """Tasks of ``ids`` whose second run is not a reclaim of an entry left idle for
    ``reclaim_delay`` (a later attempt, at least that long after the first run started)."""
    runs = fleet.history.runs()
    return [
        i
        for i in ids
        if runs[i][1].attempt <= runs[i][0].attempt
        or runs[i][1].start - runs[i][0].start < reclaim_delay - 0.05
    ]


async def max_idle(raw: Any, group: str, message_id: str, fleet: Fleet, task_id: str) -> int:
    """Sample the idle time (ms) of an entry from its delivery to its acknowledgement (its
    task finished, and it left the pending list); return the largest."""
    stream, largest = Keys("trunner", group).stream, 0
    while True:
        pending = raw.xpending_range(stream, group, message_id, message_id, 1)
        if pending:
            largest = max(largest, pending[0]["time_since_delivered"])
        elif task_id in fleet.finished():
            return largest
        await trio.sleep(0.02)


def _timings(opts: dict[str, Any]) -> str:
    c = opts["config"]
    keys = ("reclaim_delay", "reclaim_interval", "leader_ttl", "leader_wait", "block_duration")
    return ", ".join(f"{k}={c[k]}" for k in keys if k in c)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


# -- 1. SIGKILL workers mid-task ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.deadline(120)
async def test_sigkilled_workers_lose_nothing(
    redis_server: RedisServer, group: str, raw: Any, tmp_path: Path
) -> None:
    """Three workers share 3000 tasks of 10-60 ms; four times, one of them is SIGKILLed
    while it runs tasks (the two others keep running) and a new one is started.

    Bound on duplicates: only tasks whose earlier run was on a killed process, and either
    had not finished or had finished within a second of the kill (its acknowledgement may
    not have been flushed); so at most kills x (num_workers + ack_batch_size)."""
    total, kills, num_workers = 3000, 4, 8
    opts = options(group, num_workers=num_workers)
    rng = random.Random(1)
    items = [dict(p, seconds=rng.uniform(0.01, 0.06)) for p in payloads(total, "t")]
    in_flight_at_kill: list[int] = []
    async with (
        open_fleet(redis_server.url, tmp_path, opts) as fleet,
        trunner.open_client(redis_server.url, group) as client,
    ):
        await fleet.start(3)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: feed(client, fleet.history, items, interval=0.08))
            for round_ in range(kills):
                await fleet.wait_count((round_ + 1) * total // (kills + 2))
                victim = fleet.ready[0]
                await fleet.wait_running(victim)
                fleet.kill(victim)
                in_flight_at_kill.append(len(fleet.in_flight(victim.pid)))
                nursery.start_soon(fleet.start, 1)
        await fleet.wait_finished(fleet.history.acknowledged())
        report = await fleet.check(raw, group)
        assert await client.admin.dead_letter_count() == 0
    show(
        "1 SIGKILL",
        report,
        kills=kills,
        in_flight_at_kills=in_flight_at_kill,
        timings=_timings(opts),
    )
    assert_valid(report)
    assert report.acknowledged == total
    assert report.unexplained == [], report.unexplained
    ack_batch_size = 100  # RunnerConfig's default: acknowledgements buffered at most
    assert len(report.duplicates) <= kills * (num_workers + ack_batch_size)
    assert sum(in_flight_at_kill) >= kills, "the kills hit running tasks"
    assert len(report.duplicates) >= sum(in_flight_at_kill), "every killed run was run again"
    reclaim = opts["config"]["reclaim_delay"] + opts["config"]["reclaim_interval"]
    assert report.latency_max is not None
    assert report.latency_max < reclaim + 2.0, report.latencies


# -- 2. SIGKILL the leader while delayed tasks are due ---------------------------------------


@pytest.mark.slow
@pytest.mark.deadline(60)
async def test_sigkilled_leaders_neither_lose_nor_double_delayed_tasks(
    redis_server: RedisServer, group: str, raw: Any, tmp_path: Path
) -> None:
    """400 delayed tasks fall due over 4 s while four workers run; the leader (which moves
    due tasks into the stream) is SIGKILLed, then the next leader too.

    Each delayed task must run from exactly one stream entry (the fenced move is atomic),
    and run again only if a killed leader was running it (it is also a worker): the bound
    on duplicates is the tasks in flight on the killed leaders."""
    total, span = 400, 4.0
    opts = options(group, leader_ttl=0.6, leader_wait=0.3)
    ttl, wait = opts["config"]["leader_ttl"], opts["config"]["leader_wait"]
    due: dict[str, float] = {}
    async with (
        open_fleet(redis_server.url, tmp_path, opts) as fleet,
        trunner.open_client(redis_server.url, group) as client,
    ):
        await fleet.start(4)
        first_leader = await new_leader(fleet, raw, group, None)
        begin = trio.current_time()
        wall = time.time()
        for n, item in enumerate(payloads(total, "d", seconds=0.01)):
            delay = 0.5 + span * n / total - (trio.current_time() - begin)
            fleet.history.invoke([item["id"]])
            await client.dispatch_delayed("work", item, max(delay, 0.0))
            fleet.history.ok([item["id"]])
            due[item["id"]] = wall + 0.5 + span * n / total
        killed: list[tuple[int, float]] = []
        leader = first_leader
        for at in (1.2, 2.8):
            await trio.sleep_until(begin + at)  # a point in the schedule: tasks fall due
            victim = next(w for w in fleet.ready if w.pid == leader)
            fleet.kill(victim)
            killed.append((leader, time.time()))
            leader = await new_leader(fleet, raw, group, leader)
        await fleet.wait_finished(due)
        report = await fleet.check(raw, group)
        assert await client.admin.delayed_count() == 0
        assert await client.admin.dead_letter_count() == 0
    runs = fleet.history.runs()
    lateness = [runs[i][0].start - due[i] for i in due]
    show(
        "2 leader SIGKILL",
        report,
        leader_kills=len(killed),
        lateness_median=f"{_median(lateness):.3f} s",
        lateness_max=f"{max(lateness):.3f} s",
        timings=_timings(opts),
    )
    assert_valid(report)
    assert report.unexplained == [], report.unexplained
    assert report.finished_twice.keys() <= report.duplicates.keys()
    on_leaders = {i for i, rs in runs.items() if rs[0].pid in {pid for pid, _ in killed}}
    assert report.duplicates.keys() <= on_leaders
    # A due task waits for the failover (lease expiry, then a follower's next try), or,
    # when the killed leader had already read it from the stream, for the reclaim.
    reclaim = opts["config"]["reclaim_delay"] + opts["config"]["reclaim_interval"]
    assert max(lateness) < max(ttl + wait, reclaim) + 1.0, sorted(lateness)[-10:]


# -- 3. Redis stops answering for longer than the lease TTL -----------------------------------


@pytest.mark.slow
@pytest.mark.deadline(60)
async def test_redis_paused_longer_than_the_lease(group: str, keys: Keys, tmp_path: Path) -> None:
    """Three workers run 1500 tasks and 60 delayed ones while Redis is paused
    (``CLIENT PAUSE ... ALL``) for three lease TTLs; commands wait, then Redis answers
    again. The leader cannot renew: it steps down, and a leader is elected after the pause.

    Bound on duplicates: none. No process dies, and an entry's idle time grows by at most
    the pause plus one heartbeat interval (1.8 + 4/3 s), less than reclaim_delay (4 s)."""
    total, delayed = 1500, 60
    opts = options(group, reclaim_delay=4.0, leader_ttl=0.6, leader_wait=0.3)
    pause = 3 * opts["config"]["leader_ttl"]
    rng = random.Random(3)
    items = [dict(p, seconds=rng.uniform(0.005, 0.03)) for p in payloads(total, "t")]
    with RedisServer() as server:
        raw = raw_client(server.url)
        fence_key = keys.fence
        async with (
            open_fleet(server.url, tmp_path, opts) as fleet,
            trunner.open_client(server.url, group) as client,
        ):
            await fleet.start(3)
            await new_leader(fleet, raw, group, None)
            fence_before = int(raw.get(fence_key))
            begin = trio.current_time()
            wall = time.time()
            due: dict[str, float] = {}
            for n, item in enumerate(payloads(delayed, "d")):  # due across the pause
                delay = 0.5 + 3.0 * n / delayed
                fleet.history.invoke([item["id"]])
                await client.dispatch_delayed("work", item, delay - (trio.current_time() - begin))
                fleet.history.ok([item["id"]])
                due[item["id"]] = wall + delay
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: feed(client, fleet.history, items, interval=0.1))
                await trio.sleep_until(begin + 1.0)  # a point in the schedule
                finished_before = len(fleet.finished())
                raw.client_pause(int(pause * 1000), all=True)
                paused_at = time.time()
                await trio.sleep(pause)  # the pause itself: no event to wait for
                finished_during = len(fleet.finished()) - finished_before
            await fleet.wait_finished(fleet.history.acknowledged())
            report = await fleet.check(raw, group)
            fence_after = int(raw.get(fence_key))
            assert await client.admin.delayed_count() == 0
            assert await client.admin.dead_letter_count() == 0
        raw.close()
    runs = fleet.history.runs()
    resumed_at = paused_at + pause
    # Delayed tasks due during the pause wait for it, then for a leader to be elected.
    after_pause = [runs[i][0].start - max(due[i], resumed_at) for i in due]
    show(
        "3 CLIENT PAUSE",
        report,
        pause=f"{pause:.1f} s",
        finished_during_pause=finished_during,
        delayed_moved_after_pause=f"max {max(after_pause):.2f} s late",
        new_leases=fence_after - fence_before,
        timings=_timings(opts),
    )
    assert_valid(report)
    assert report.acknowledged == total + delayed
    assert report.duplicates == {}, report.duplicates
    failover = 2 * opts["config"]["leader_ttl"] + opts["config"]["leader_wait"]
    assert max(after_pause) < failover + 1.5, "no leader moved due tasks after the pause"
    assert fence_after > fence_before, "the leader stepped down and a lease was taken again"


# -- 4. Redis restarts with AOF under load ---------------------------------------------------


@pytest.mark.slow
@pytest.mark.deadline(60)
async def test_redis_restart_with_aof_under_load(group: str, tmp_path: Path) -> None:
    """Three workers run tasks dispatched continuously while Redis (AOF, appendfsync
    everysec) is stopped and started again on the same port; the runners reconnect by
    themselves.

    The stop is graceful (the SHUTDOWN command, which flushes and fsyncs the AOF), so
    nothing acknowledged is lost by Redis itself. (A SIGKILL with everysec could lose the
    last second of writes: acknowledged dispatches, and acknowledgements, which then run
    again.) Dispatches that fail while it is down are indeterminate and not retried.

    Bound on duplicates: none. No process dies, nothing written is lost, and no entry
    stays idle for reclaim_delay (5 s): the outage (1 s) plus the retry backoff of the
    acknowledgements after it (at most 1.6 s), or plus one heartbeat interval (5/3 s)."""
    opts = options(group, reclaim_delay=5.0)
    rng = random.Random(4)
    items = [dict(p, seconds=rng.uniform(0.02, 0.1)) for p in payloads(2000, "t")]
    outage = 1.0
    with RedisServer("--appendonly", "yes", "--appendfsync", "everysec") as server:
        raw = raw_client(server.url)
        async with (
            open_fleet(server.url, tmp_path, opts) as fleet,
            trunner.open_client(server.url, group, connect_timeout=1.0) as client,
        ):
            await fleet.start(3)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: feed(client, fleet.history, items, interval=0.1))
                await fleet.wait_count(400)
                stopping_at = time.time()
                raw.shutdown()  # SHUTDOWN: flushes and fsyncs the AOF, then exits
                await trio.to_thread.run_sync(server.stop)  # reaps the process
                stopped_at = time.time()
                await trio.sleep(outage)  # the outage itself: no event to wait for
                await trio.to_thread.run_sync(server.start)
                restarted_at = time.time()
            await fleet.wait_finished(fleet.history.acknowledged())
            raw.close()
            raw = raw_client(server.url)
            report = await fleet.check(raw, group)
            assert await client.admin.dead_letter_count() == 0
        raw.close()
    runs = [r for rs in fleet.history.runs().values() for r in rs]
    running = sum(1 for r in runs if r.start < stopping_at < (r.end or 0))
    first_after = min(r.start for r in runs if r.start > restarted_at) - restarted_at
    show(
        "4 Redis restart (AOF everysec, graceful stop)",
        report,
        down=f"{restarted_at - stopped_at:.2f} s",
        running_at_stop=running,
        first_start_after_restart=f"{first_after:.2f} s",
        timings=_timings(opts),
    )
    assert_valid(report)
    assert running > 0, "tasks were running when Redis stopped"
    assert report.indeterminate > 0, "dispatches went on during the outage"
    assert report.duplicates == {}, report.duplicates


# -- 5. A proxy that drops connections and delays replies --------------------------------------


@pytest.mark.slow
@pytest.mark.deadline(90)
async def test_a_proxy_breaking_connections_at_random(
    redis_server: RedisServer, group: str, raw: Any, tmp_path: Path
) -> None:
    """Three workers and the producer talk to Redis through a proxy that, for 6 s, cuts
    connections, delays replies and loses replies at random (about a third of the time
    connections are cut). Dispatches that fail are indeterminate (a lost reply may hide an
    enqueue that happened).

    Bound on duplicates: reads whose replies were lost are released without running, so a
    task runs twice only when its acknowledgement (or its heartbeats) could not get through
    for reclaim_delay (3 s) and another worker reclaimed it. So every duplicate must be a
    later attempt, started at least reclaim_delay after the first run. Most runs have none;
    when retries keep landing in cuts, the acknowledgements' backoff (up to 5 s) can let a
    few finished tasks be reclaimed."""
    seed = int(os.environ.get("RELIABILITY_SEED") or random.randrange(1 << 32))
    rng = random.Random(seed)
    opts = options(group, reclaim_delay=3.0, connect_timeout=1.0)
    items = [dict(p, seconds=rng.uniform(0.005, 0.03)) for p in payloads(2000, "t")]
    faults: dict[str, float] = {}
    async with (
        open_proxy(redis_server.port) as proxy,
        open_fleet(proxy.url, tmp_path, opts) as fleet,
        trunner.open_client(proxy.url, group, connect_timeout=1.0) as client,
    ):
        await fleet.start(3)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: feed(client, fleet.history, items, interval=0.15))
            await chaos(proxy, 6.0, rng, faults)
        proxy.restore()
        await fleet.wait_finished(fleet.history.acknowledged())
        report = await fleet.check(raw, group)
        assert await client.admin.dead_letter_count() == 0
    show(
        "5 proxy chaos",
        report,
        seed=seed,
        faults=faults,
        connections=f"{proxy.accepted} accepted, {proxy.refused} refused while cut",
        timings=_timings(opts),
    )
    assert_valid(report)
    assert proxy.refused > 0
    assert faults.get("drop", 0) > 0
    assert not_reclaimed_after_idle(fleet, report.duplicates, 3.0) == []


# -- 6. An event-loop stall shorter than the reclaim delay ----------------------------------


@pytest.mark.slow
@pytest.mark.deadline(60)
async def test_an_event_loop_stall_shorter_than_the_reclaim_delay_is_not_stolen(
    redis_server: RedisServer, group: str, raw: Any, tmp_path: Path
) -> None:
    """Two workers (reclaim_delay 3 s, so heartbeats every 1 s; reclaim passes every 50 ms)
    run 300 short tasks while three tasks, one after the other (each once every task
    dispatched before it finished: a task living through two stalls in a row would see one
    stall of 3.2 s), block their
    worker's event loop for 1.6 s (``time.sleep``): longer than the heartbeat interval,
    shorter than the reclaim delay. Bound on duplicates: none; each stalled entry stays
    idle < 3 s.

    Control: a stall of 3.6 s, longer than the reclaim delay, is stolen: the other worker
    runs the task while the first run is still blocked (which is why the docs ask never to
    block the event loop longer than reclaim_delay)."""
    opts = options(group, reclaim_delay=3.0, reclaim_interval=0.05, num_workers=4)
    stall, control = 1.6, 3.6
    idles: list[int] = []
    async with (
        open_fleet(redis_server.url, tmp_path, opts) as fleet,
        trunner.open_client(redis_server.url, group) as client,
    ):
        await fleet.start(2)
        items = payloads(300, "t", seconds=0.02)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: feed(client, fleet.history, items, interval=0.1))
            for n in range(3):
                # Every task dispatched so far finishes first: none of them (fetched in the
                # same batch as the last stall, say) lives through two stalls in a row.
                await fleet.wait_finished(fleet.history.acknowledged())
                task_id = f"s{n}"
                fleet.history.invoke([task_id])
                entry = await client.dispatch("stall", {"id": task_id, "seconds": stall})
                fleet.history.ok([task_id])
                idles.append(await max_idle(raw, group, entry, fleet, task_id))
        await fleet.wait_finished(fleet.history.acknowledged())
        report = await fleet.check(raw, group)

        fleet.history.invoke(["control"])
        await client.dispatch("stall", {"id": "control", "seconds": control, "first_only": True})
        fleet.history.ok(["control"])
        await fleet.wait_finished(["control"])
        await fleet.wait_count(len(fleet.history.acknowledged()))
        control_report = await fleet.check(raw, group)
    runs = fleet.history.runs()["control"]
    show(
        "6 stall",
        report,
        stall=f"{stall} s x 3",
        max_idle_of_stalled_entries=f"{max(idles) / 1000:.2f} s",
        control=f"{control} s stall: {len(runs)} runs, "
        f"the second {runs[-1].start - runs[0].start:.2f} s after the first",
        timings=_timings(opts),
    )
    assert_valid(report)
    assert report.duplicates == {}, report.duplicates
    assert all(stall * 1000 * 0.9 < idle < 3000 for idle in idles), idles
    assert_valid(control_report)
    assert control_report.duplicates == {"control": 2}, "the long stall was stolen"
    # Reclaimed for its idle time: the same attempt, delivered again (not a failed attempt).
    assert [r.attempt for r in runs] == [1, 1], "reclaimed for its idle time"


# -- 7. Graceful shutdown under load -----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.deadline(60)
async def test_sigterm_under_load_releases_to_the_others_within_a_second(
    redis_server: RedisServer, group: str, raw: Any, tmp_path: Path
) -> None:
    """Three workers (6 slots each) run 150 tasks of 0.2-1.2 s; two of them get SIGTERM one
    after the other while running tasks (the command drains for 0.3 s, then cancels what
    still runs and releases it), and a new worker starts after the first stop.

    The reclaim delay is 30 s, so released messages can only come back through a release;
    they must be picked up by the others within a second (reclaim passes every 0.5 s).
    Bound on duplicates: only the runs interrupted by a shutdown, so at most 2 x 6; no task
    finishes twice."""
    opts = options(
        group, num_workers=6, drain_timeout=0.3, reclaim_delay=30.0, reclaim_interval=0.5
    )
    rng = random.Random(7)
    items = [dict(p, seconds=rng.uniform(0.2, 1.2)) for p in payloads(150, "t")]
    stops: list[float] = []
    async with (
        open_fleet(redis_server.url, tmp_path, opts) as fleet,
        trunner.open_client(redis_server.url, group) as client,
    ):
        await fleet.start(3)
        await feed(client, fleet.history, items)
        async with trio.open_nursery() as nursery:
            for count in (20, 60):
                await fleet.wait_count(count)
                victim = fleet.ready[0]
                await fleet.wait_running(victim)
                began = trio.current_time()
                assert await victim.terminate() == 0
                stops.append(trio.current_time() - began)
                nursery.start_soon(fleet.start, 1)
        await fleet.wait_finished(fleet.history.acknowledged())
        report = await fleet.check(raw, group)
        assert await client.admin.dead_letter_count() == 0
    show(
        "7 SIGTERM",
        report,
        interrupted=len(report.duplicates),
        stop_durations=[f"{s:.2f} s" for s in stops],
        timings=_timings(opts),
    )
    assert_valid(report)
    assert report.finished_twice == {}, report.finished_twice
    assert report.unexplained == [], report.unexplained
    assert 0 < len(report.duplicates) <= 2 * 6
    assert set(report.latencies) == set(report.duplicates)
    assert report.latency_max is not None
    assert report.latency_max < 1.0, sorted(report.latencies.values())


# -- consumer clean-up -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.deadline(40)
async def test_a_consumer_with_pending_entries_is_kept_at_shutdown(
    group: str, keys: Keys, tally: Tally
) -> None:
    """A runner whose acknowledgements Redis refuses (its ACL user may not XACK) runs a task
    and stops. The finished task stays pending for the consumer that fetched it, so the
    shutdown must keep that consumer (deleting it would drop the entry from the group's
    pending list for good) while it deletes the instance's other, empty, consumer. Another
    runner then reclaims the entry and runs it again: nothing lost, one documented
    duplicate (an acknowledgement that could not be written)."""
    tasks = trunner.TaskRegistry()

    @tasks.task(max_retry=1)
    async def record(payload: Any) -> None:
        tally.record(payload)

    stream = keys.stream
    with RedisServer() as server:
        admin = raw_client(server.url)
        admin.acl_setuser(
            "noack",
            enabled=True,
            passwords=["+pw"],
            keys=["*"],
            channels=["*"],
            commands=["+@all", "-xack"],
        )
        no_ack_url = f"redis://noack:pw@127.0.0.1:{server.port}/0"
        # A long reclaim delay while the refused runner runs: it must not reclaim its own entry.
        cfg = config(group, num_fetchers=2, reclaim_delay=60.0)
        async with trunner.open_runner(no_ack_url, cfg, tasks) as refused:
            consumers = set(refused.consumers)
            for name in consumers:  # as if each fetcher had read (and acknowledged) before
                admin.xgroup_createconsumer(stream, group, name)
            entry = await refused.dispatch("record", "x")
            await tally.wait(1)
        (pending,) = admin.xpending_range(stream, group, "-", "+", 10)
        holder = pending["consumer"].decode()
        left = {c["name"].decode(): c["pending"] for c in admin.xinfo_consumers(stream, group)}
        assert holder in consumers
        assert left == {holder: 1}, "the empty consumer was deleted, the holder kept"

        cfg = config(group, reclaim_delay=0.3, reclaim_interval=0.05)
        async with trunner.open_runner(server.url, cfg, tasks) as rescuer:
            await tally.wait(2)

            async def drained() -> bool:
                return await rescuer.admin.pending_count() == 0

            await redis_state(drained)
        admin.close()
    # The rescuer's run is the same attempt delivered again (a lost run is no attempt).
    assert [(p, a, m) for p, a, m in tally.runs] == [("x", 1, entry), ("x", 1, entry)]


# -- Redis settings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "warned"),
    [
        # Evicts keys that have a time-to-live: the lease, unique locks, membership.
        (("--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru"), True),
        # No maxmemory yet: nothing is evicted today, but setting one later would.
        (("--maxmemory-policy", "allkeys-lru"), True),
        (("--maxmemory", "100mb", "--maxmemory-policy", "noeviction"), False),
    ],
)
async def test_warns_when_redis_may_evict(
    group: str, args: tuple[str, ...], warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """(test_runner.py checks allkeys-lru with maxmemory, and noeviction; these add the
    other policies, and that it is one WARNING of the "trunner" logger.)"""
    caplog.set_level(logging.WARNING, logger="trunner")
    with RedisServer(*args) as server:
        async with trunner.open_runner(server.url, config(group), trunner.TaskRegistry()):
            pass
    records = [r for r in caplog.records if "maxmemory-policy" in r.getMessage()]
    assert [(r.name, r.levelno) for r in records] == [("trunner", logging.WARNING)] * warned


async def test_no_eviction_check_without_the_config_permission(
    group: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A user who may not run CONFIG GET still starts a runner (the check is skipped)."""
    caplog.set_level(logging.WARNING, logger="trunner")
    with RedisServer("--maxmemory-policy", "allkeys-lru") as server:
        admin = raw_client(server.url)
        admin.acl_setuser(
            "app",
            enabled=True,
            passwords=["+pw"],
            keys=["*"],
            channels=["*"],
            commands=["+@all", "-config"],
        )
        admin.close()
        url = f"redis://app:pw@127.0.0.1:{server.port}/0"
        async with trunner.open_runner(url, config(group), trunner.TaskRegistry()) as runner:
            assert runner.state is trunner.RunnerState.STARTED
    assert not [r for r in caplog.records if "maxmemory-policy" in r.getMessage()]
