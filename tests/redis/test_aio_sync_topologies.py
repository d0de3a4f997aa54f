"""The asyncio and synchronous clients (trunner/aio.py, trunner/sync.py) on every kind of
URL a runner serves beyond one plain server: TLS, ACL, Cluster and Sentinel, on real
servers the suite starts itself (tests/support/topologies.py), and a Sentinel failover
under a live asyncio client.

Each deployment runs a Trio runner in the test's process; the client under test runs in a
thread of its own (asyncio: ``asyncio.run`` there), dispatches, waits for results and
cancels a running task.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator

import pytest
import redis
import trio

import trunner
import trunner.aio
import trunner.sync
from trunner import CancelOutcome, TaskState
from trunner.errors import TaskCancelled
from trunner.keys import Keys

from ..conftest import config
from ..support.servers import RedisServer
from ..support.topologies import Cluster, SentinelSet, TlsServer, is_master
from .test_topologies import ACL_COMMANDS

pytestmark = [pytest.mark.slow, pytest.mark.redis]

KINDS = ["tls", "acl", "cluster", "sentinel"]


@pytest.fixture(scope="module")
def sentinels() -> Iterator[SentinelSet]:
    """A master, a replica and three sentinels, for the tests of this module."""
    with SentinelSet() as deployment:
        yield deployment


def acl_url(server: RedisServer, group: str) -> str:
    """The URL of a user allowed the documented commands on ``group``'s keys only."""
    user = f"worker-{group}"
    with redis.Redis.from_url(server.url) as admin:
        admin.execute_command(
            "ACL", "SETUSER", user, "on", ">secret", "resetkeys", f"~trunner:{{{group}}}:*",
            "resetchannels", f"&trunner:{{{group}}}:*", "-@all", *ACL_COMMANDS.split(),
        )  # fmt: skip
    return f"redis://{user}:secret@127.0.0.1:{server.port}/0"


@pytest.fixture(params=KINDS)
def deployment(request: pytest.FixtureRequest, group: str) -> str:
    """The URL of a deployment of each kind (module-scoped servers, the test's group)."""
    kind: str = request.param
    if kind == "tls":
        tls: TlsServer = request.getfixturevalue("tls")
        return tls.url
    if kind == "acl":
        return acl_url(request.getfixturevalue("redis_server"), group)
    if kind == "cluster":
        cluster: Cluster = request.getfixturevalue("cluster")
        return cluster.url
    sentinel_set: SentinelSet = request.getfixturevalue("sentinels")
    return sentinel_set.url


class Tasks:
    """A task that doubles its payload, and one that blocks until cancelled (it tells
    the client's thread when it runs)."""

    def __init__(self) -> None:
        self.running = threading.Event()
        self.registry = trunner.TaskRegistry()

        @self.registry.task(keep_result=60)
        async def double(n: int) -> int:
            return n * 2

        @self.registry.task(keep_result=60)
        async def block(_: None) -> None:
            self.running.set()
            await trio.sleep_forever()

        self.double, self.block = double, block


#: What a scenario saw: the results, the cancel's outcome, the cancelled task's state.
Seen = tuple[list[int], CancelOutcome, TaskState]


async def through_asyncio(url: str, group: str, tasks: Tasks) -> Seen:
    async with trunner.aio.Client(url, queue=group, tasks=tasks.registry) as client:
        handles = [await client.dispatch(tasks.double, i) for i in range(5)]
        handles += await client.dispatch_many(tasks.double, range(5, 10))
        results = [await handle.result() for handle in handles]
        blocked = await client.dispatch(tasks.block, None)
        await asyncio.to_thread(tasks.running.wait)
        outcome = await blocked.cancel(wait=True)
        with pytest.raises(TaskCancelled):
            await blocked.result()
        return results, outcome, (await client.handle(str(blocked)).status()).state


def through_sync(url: str, group: str, tasks: Tasks) -> Seen:
    with trunner.sync.Client(url, queue=group, tasks=tasks.registry) as client:
        handles = [client.dispatch(tasks.double, i) for i in range(5)]
        handles += client.dispatch_many(tasks.double, range(5, 10))
        results = [handle.result() for handle in handles]
        blocked = client.dispatch(tasks.block, None)
        tasks.running.wait()
        outcome = blocked.cancel(wait=True)
        with pytest.raises(TaskCancelled):
            blocked.result()
        return results, outcome, client.handle(str(blocked)).status().state


@pytest.mark.deadline(90)
@pytest.mark.parametrize("flavour", ["asyncio", "sync"])
async def test_dispatch_wait_and_cancel_on_every_kind_of_url(
    deployment: str, flavour: str, group: str
) -> None:
    tasks = Tasks()

    def scenario() -> Seen:
        if flavour == "asyncio":
            return asyncio.run(through_asyncio(deployment, group, tasks))
        return through_sync(deployment, group, tasks)

    async with trunner.open_runner(deployment, config(group, num_workers=2), tasks.registry):
        results, outcome, state = await trio.to_thread.run_sync(scenario, abandon_on_cancel=True)
    assert results == [i * 2 for i in range(10)]
    assert outcome is CancelOutcome.CANCELLING
    assert state is TaskState.CANCELLED


@pytest.mark.deadline(120)
async def test_an_asyncio_client_follows_a_sentinel_failover(sentinels: SentinelSet) -> None:
    """A bare SENTINEL FAILOVER leaves the old master a writable master for about ten
    seconds: once the sentinels name the new master, a live asyncio client's next
    dispatch goes to it, on a connection opened before the failover too."""
    group = f"sf-{uuid.uuid4().hex[:6]}"
    stream = Keys("trunner", group).stream
    url = sentinels.url
    tasks = Tasks()

    async def scenario() -> tuple[int, int, str, str]:
        async with trunner.aio.Client(url, queue=group, tasks=tasks.registry) as client:
            before = await client.dispatch(tasks.double, 1)
            transport = client._transport
            assert transport is not None
            old, new = await asyncio.to_thread(sentinels.failover, coordinated=False)
            await transport.wait_master(("127.0.0.1", new))
            after = await client.dispatch(tasks.double, 2)
            return old, new, str(before), str(after)

    old, new, before, after = await trio.to_thread.run_sync(
        lambda: asyncio.run(scenario()), abandon_on_cancel=True
    )
    with redis.Redis(port=new) as raw:
        on_new = {i.decode() for i, _ in raw.xrange(stream)}
    with redis.Redis(port=old) as raw:
        on_old = {i.decode() for i, _ in raw.xrange(stream)}
    assert is_master(old), "the old master was demoted already: nothing was tested"
    assert after in on_new
    assert after not in on_old
    assert before in on_new  # written before the failover, and replicated
