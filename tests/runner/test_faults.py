"""Redis unreachable, or going away under a running runner.

Crosses the transports (_redis/transports/native.py, and base.py, which reloads scripts
Redis forgot), the start of runner.py and client.py, and fetcher.py with release.py (what a
broken read delivered is released by the fetch loop itself).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
import trio

import trunner

from ..conftest import config, open_checked_runner, raw_client, redis_state
from ..support.proxy import open_proxy
from ..support.servers import RedisServer, free_port

TASK = "work"
#: How long one task runs: long enough that a fault lands while tasks are running.
TASK_SECONDS = 0.02


class Work:
    """A task that records each execution in-process; tests await what they expect."""

    def __init__(self) -> None:
        self.runs: list[int] = []
        self.first_run: dict[int, float] = {}
        self._lot = trio.lowlevel.ParkingLot()
        self.tasks = trunner.TaskRegistry()
        # No retry: a delivery lost with a broken connection never ran, so it must be given
        # back, not counted as an attempt (else the message would be dead-lettered unrun).
        self.tasks.register(trunner.Task(TASK, self.run))

    async def run(self, payload: int) -> None:
        self.runs.append(payload)
        self.first_run.setdefault(payload, trio.current_time())
        self._lot.unpark_all()
        await trio.sleep(TASK_SECONDS)

    @property
    def seen(self) -> set[int]:
        return set(self.runs)

    async def wait_for(self, done: Callable[[], bool]) -> None:
        while not done():
            await self._lot.park()

    async def wait_seen(self, payloads: range) -> None:
        await self.wait_for(lambda: self.seen >= set(payloads))

    @property
    def duplicates(self) -> int:
        return len(self.runs) - len(self.seen)


class ErrorRecord:
    """Errors a runner yielded through ``runner.errors()``, with the Trio time they arrived."""

    def __init__(self) -> None:
        self.errors: list[tuple[float, BaseException]] = []
        self.ended = False

    async def collect(self, runner: trunner.Runner) -> None:
        async for error in runner.errors():
            self.errors.append((trio.current_time(), error))
        self.ended = True

    def unavailable_between(self, start: float, end: float) -> int:
        return sum(
            1
            for at, error in self.errors
            if start <= at <= end and isinstance(error, trunner.RedisUnavailable)
        )

    def kinds(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for _, error in self.errors:
            counts[type(error).__name__] = counts.get(type(error).__name__, 0) + 1
        return counts


@asynccontextmanager
async def serving(
    url: str, cfg: trunner.RunnerConfig, work: Work, record: ErrorRecord
) -> AsyncIterator[trunner.Runner]:
    """A runner on ``url`` whose errors are collected until it has stopped."""
    async with (
        trio.open_nursery() as nursery,
        trunner.open_runner(url, cfg, work.tasks) as runner,
    ):
        nursery.start_soon(record.collect, runner)
        yield runner
    assert record.ended, "runner.errors() did not end after the runner stopped"


def _is_empty(producer: trunner.Client | trunner.Runner) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return (
            await producer.admin.queue_length() == 0 and await producer.admin.pending_count() == 0
        )

    return check


def _fault_config(group: str) -> trunner.RunnerConfig:
    # A reclaim delay far beyond the test's deadline: what a broken read left behind must be
    # released by the fetch loop itself, not found again by the idle-time reclaim.
    return config(group, reclaim_delay=120.0, reclaim_interval=0.05, connect_timeout=1.0)


def _flush_scripts(url: str) -> None:
    raw = raw_client(url)
    try:
        raw.script_flush()
    finally:
        raw.close()


# -- unreachable at start ---------------------------------------------------------------------


async def test_open_runner_on_a_dead_port_raises_redis_unavailable_in_time(group: str) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    cfg = config(group, connect_timeout=1.0)
    start = trio.current_time()
    with pytest.raises(trunner.RedisUnavailable) as info:
        async with trunner.open_runner(url, cfg, trunner.TaskRegistry()):
            pytest.fail("the runner started without Redis")
    assert trio.current_time() - start < cfg.connect_timeout + 1.0
    assert isinstance(info.value, ConnectionError)
    assert url in str(info.value)


async def test_open_runner_when_redis_accepts_but_never_answers_fails_after_connect_timeout(
    group: str,
) -> None:
    """A listener that accepts connections and never replies: the start-up bound applies."""
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    accepted: list[trio.SocketStream] = []

    async def accept_and_hold() -> None:
        while True:
            accepted.append(await listener.accept())

    cfg = config(group, connect_timeout=1.0)
    url = f"redis://127.0.0.1:{port}/0"
    async with listener, trio.open_nursery() as nursery:
        nursery.start_soon(accept_and_hold)
        start = trio.current_time()
        with pytest.raises(trunner.RedisUnavailable) as info:
            async with trunner.open_runner(url, cfg, trunner.TaskRegistry()):
                pytest.fail("the runner started without Redis")
        took = trio.current_time() - start
        nursery.cancel_scope.cancel()
    for stream in accepted:
        await stream.aclose()
    assert accepted, "the runner never connected"
    assert cfg.connect_timeout - 0.1 <= took < cfg.connect_timeout + 1.0
    assert url in str(info.value)


async def test_open_client_on_a_dead_port_raises_redis_unavailable() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    start = trio.current_time()
    with pytest.raises(trunner.RedisUnavailable) as info:
        async with trunner.open_client(url, "g", connect_timeout=1.0):
            pytest.fail("the client opened without Redis")
    assert trio.current_time() - start < 2.0
    assert isinstance(info.value, ConnectionError)
    assert url in str(info.value)


@pytest.mark.redis  # starts a redis-server of its own
async def test_redis_unavailable_from_dispatch_leaves_the_block_as_itself(group: str) -> None:
    """``except trunner.RedisUnavailable`` around the block catches a failed dispatch."""

    async def client_dispatch_while_down(server: RedisServer) -> None:
        async with trunner.open_client(server.url, group) as client:
            await client.dispatch(TASK, 1)
            await trio.to_thread.run_sync(server.stop)
            await client.dispatch(TASK, 2)

    async def runner_dispatch_while_down(server: RedisServer) -> None:
        async with trunner.open_runner(server.url, config(group), Work().tasks) as runner:
            await trio.to_thread.run_sync(server.stop)
            await runner.dispatch(TASK, 3)

    with RedisServer() as server:
        with pytest.raises(trunner.RedisUnavailable):
            await runner_dispatch_while_down(server)
        await trio.to_thread.run_sync(server.start)
        with pytest.raises(trunner.RedisUnavailable):
            await client_dispatch_while_down(server)


@pytest.mark.redis  # starts a redis-server of its own
async def test_scripts_are_reloaded_when_redis_forgot_them(group: str) -> None:
    """A restarted Redis (or SCRIPT FLUSH) has no scripts: every script call reloads its own."""
    work = Work()
    with RedisServer() as server:
        async with trunner.open_client(server.url, group) as client:
            # A fresh Redis: no runner has loaded anything yet.
            assert len(await client.dispatch_many(TASK, range(10))) == 10
            async with open_checked_runner(server.url, config(group), work.tasks) as runner:
                await work.wait_seen(range(10))
                await redis_state(_is_empty(client))
                await runner.dispatch(TASK, -1)  # through the runner's connection
                await work.wait_seen(range(-1, 10))
                await redis_state(_is_empty(client))
                await client.dispatch(TASK, 0)
                await trio.to_thread.run_sync(_flush_scripts, server.url)
                assert len(await client.dispatch_many(TASK, range(10, 20))) == 10
                await work.wait_seen(range(-1, 20))
                await redis_state(_is_empty(client))  # acknowledged: the ack script ran
                assert await runner.admin.delayed_count() == 0


# -- the network breaks -----------------------------------------------------------------------


async def test_the_proxy_forwards_cuts_and_restores(redis_server: RedisServer) -> None:
    async def ping(port: int) -> bytes:
        """PING through ``port``: the reply, or b"" if the connection was closed."""
        async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
            try:
                await stream.send_all(b"PING\r\n")
                return await stream.receive_some(64)
            except trio.BrokenResourceError:  # reset: closed with our PING unread
                return b""

    async with open_proxy(redis_server.port) as proxy:
        assert await ping(proxy.port) == b"+PONG\r\n"
        held = await trio.open_tcp_stream("127.0.0.1", proxy.port)
        async with held:
            await held.send_all(b"PING\r\n")
            assert await held.receive_some(64) == b"+PONG\r\n"
            assert proxy.open_connections == 1
            proxy.cut()
            assert await held.receive_some(64) == b""  # closed by the cut
            assert await ping(proxy.port) == b""  # refused while cut
            assert proxy.refused == 1
        proxy.restore()
        proxy.delay = 0.2
        start = trio.current_time()
        assert await ping(proxy.port) == b"+PONG\r\n"
        assert trio.current_time() - start >= 0.2
    assert proxy.open_connections == 0


@pytest.mark.deadline(60)
async def test_runner_keeps_serving_across_a_network_cut(
    redis_server: RedisServer, group: str
) -> None:
    tasks_total = 200
    work = Work()
    record = ErrorRecord()
    async with (
        trunner.open_client(redis_server.url, group) as client,
        open_proxy(redis_server.port) as proxy,
        serving(proxy.url, _fault_config(group), work, record) as runner,
    ):
        await client.dispatch_many(TASK, range(tasks_total))
        await work.wait_for(lambda: len(work.seen) >= 40)
        running_at_cut = runner.statistics().in_flight
        cut_at = trio.current_time()
        proxy.cut()
        await trio.sleep(1.5)  # the outage itself: nothing to wait for
        proxy.restore()
        restored_at = trio.current_time()
        seen_during_cut = {p for p in work.seen if work.first_run[p] < restored_at}
        await work.wait_seen(range(tasks_total))
        all_run_at = trio.current_time()
        await redis_state(_is_empty(client))
        assert await client.admin.dead_letter_count() == 0
        stats = runner.statistics()
    unavailable = record.unavailable_between(cut_at, restored_at)
    print(
        f"\ncut for {restored_at - cut_at:.2f} s with {running_at_cut} tasks running; "
        f"{len(seen_during_cut)} tasks had run when it was restored; all {tasks_total} ran "
        f"{all_run_at - restored_at:.2f} s after the restore; {work.duplicates} ran twice; "
        f"errors: {record.kinds()}; refused connections: {proxy.refused}; {stats}"
    )
    assert running_at_cut > 0
    assert len(seen_during_cut) < tasks_total, "the cut did not interrupt anything"
    assert work.seen == set(range(tasks_total))
    assert unavailable >= 1, f"no RedisUnavailable while cut: {record.errors}"
    assert all(isinstance(e, trunner.BackendError) for _, e in record.errors), record.errors


# -- Redis restarts ---------------------------------------------------------------------------


@pytest.mark.redis  # starts a redis-server of its own
@pytest.mark.deadline(60)
async def test_runner_survives_a_redis_restart(group: str) -> None:
    before, after = 100, 100
    work = Work()
    record = ErrorRecord()
    with RedisServer("--appendonly", "yes", "--appendfsync", "always") as server:
        raw = raw_client(server.url)
        settings = raw.config_get("append*")
        raw.close()
        assert (settings["appendonly"], settings["appendfsync"]) == ("yes", "always")
        async with (
            trunner.open_client(server.url, group, connect_timeout=1.0) as client,
            serving(server.url, _fault_config(group), work, record) as runner,
        ):
            await client.dispatch_many(TASK, range(before))
            await work.wait_for(lambda: len(work.seen) >= 20)
            running_at_stop = runner.statistics().in_flight
            await trio.to_thread.run_sync(server.stop)
            stopped_at = trio.current_time()

            # Dispatching while Redis is down fails at once, with RedisUnavailable itself.
            for producer in (client, runner):
                with trio.fail_after(2.0), pytest.raises(trunner.RedisUnavailable) as info:
                    await producer.dispatch(TASK, -1)
                assert type(info.value) is trunner.RedisUnavailable
                assert str(server.port) in str(info.value), str(info.value)

            await trio.sleep(0.5)  # the outage itself: nothing to wait for
            await trio.to_thread.run_sync(server.start)
            restarted_at = trio.current_time()
            seen_at_restart = len(work.seen)

            ids_after = await client.dispatch_many(TASK, range(before, before + after))
            assert len(ids_after) == after
            await work.wait_seen(range(before + after))
            all_run_at = trio.current_time()
            await redis_state(_is_empty(client))
            assert await client.admin.dead_letter_count() == 0
            stats = runner.statistics()
    first_after = min(work.first_run[p] for p in range(before, before + after))
    print(
        f"\nRedis down for {restarted_at - stopped_at:.2f} s with {running_at_stop} tasks "
        f"running and {seen_at_restart}/{before} run; first task dispatched after the restart "
        f"ran {first_after - restarted_at:.2f} s after it, all {before + after} ran "
        f"{all_run_at - restarted_at:.2f} s after it; {work.duplicates} ran twice; errors: "
        f"{record.kinds()}; {stats}"
    )
    assert running_at_stop > 0
    assert seen_at_restart < before, "the restart did not interrupt anything"
    assert work.seen == set(range(before + after))
    assert record.unavailable_between(stopped_at, restarted_at) >= 1
    assert all(isinstance(e, trunner.BackendError) for _, e in record.errors), record.errors


async def test_a_lost_reply_is_an_error_not_a_silent_second_enqueue(
    redis_server: RedisServer, group: str
) -> None:
    """Redis ran the XADD but the reply was lost: the caller is told, nothing is resent."""
    async with (
        open_proxy(redis_server.port) as proxy,
        trunner.open_client(proxy.url, group, max_connections=1) as client,
    ):
        await client.admin.queue_length()  # a connection is open: the next reply is the XADD's
        proxy.drop_replies(1)
        with pytest.raises(trunner.RedisUnavailable):
            await client.dispatch("t", 1)
        assert await client.admin.queue_length() == 1
        await client.dispatch_many("t", [2])  # loads the script; the connection is open
        proxy.drop_replies(1)
        with pytest.raises(trunner.RedisUnavailable):
            await client.dispatch_many("t", [3, 4])
        assert await client.admin.queue_length() == 4, "each command ran exactly once"


async def test_a_command_without_a_reply_times_out(redis_server: RedisServer, group: str) -> None:
    """A half-open connection (no reply, no error) fails the call after command_timeout."""
    async with (
        open_proxy(redis_server.port) as proxy,
        trunner.open_client(proxy.url, group, command_timeout=0.3) as client,
    ):
        proxy.delay = 5.0
        started = trio.current_time()
        with pytest.raises(trunner.RedisUnavailable, match=r"no reply from Redis within 0\.3"):
            await client.admin.queue_length()
        assert trio.current_time() - started < 1.0
        proxy.delay = 0.0
        assert await client.admin.queue_length() == 0, "the next call works on a new connection"
