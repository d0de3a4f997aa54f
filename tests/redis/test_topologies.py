"""Cluster, Sentinel, TLS and ACL: real servers the suite starts itself.

Cluster and Sentinel run on the bridged transport (_redis/transports/bridged.py), TLS and
ACL on the native one; each deployment runs whole runners.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis
import trio

import trunner
from trunner import step
from trunner import workflows as wf
from trunner._redis import BridgedTransport, open_transport
from trunner.election import open_elector
from trunner.errors import WorkflowCancelled
from trunner.keys import Keys
from trunner.status import WorkflowState

from ..conftest import config, open_checked_runner, parts, redis_state
from ..support.servers import RedisServer
from ..support.topologies import Cluster, SentinelSet, TlsServer, is_master

pytestmark = [pytest.mark.slow, pytest.mark.redis]
FAST_LEADER = {"leader_ttl": 1.0, "leader_wait": 1.2, "report_interval": 0.2}


class Runs:
    """Task executions, awaited by count."""

    def __init__(self) -> None:
        self.payloads: list[Any] = []
        self._lot = trio.lowlevel.ParkingLot()
        self.finish_once = trio.Event()  # a unique task holds its lock until it finishes

    def registry(self) -> trunner.TaskRegistry:
        tasks = trunner.TaskRegistry()

        @tasks.task(max_retry=2, retry_backoff=0.05)
        async def record(payload: Any) -> None:
            self.payloads.append(payload)
            self._lot.unpark_all()

        @tasks.task(max_retry=2, retry_backoff=0.05)
        async def slow(payload: Any) -> None:
            await trio.sleep(0.005)
            self.payloads.append(payload)
            self._lot.unpark_all()

        @tasks.task(unique=True, unique_key=lambda p: p, unique_for=30)
        async def once(payload: Any) -> None:
            await self.finish_once.wait()
            self.payloads.append(("once", payload))
            self._lot.unpark_all()

        return tasks

    async def wait(self, count: int) -> None:
        while len(self.payloads) < count:
            await self._lot.park()


async def dispatch_retrying(runner: trunner.Runner, payload: int) -> None:
    """Dispatch as an application would during a failover: retry until Redis accepts."""
    while True:
        try:
            await runner.dispatch("record", payload)
        except trunner.BackendError:
            await trio.sleep(0.1)
        else:
            return


async def run_through_failover(
    url: str, group: str, failover: Callable[[], tuple[int, int]], what: str
) -> None:
    """Two runners work through a planned failover while tasks are dispatched, queued,
    running and delayed; nothing may be lost. Prints what was duplicated and how long
    dispatching failed."""
    runs = Runs()
    cfg = config(group, **FAST_LEADER, num_workers=4, reclaim_delay=2.0, reclaim_interval=0.2)
    refused: list[float] = []

    async def dispatch_all(runner: trunner.Runner, first: int) -> None:
        for i in range(first, 300, 2):
            while True:
                try:
                    await runner.dispatch("slow", i)
                    break
                except trunner.BackendError:
                    refused.append(trio.current_time())
                    await trio.sleep(0.05)
            await trio.sleep(0.005)

    async with (
        trunner.open_runner(url, cfg, runs.registry()) as a,
        trunner.open_runner(url, cfg, runs.registry()) as b,
    ):
        for i in range(10):  # due during the failover: the leader moves them after it
            await a.dispatch_delayed("record", f"d{i}", 0.4 + i * 0.1)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dispatch_all, a, 0)
            nursery.start_soon(dispatch_all, b, 1)
            await trio.sleep(0.3)  # tasks queued and running when the master changes
            started = trio.current_time()
            old, new = await trio.to_thread.run_sync(failover)
            switched = trio.current_time() - started
            assert old != new
        await runs.wait(310)

        async def drained() -> bool:
            counts = [
                await a.admin.pending_count(),
                await a.admin.queue_length(),
                await a.admin.delayed_count(),
            ]
            return counts == [0, 0, 0]

        await redis_state(drained, poll=0.1)
    expected = {*range(300), *(f"d{i}" for i in range(10))}
    done = Counter(runs.payloads)
    assert set(done) == expected, f"lost: {expected - set(done)}"
    duplicated = sum(n - 1 for n in done.values())
    window = refused[-1] - refused[0] if refused else 0.0
    print(
        f"{what} failover: 310 tasks, 0 lost, {duplicated} duplicated; failover took "
        f"{switched:.1f} s; {len(refused)} refused dispatches over {window:.1f} s"
    )


async def full_run(url: str, group: str) -> trunner.admin.GroupStats:
    """Dispatch, delayed, election, metrics and unique tasks on one deployment."""
    runs = Runs()
    cfg = config(
        group,
        **FAST_LEADER,
        stats_interval=0.5,
        janitor_interval=0.3,
        delete_on_ack=False,
        stream_retention=0.2,
    )
    async with (
        trunner.open_runner(url, cfg, runs.registry()) as a,
        trunner.open_runner(url, cfg, runs.registry()) as b,
    ):
        assert a.is_leader != b.is_leader, "one leader"
        await a.dispatch_many("record", range(50))
        await b.dispatch("record", 50)
        await a.dispatch_delayed("record", "delayed", 0.2)
        await a.dispatch("once", "k")
        with pytest.raises(trunner.TaskAlreadyDispatched):
            await b.dispatch("once", "k")
        runs.finish_once.set()
        await runs.wait(53)

        async def reported() -> bool:
            stats = await a.admin.group_stats()
            return stats.tasks.get("record") is not None and stats.instances == 2

        await redis_state(reported, poll=0.1)
        stats = await b.admin.group_stats()
        leader = a if a.is_leader else b
        # its commands (trimming, consumer clean-up) are allowed here too
        janitor = parts(leader).janitor
        await janitor.wait_rounds(janitor.rounds + 2)
        async with a.redis.pipeline() as pipe:  # the task handle on this deployment
            counter = f"trunner:{{{group}}}:app-counter"
            pipe.add("INCR", counter).add("INCR", counter)
        assert pipe.results == [1, 2]
    assert Counter(p for p in runs.payloads if not isinstance(p, tuple)) == Counter(
        [*range(51), "delayed"]
    )
    return stats


async def handles_run(url: str, group: str) -> None:
    """Task handles on one deployment: typed results, a failure, progress, status, and
    cancelling a queued task and one running on another instance (records, the where-map
    and the channels all live in the group's slot)."""
    tasks = trunner.TaskRegistry()
    running = trio.Event()

    @tasks.task(keep_result=60)
    async def double(n: int) -> int:
        return n * 2

    @tasks.task(keep_result=60)
    async def fail(_: None) -> None:
        raise KeyError("gone")

    @tasks.task(keep_result=60)
    async def block(_: None) -> None:
        await trunner.report_progress(0.5, "half")
        running.set()
        await trio.sleep_forever()

    cfg = config(group, **FAST_LEADER, num_workers=2)
    async with (
        trunner.open_runner(url, cfg, tasks) as a,
        trunner.open_client(url, group, tasks=tasks) as client,
    ):
        handles = [await client.dispatch(double, i) for i in range(20)]
        assert [await h.result() for h in handles] == [i * 2 for i in range(20)]
        with pytest.raises(trunner.TaskFailed) as info:
            await (await client.dispatch(fail, None)).result()
        assert info.value.error.type_name == "KeyError"  # type: ignore[attr-defined]
        blocked = await client.dispatch(block, None)
        await running.wait()
        status = await blocked.status()
        assert status.state is trunner.TaskState.RUNNING
        assert status.instance == a.consumer_name
        assert status.progress == 0.5
        later = await client.dispatch_delayed(double, 1, 3600)
        assert await later.cancel() is trunner.CancelOutcome.REMOVED
        assert await blocked.cancel(wait=True) is trunner.CancelOutcome.CANCELLING
        with pytest.raises(trunner.TaskCancelled):
            await blocked.result()
        assert a.statistics().cancelled == 1


# -- TLS --------------------------------------------------------------------------------------


async def test_tls_with_a_ca_and_a_client_certificate(tls: TlsServer, group: str) -> None:
    stats = await full_run(tls.url, group)
    assert stats.instances == 2


async def test_tls_without_the_ca_fails_clearly(tls: TlsServer, group: str) -> None:
    url = f"rediss://127.0.0.1:{tls.port}/0"
    cfg = config(group, connect_timeout=3.0)
    with pytest.raises(trunner.RedisUnavailable, match=r"rediss://127\.0\.0\.1"):
        async with trunner.open_runner(url, cfg, trunner.TaskRegistry()):
            pass


# -- ACL --------------------------------------------------------------------------------------

ACL_COMMANDS = (
    "+auth +client|setname +client|id +client|unblock +ping +select "
    "+script|load +evalsha +xgroup|create +xgroup|delconsumer +xadd +xreadgroup +xack +xdel "
    "+xautoclaim +xclaim +xpending +xlen +xrange +zadd +zcard +zrangebyscore +zrange +zrem "
    "+hset +hsetnx +hget +hdel +hexists +hgetall +hmget +hincrby +hincrbyfloat +set +get "
    "+del +incr +pexpire +type +publish +subscribe +config|get "
    "+xinfo|consumers +xinfo|groups +xtrim +exists +pttl +rename +time +zscore +hscan "
    "+sadd +scard +smembers +srem +sscan +llen +lpop +rpush +hlen +lrem +lpos +setbit +getbit "
    "+getrange +zscan"
)


async def test_an_acl_user_limited_to_its_groups_keys(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    group = f"acl-{uuid.uuid4().hex[:6]}"
    with redis.Redis.from_url(redis_server.url) as admin:
        admin.execute_command(
            "ACL", "SETUSER", f"worker-{group}", "on", ">secret", "resetkeys",
            f"~trunner:{{{group}}}:*", "resetchannels", f"&trunner:{{{group}}}:*", "-@all",
            *ACL_COMMANDS.split(),
        )  # fmt: skip
        admin.execute_command("ACL", "SETUSER", f"nobody-{group}", "on", ">secret", "-@all")
    url = f"redis://worker-{group}:secret@127.0.0.1:{redis_server.port}/0"
    await full_run(url, group)
    await handles_run(url, group)
    await workflows_run(url, group)
    refused = [r.getMessage() for r in caplog.records if "NOPERM" in r.getMessage()]
    refused += [r.getMessage() for r in caplog.records if "can't run" in r.getMessage()]
    assert not refused, "the documented permissions are not enough"
    denied = f"redis://nobody-{group}:secret@127.0.0.1:{redis_server.port}/0"
    with pytest.raises(trunner.TrunnerError, match=r"NOPERM|permission"):
        async with trunner.open_runner(denied, config(group), trunner.TaskRegistry()):
            pass
    other = f"other-{group}"  # the user's keys are those of its group only
    with pytest.raises(trunner.TrunnerError, match=r"NOPERM|permission|No permissions"):
        async with trunner.open_runner(url, config(other), trunner.TaskRegistry()):
            pass


# -- prefixes -------------------------------------------------------------------------------


async def test_prefixes_keep_environments_apart(redis_server: RedisServer, group: str) -> None:
    prod, staging = Runs(), Runs()
    url = redis_server.url
    async with (
        open_checked_runner(url, config(group, prefix="prod"), prod.registry()) as p,
        open_checked_runner(url, config(group, prefix="staging"), staging.registry()) as s,
    ):
        assert p.is_leader
        assert s.is_leader, "each environment has its own lease"
        await p.dispatch_many("record", range(10))
        await s.dispatch_many("record", range(100, 105))
        await prod.wait(10)
        await staging.wait(5)
        assert [i.id for i in await p.admin.instances()] == [p.consumer_name]
    assert sorted(prod.payloads) == list(range(10))
    assert sorted(staging.payloads) == list(range(100, 105))


# -- Cluster ------------------------------------------------------------------------------


@pytest.mark.deadline(90)
async def test_a_full_run_on_a_three_master_cluster(cluster: Cluster) -> None:
    masters: set[int] = set()
    while len(masters) < 2:  # six random names all on one master: 1 draw in 243
        groups = [f"c{i}-{uuid.uuid4().hex[:6]}" for i in range(6)]
        masters = {cluster.master_of(Keys("trunner", g).stream) for g in groups}
    for group in groups[:3]:
        stats = await full_run(cluster.url, group)
        assert stats.instances == 2


@pytest.mark.deadline(60)
async def test_priority_lanes_on_a_cluster(cluster: Cluster) -> None:
    """Every script that finds a lane's stream from an id or a message (lanes.lua) names
    a key of the queue's slot: on a Cluster, a lane task runs, retries, waits as a delayed
    task, is looked up and cancelled by its id, and its finished entries are trimmed."""
    group = f"ln-{uuid.uuid4().hex[:6]}"
    ran: list[tuple[str, Any]] = []
    failed: set[Any] = set()
    tasks = trunner.TaskRegistry()

    @tasks.task(max_retry=1, retry_backoff=0.01, priority="urgent")
    async def hurry(payload: Any) -> Any:
        ran.append((trunner.current_message().message_id, payload))
        if payload == "fails once" and payload not in failed:
            failed.add(payload)
            raise RuntimeError("once")
        return payload

    lanes = {"urgent": 3, "default": 1}
    async with trunner.open_client(cluster.url, group, tasks=tasks) as client:
        queued = await client.dispatch(hurry, "cancelled", keep_result=60)
        assert (await queued.status()).state is trunner.TaskState.QUEUED
        assert await queued.cancel() is trunner.CancelOutcome.REMOVED
    cfg = config(
        group, lanes=lanes, delete_on_ack=False, stream_retention=0.2, janitor_interval=0.3,
        **FAST_LEADER,
    )  # fmt: skip
    async with trunner.open_runner(cluster.url, cfg, tasks) as runner:
        done = await runner.dispatch(hurry, "kept", keep_result=60)
        await runner.dispatch(hurry, "fails once")
        await runner.dispatch_delayed(hurry, "delayed", 0.1)
        await runner.dispatch("hurry", "plain", priority="default")
        assert await done.result() == "kept"
        await redis_state(lambda: _ran(ran, 5))
        keys = Keys("trunner", group)
        stream = keys.lane_stream("urgent")

        async def trimmed() -> bool:
            return await runner.admin.lane_lengths() == {"urgent": 0, "default": 0}

        await redis_state(trimmed, poll=0.1)
        assert cluster.master_of(stream) == cluster.master_of(keys.stream), "one slot"
    lanes_of = sorted(i.rpartition("@")[2] if "@" in i else "default" for i, _ in ran)
    assert lanes_of == ["default", "urgent", "urgent", "urgent", "urgent"]
    assert sorted(p for _, p in ran) == ["delayed", "fails once", "fails once", "kept", "plain"]


@pytest.mark.deadline(60)
async def test_waiters_and_shared_cancels_on_a_cluster(cluster: Cluster) -> None:
    """The keys the limit and cancel scripts name from data (the group's index of
    waiters, a waiting list it names, another group's record and channel) are in the
    queue's slot: on a Cluster, a task waiting for a slot is looked up and cancelled, and
    a task cancelled through one group is cancelled for the other."""
    queue = f"wq-{uuid.uuid4().hex[:6]}"
    gates = {p: trio.Event() for p in "ab"}
    started: list[str] = []
    tasks = trunner.TaskRegistry()

    @tasks.task(concurrency=1, keep_result=60)
    async def one(payload: str) -> str:
        started.append(payload)
        await gates[payload].wait()
        return payload

    for group in ("other", "main"):
        async with trunner.open_runner(cluster.url, config(group, queue=queue), tasks):
            pass
    async with (
        trunner.open_client(cluster.url, queue, group="main") as main,
        trunner.open_client(cluster.url, queue, group="other") as other,
    ):
        queued = await main.dispatch(one, "q")
        assert await queued.cancel() is trunner.CancelOutcome.REMOVED
        assert (await other.handle(queued.id).status()).state is trunner.TaskState.CANCELLED
        async with trunner.open_runner(cluster.url, config("main", queue=queue), tasks) as r:
            await main.dispatch(one, "a")
            await redis_state(lambda: _ran(started, 1))
            b = await main.dispatch(one, "b")
            c = await main.dispatch(one, "c")

            async def both_wait() -> bool:
                return r.statistics().deferred_concurrency == 2

            await redis_state(both_wait)
            assert (await b.status()).state is trunner.TaskState.QUEUED
            assert await c.cancel() is trunner.CancelOutcome.REMOVED
            gates["a"].set()
            gates["b"].set()
            assert await b.result() == "b"
    assert started == ["a", "b"]


async def _ran(ran: list[Any], n: int) -> bool:
    await trio.lowlevel.checkpoint()
    return len(ran) >= n


async def test_task_handles_on_a_cluster(cluster: Cluster) -> None:
    await handles_run(cluster.url, f"h-{uuid.uuid4().hex[:6]}")


async def test_standalone_electors_and_a_client_on_a_cluster(cluster: Cluster) -> None:
    key = f"jobs-lease-{uuid.uuid4().hex[:6]}"  # no hash tag: the fence key follows it
    async with open_elector(cluster.url, key, ttl=1.0, wait=1.2) as a:
        assert a.is_leader
        async with open_elector(cluster.url, key, ttl=1.0, wait=1.2) as b:
            assert not b.is_leader
            assert await a.eval_fenced("return 1", [], []) == 1
            a.stop()
            with trio.fail_after(1.0):
                await b.wait_promoted()  # the release notification crosses the cluster
    group = f"cl-{uuid.uuid4().hex[:6]}"
    async with trunner.open_client(cluster.url, group) as client:
        await client.dispatch_many("record", range(3))
        assert await client.admin.queue_length() == 3


async def test_groups_are_found_on_every_master_of_a_cluster(cluster: Cluster) -> None:
    """Each master holds its own keys: discovery scans each (a SCAN sent to one node would
    find a third of the registries)."""
    prefix = f"d{uuid.uuid4().hex[:6]}"
    queues = [f"q{i}" for i in range(12)]
    registries = [Keys(prefix, q).groups for q in queues]
    masters = {cluster.master_of(key) for key in registries}
    assert len(masters) == 3, "twelve queues over three masters"  # 1 draw in 10**5 fails
    with cluster.client() as raw:
        for queue, key in zip(queues, registries, strict=True):
            raw.sadd(key, queue)
        raw.sadd(Keys(prefix, "events").groups, "audit", "mailer")
    found = await trunner.admin.discover_groups(cluster.url, prefix=prefix)
    assert found.complete
    assert found.groups == sorted(
        [trunner.admin.FoundGroup(q, q) for q in queues]
        + [
            trunner.admin.FoundGroup("events", "audit"),
            trunner.admin.FoundGroup("events", "mailer"),
        ]
    )


async def test_cluster_calls_wait_for_a_free_connection(cluster: Cluster) -> None:
    """The Cluster client raises at its pool limit; trunner's calls wait instead."""
    group = f"cc-{uuid.uuid4().hex[:6]}"
    runs = Runs()
    cfg = config(group, max_connections=2, num_workers=20)
    async with trunner.open_runner(cluster.url, cfg, runs.registry()) as runner:
        async with trio.open_nursery() as nursery:
            for i in range(100):
                nursery.start_soon(runner.dispatch, "record", i)
        await runs.wait(100)
    assert sorted(runs.payloads) == list(range(100))


@pytest.mark.deadline(120)
async def test_a_cluster_failover_during_a_run(cluster: Cluster) -> None:
    group = f"fo-{uuid.uuid4().hex[:6]}"
    stream = Keys("trunner", group).stream
    await run_through_failover(cluster.url, group, lambda: cluster.failover(stream), "cluster")


async def test_a_node_a_refresh_dropped_is_closed(cluster: Cluster) -> None:
    """A slot-map refresh that lists a node nowhere (a demoted master, for a moment, during a
    failover) takes it out of redis-py's topology. A command that chose that node before
    the refresh still reopens a connection on it, which redis-py would never close again:
    the transport closes it, after the command timeout, at the next refresh, and at close."""
    async with open_transport(
        cluster.url, client_name="t", max_connections=4, connect_timeout=5, command_timeout=2
    ) as transport:
        assert isinstance(transport, BridgedTransport)
        assert transport._cluster is not None
        client = transport._cluster
        manager = client.nodes_manager
        await transport.execute("SET", "k", "v")  # connections on the node serving k
        node = client.get_node_from_key("k")

        async def drop_and_reconnect(node: Any) -> Any:
            # The refresh that lists the node nowhere takes it out of the topology and, as
            # redis-py fills its startup nodes from the topology, out of those too.
            others = {name: n for name, n in manager.nodes_cache.items() if n is not node}
            manager.set_nodes(manager.nodes_cache, others, remove_old=True)
            manager.set_nodes(manager.startup_nodes, others, remove_old=True)
            assert node.name not in manager.nodes_cache
            assert node not in manager.startup_nodes.values()
            await asyncio.gather(*manager._background_tasks)  # its idle ones closed
            late = node.acquire_connection()  # the command that chose it before
            await late.connect()
            node.release(late)
            await manager.initialize()  # the node is back, as a new object
            assert manager.nodes_cache[node.name] is not node
            return late

        def connected(node: Any) -> list[Any]:
            return [c for c in node._connections if c.is_connected]

        first = await transport._call(lambda: drop_and_reconnect(node), "test")
        assert connected(node) == [first]
        # Past the command timeout, the next refresh closes it.
        await trio.sleep(2.1)
        await transport._call(manager.initialize, "test")
        await redis_state(lambda: _none_of(connected(node)))

        second_node = client.get_node_from_key("k")
        second = await transport._call(lambda: drop_and_reconnect(second_node), "test")
        assert connected(second_node) == [second]
    assert not connected(second_node)  # closed with the transport


async def _none_of(items: list[Any]) -> bool:
    await trio.lowlevel.checkpoint()
    return not items


# -- Sentinel -----------------------------------------------------------------------------


@pytest.mark.deadline(120)
async def test_a_sentinel_failover_during_a_run(group: str) -> None:
    with SentinelSet() as sentinels:
        await full_run(sentinels.url, f"{group}-warm")
        await handles_run(sentinels.url, f"{group}-handles")
        await run_through_failover(sentinels.url, group, sentinels.failover, "sentinel")


async def test_sentinel_commands_follow_the_sentinels_to_the_new_master() -> None:
    """A bare SENTINEL FAILOVER leaves the old master up, and a writable master until the
    sentinels reconfigure it about ten seconds later (it then discards what it took):
    once the sentinels name the new master, pooled commands, pipelines, blocking commands
    and stream readers all go to it, on connections opened before the failover too."""
    with SentinelSet() as sentinels:
        async with open_transport(
            sentinels.url, client_name="t", max_connections=4, connect_timeout=5
        ) as transport:
            assert isinstance(transport, BridgedTransport)
            await transport.execute("XGROUP", "CREATE", "s", "g", "0", "MKSTREAM")
            await transport.execute("SET", "k", "before")
            assert await transport.execute_blocking("BLPOP", "list", "0.01") is None
            reader = transport.open_reader("s")
            assert not await reader.xreadgroup("g", "c", "s", 10, 0.01)
            subscriber = transport.open_subscriber("news")
            await subscriber.subscribe()
            resubscribed, heard = trio.Event(), trio.Event()

            async def listen() -> None:
                while True:
                    try:
                        assert await subscriber.next_message() == b"after"
                        heard.set()
                        return
                    except trunner.BackendError:  # the subscription broke: subscribe again
                        await subscriber.subscribe()
                        resubscribed.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(listen)
                failover = lambda: sentinels.failover(coordinated=False)  # noqa: E731
                old, new = await trio.to_thread.run_sync(failover)
                await transport.wait_master(("127.0.0.1", new))
                # A subscription left on the old master would hear nothing published on the
                # new one until the sentinels demote the old master: it is broken instead.
                await resubscribed.wait()
                await transport.execute("PUBLISH", "news", "after")
                await heard.wait()
            await subscriber.aclose()

            await transport.execute("SET", "k", "after")
            await transport.pipeline([["RPUSH", "list", "x"], ["XADD", "s", "*", "f", "v"]])
            assert await transport.execute_blocking("BLPOP", "list", "1") == [b"list", b"x"]
            [[_, entries]] = await reader.xreadgroup("g", "c", "s", 10, 1.0)
            assert len(entries) == 1
            await reader.aclose()
            assert is_master(old), "the old master was demoted already: nothing was tested"
        for port, value in ((new, b"after"), (old, b"before")):
            with redis.Redis(port=port) as client:
                assert client.get("k") == value


async def workflows_run(url: str, group: str) -> None:
    """Workflows on one deployment: a chord and a chain, a step failing once, a cancel
    sweeping steps that wait for a slot, the janitor's page of workflows, and what the CLI
    and the dashboard read of them."""
    tasks = trunner.TaskRegistry()
    held = trio.Event()
    tried: list[int] = []

    @tasks.task(max_retry=1, retry_backoff=0)
    async def square(n: int) -> int:
        if n == 3 and not tried:
            tried.append(n)
            raise ValueError("once")
        return n * n

    @tasks.task()
    async def total(numbers: list[int]) -> int:
        return sum(numbers)

    @tasks.task(concurrency=1)
    async def one(_: int) -> None:
        held.set()
        await trio.sleep_forever()

    cfg = config(group, janitor_interval=0.2, **FAST_LEADER)
    async with trunner.open_runner(url, cfg, tasks) as runner:
        squares = wf.group(step(square, n) for n in range(5))
        assert await (await runner.dispatch(wf.chord(squares, step(total)))).result() == 30
        assert await (await runner.dispatch(wf.chain(step(square, 2), step(square)))).result() == 16
        waiting = await runner.dispatch(wf.group(step(one, n) for n in range(3)))
        await held.wait()
        assert [w.id for w in await runner.admin.workflows()] == [waiting.id]
        assert len((await runner.admin.workflow_steps(waiting.id)).states) == 3
        assert await waiting.cancel() is WorkflowState.CANCELLING
        with pytest.raises(WorkflowCancelled):
            await waiting.result()
        janitor = parts(runner).janitor  # its page of workflows is allowed too
        await janitor.wait_rounds(janitor.rounds + 2)


@pytest.mark.deadline(60)
async def test_a_workflows_cancel_takes_out_its_waiting_steps_on_a_cluster(
    cluster: Cluster,
) -> None:
    """cancel_steps.lua names what it reads and writes from data (a waiting list through
    the group's index of waiters, the records of the steps it takes out): all in the
    queue's slot, so a workflow's cancel sweeps its steps on a Cluster."""
    started: list[int] = []
    tasks = trunner.TaskRegistry()

    @tasks.task(concurrency=1)
    async def one(number: int) -> int:
        started.append(number)
        await trio.sleep_forever()
        raise AssertionError

    cfg = config(f"wc-{uuid.uuid4().hex[:6]}")
    async with trunner.open_runner(cluster.url, cfg, tasks) as runner:
        handle = await runner.dispatch(wf.group(step(one, n) for n in range(3)))

        async def two_wait() -> bool:
            await trio.lowlevel.checkpoint()
            return runner.statistics().deferred_concurrency == 2 and len(started) == 1

        await redis_state(two_wait)
        assert await handle.cancel() is WorkflowState.CANCELLING
        with pytest.raises(WorkflowCancelled):
            await handle.result()
        status = await handle.status()
    assert (status.cancelled, len(started)) == (3, 1)
    assert runner.statistics().cancelled == 1, "the waiting steps never reached the runner"
