"""The asyncio and synchronous clients (trunner/aio.py, trunner/sync.py) against a worker
process on a real redis-server: results awaited from many asyncio tasks and threads over
one subscription, a subscription dropped under a waiting handle, a cancel reaching a
running task, and stream entries byte for byte equal to the Trio client's.

Each asyncio scenario runs with ``asyncio.run`` in a thread of its own, beside the test's
Trio loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import trio

import trunner
import trunner.aio
import trunner.sync
from trunner import CancelOutcome, TaskState
from trunner.keys import Keys

from ..support.servers import RedisServer
from ..support.workers import Worker, read_log

T = Any


async def in_asyncio(scenario: Callable[[], Awaitable[T]]) -> T:
    """Run ``scenario()`` on a new asyncio loop in a thread; return what it returned."""
    return await trio.to_thread.run_sync(
        lambda: asyncio.run(scenario()),  # type: ignore[arg-type]
        abandon_on_cancel=True,
    )


def subscribers(url: str, channel: str) -> int:
    with redis.Redis.from_url(url) as raw:
        return int(raw.pubsub_numsub(channel)[0][1])


def connections(url: str, role: str) -> list[dict[str, Any]]:
    with redis.Redis.from_url(url) as raw:
        return [c for c in raw.client_list() if c["name"].startswith(role)]


@pytest.fixture
async def worker(
    redis_server: RedisServer, group: str, workers: list[Worker], tmp_path: Path
) -> Worker:
    """A worker process of the group (tests/processes/worker_process.py), ready; its
    tasks log to ``tmp_path / "log"``."""
    started = Worker(redis_server.url, group, tmp_path / "log", {})
    workers.append(started)
    await started.ready()
    return started


@pytest.mark.deadline(90)
async def test_many_asyncio_tasks_share_one_client_and_one_subscription(
    redis_server: RedisServer, group: str, keys: Keys, worker: Worker
) -> None:
    url = redis_server.url

    async def scenario() -> tuple[list[Any], int, int]:
        async with trunner.aio.Client(url, queue=group, max_connections=8) as client:

            async def request(i: int) -> Any:
                handle = await client.dispatch("kept", i)
                return await handle.result(timeout=60)

            results = await asyncio.gather(*(request(i) for i in range(300)))
            opened = connections(url, f"trunner-aio:{group}@")
            return results, subscribers(url, keys.done), len(opened)

    results, subscribed, opened = await in_asyncio(scenario)
    assert results == [{"pid": worker.process.pid, "payload": i} for i in range(300)]
    assert subscribed == 1  # one subscription for 300 waiters
    assert opened <= 8 + 1  # the pool, and the subscription
    assert connections(url, f"trunner-aio:{group}@") == []  # closed with the block


@pytest.mark.deadline(90)
async def test_a_dropped_subscription_under_a_waiting_asyncio_handle_still_delivers(
    redis_server: RedisServer, group: str, keys: Keys, workers: list[Worker], tmp_path: Path
) -> None:
    url = redis_server.url

    async def scenario() -> Any:
        async with trunner.aio.Client(url, queue=group) as client:
            handle = await client.dispatch("kept", "late")
            waiting = asyncio.create_task(handle.result())
            while subscribers(url, keys.done) != 1:  # noqa: ASYNC110 - state in Redis
                await asyncio.sleep(0.01)
            (subscription,) = [
                c for c in connections(url, f"trunner-aio:{group}@") if c["cmd"] == "subscribe"
            ]
            with redis.Redis.from_url(url) as raw:
                assert raw.client_kill_filter(_id=subscription["id"]) == 1
            worker = Worker(url, group, tmp_path / "log", {})  # only now can it finish
            workers.append(worker)
            assert worker.process.stdout is not None
            assert (await asyncio.to_thread(worker.process.stdout.readline)).strip() == "ready"
            return await waiting, worker.process.pid

    result, pid = await in_asyncio(scenario)
    assert result == {"pid": pid, "payload": "late"}


@pytest.mark.deadline(90)
async def test_a_cancel_from_asyncio_reaches_the_running_task(
    redis_server: RedisServer, group: str, worker: Worker, tmp_path: Path
) -> None:
    log = tmp_path / "log"

    async def scenario() -> tuple[CancelOutcome, TaskState, str]:
        async with trunner.aio.Client(redis_server.url, queue=group) as client:
            handle = await client.dispatch("block_kept", "job")
            # the body runs: RUNNING is recorded as the attempt starts, before the body
            # (a cancel in between ends the task without the body's "cancelled" line)
            while ("started", "job") not in [(e, p) for _, e, p in read_log(log)]:  # noqa: ASYNC110
                await asyncio.sleep(0.01)  # a worker process's log: no event to await
            outcome = await handle.cancel(wait=True)
            with pytest.raises(trunner.TaskCancelled):
                await handle.result()
            again = client.handle(str(handle))  # re-attached by its id
            return outcome, (await again.status()).state, str(handle)

    outcome, state, _ = await in_asyncio(scenario)
    assert outcome is CancelOutcome.CANCELLING
    assert state is TaskState.CANCELLED
    assert [p for _, e, p in read_log(log) if e == "cancelled"] == ["job"]


@pytest.mark.deadline(90)
async def test_a_sync_client_is_shared_by_many_threads(
    redis_server: RedisServer, group: str, keys: Keys, worker: Worker
) -> None:
    url = redis_server.url

    def scenario() -> tuple[list[Any], int]:
        with trunner.sync.Client(url, queue=group) as client:

            def request(i: int) -> Any:
                return client.dispatch("kept", i).result(timeout=60)

            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                results = list(pool.map(request, range(200)))
            paused = client.admin.pause()
            assert client.admin.inspect().paused_since is not None
            assert paused
            assert client.admin.resume()
            return results, subscribers(url, keys.done)

    results, subscribed = await trio.to_thread.run_sync(scenario, abandon_on_cancel=True)
    assert results == [{"pid": worker.process.pid, "payload": i} for i in range(200)]
    assert subscribed == 1


async def test_the_trio_asyncio_and_sync_clients_write_the_same_bytes(
    redis_server: RedisServer, group: str, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trunner._producer import dispatch  # noqa: PLC0415 - its clock, fixed here

    monkeypatch.setattr(dispatch, "time", types.SimpleNamespace(time=lambda: 1_700_000_000.5))
    url = redis_server.url
    options: dict[str, Any] = {"keep_result": 30, "timeout": 5, "headers": {"h": "v"}}
    payloads = [{"x": 1, "y": [1.5, "é"]}, None]

    async def with_trio() -> list[str]:
        async with trunner.open_client(url, group) as client:
            one = await client.dispatch("kept", payloads[0], **options)
            return [one, *await client.dispatch_many("kept", payloads, **options)]

    async def with_asyncio() -> list[str]:
        async with trunner.aio.Client(url, queue=group) as client:
            one = await client.dispatch("kept", payloads[0], **options)
            return [one, *await client.dispatch_many("kept", payloads, **options)]

    def with_sync() -> list[str]:
        with trunner.sync.Client(url, queue=group) as client:
            one = client.dispatch("kept", payloads[0], **options)
            return [one, *client.dispatch_many("kept", payloads, **options)]

    written = [
        await with_trio(),
        await in_asyncio(with_asyncio),
        await trio.to_thread.run_sync(with_sync),
    ]
    with redis.Redis.from_url(url) as raw:
        entries = {i.decode(): fields for i, fields in raw.xrange(keys.stream)}
    trio_side, asyncio_side, sync_side = ([entries[i] for i in ids] for ids in written)
    assert trio_side == asyncio_side == sync_side
    assert len({bytes(e[b"payload"]) for e in trio_side}) == 2  # two payloads, compared


async def test_an_asyncio_handle_waits_no_longer_than_its_timeout(
    redis_server: RedisServer, group: str
) -> None:
    async def scenario() -> trunner.ResultTimeout:
        async with trunner.aio.Client(redis_server.url, queue=group) as client:
            handle = await client.dispatch("kept", "nobody runs it")
            with pytest.raises(trunner.ResultTimeout) as raised:
                await handle.result(timeout=0.05)
            with pytest.raises(TimeoutError):  # as asyncio code catches its timeouts
                await handle.result(timeout=0)
            return raised.value

    error = await in_asyncio(scenario)
    assert error.state is TaskState.QUEUED


async def test_an_asyncio_client_opens_once_and_a_close_during_its_open_holds(
    redis_server: RedisServer, group: str
) -> None:
    """Two ``open`` at once connect once (the second is refused); an ``aclose`` while
    ``open`` connects leaves the client closed, with no connection left behind."""
    role = f"trunner-aio:{group}"

    async def scenario() -> tuple[str, int, str, int]:
        client = trunner.aio.Client(redis_server.url, group)
        first = asyncio.ensure_future(client.open())
        await asyncio.sleep(0)  # the first open is connecting
        with pytest.raises(RuntimeError, match="open already") as twice:
            await client.open()
        await first
        both = len(connections(redis_server.url, role))
        await client.aclose()
        second = asyncio.ensure_future(client.open())
        await asyncio.sleep(0)
        await client.aclose()
        with pytest.raises(trunner.errors.RunnerNotRunning, match="closed while") as closed:
            await second
        return str(twice.value), both, str(closed.value), len(connections(redis_server.url, role))

    twice, both, closed, left = await in_asyncio(scenario)
    assert "open already" in twice
    assert both >= 1
    assert "closed while it connected" in closed
    assert left == 0


async def test_a_sync_handle_outlives_its_clients_connections(
    redis_server: RedisServer, group: str, worker: Worker
) -> None:
    """A handle made before the client connected anew (after a close and an open here;
    after a fork, the same) waits over the client's connections of now, not the old ones."""

    def scenario() -> tuple[Any, Any]:
        client = trunner.sync.Client(redis_server.url, queue=group)
        handle = client.dispatch("kept", 7)
        client.close()
        client.open()  # a closed client refuses calls until opened again
        try:
            return handle.result(timeout=60), handle.status().state
        finally:
            client.close()

    result, state = await trio.to_thread.run_sync(scenario, abandon_on_cancel=True)
    assert result == {"pid": worker.process.pid, "payload": 7}
    assert state is TaskState.SUCCEEDED
