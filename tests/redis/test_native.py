"""The Trio-socket transport for one server (trunner/_redis/transports/native.py): routing, pooling,
TLS, Unix sockets, errors.

How a URL is read, and which transport it gets, is tested in tests/unit/test_urls.py.
Cancellation with replies in flight and interrupted blocking reads are tested on both
transports in test_bridge.py; the runner's own tests all run on this transport.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis
import trio

import trunner
from trunner._redis import (
    BridgedTransport,
    NativeTransport,
    Transport,
    native_options,
    open_transport,
)
from trunner.keys import Keys

from ..conftest import Tally, config, open_checked_runner, run_python
from ..support.servers import RedisServer, free_port
from ..support.topologies import TlsServer


@asynccontextmanager
async def opened(url: str, **options: Any) -> AsyncIterator[Transport]:
    settings: dict[str, Any] = {"max_connections": 4, "connect_timeout": 5.0} | options
    async with open_transport(url, client_name="native-test", **settings) as transport:
        yield transport


def connections_received(client: redis.Redis) -> int:
    stats: dict[str, Any] = client.info("stats")
    return int(stats["total_connections_received"])


@pytest.fixture(scope="module")
def raw_server(redis_server: RedisServer) -> Iterator[redis.Redis]:
    with redis.Redis(port=redis_server.port) as client:
        yield client


# -- which transport a URL gets ----------------------------------------------------------------


async def test_open_transport_picks_the_transport(redis_server: RedisServer) -> None:
    async with opened(redis_server.url) as native:
        assert isinstance(native, NativeTransport)
        assert await native.execute("PING") in (b"PONG", "PONG")
        assert await native.execute("CLIENT", "GETNAME") == b"native-test"
    async with opened(f"{redis_server.url}?client_name=mine") as named:
        assert isinstance(named, NativeTransport)
        assert await named.execute("CLIENT", "GETNAME") == b"mine"
    async with opened(f"{redis_server.url}?retry_on_timeout=true") as fallback:
        assert isinstance(fallback, BridgedTransport)
        assert await fallback.execute("ECHO", "x") == b"x"
    async with opened(redis_server.url, bridge=True) as bridged:
        assert isinstance(bridged, BridgedTransport)


LOADED = """
import sys, trio, trunner

async def main():
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def noop(payload):
        pass

    config = trunner.RunnerConfig(consumer_group=sys.argv[2])
    async with trunner.open_runner(sys.argv[1], config, tasks) as runner:
        await runner.dispatch("noop", 1)
        await runner.redis.incr("trunner:{%s}:loaded" % sys.argv[2])

trio.run(main)
heavy = {"redis", "fakeredis", "lupa", "trio_asyncio", "croniter", "asyncio"}
heavy |= {"zoneinfo", "zipfile"}  # cron and scripts need none
heavy |= {"trio_parallel", "multiprocessing"}  # only process tasks need them
# datetime and uuid are not in the list: msgspec, the envelope's codec, imports them
# (msgspec with both: +1.1 MB RSS, measured by bench/envelope.py).
print(sorted({name.split(".")[0] for name in sys.modules} & heavy))
"""


def test_a_runner_on_one_server_loads_no_redis_py_module(
    redis_server: RedisServer, raw_server: redis.Redis, group: str
) -> None:
    """A worker process pays only for what it uses (RSS: redis-py and fakeredis are ~13 MB;
    zoneinfo, only cron needs it; zipfile, from importlib.resources, 0.3 MB)."""
    done = run_python("-c", LOADED, redis_server.url, group)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]"]
    assert raw_server.get(f"trunner:{{{group}}}:loaded") == b"1"


# -- connections -------------------------------------------------------------------------------


async def test_connections_are_pooled_and_reused(
    redis_server: RedisServer, raw_server: redis.Redis
) -> None:
    async with opened(redis_server.url) as transport:
        await transport.execute("PING")
        before = connections_received(raw_server)
        async with trio.open_nursery() as nursery:
            for index in range(20):
                for n in range(50):
                    nursery.start_soon(transport.execute, "ECHO", f"{index}-{n}")
        await transport.pipeline([("INCR", "native:{n}:count")] * 10)
        opened_meanwhile = connections_received(raw_server) - before
        raw_server.delete("native:{n}:count")
    # 1 000 concurrent commands with a pool of 4: at most 3 more connections.
    assert opened_meanwhile <= 3


async def test_tls_connections_are_reused(tls: TlsServer) -> None:
    with tls.client() as raw:
        async with opened(tls.url) as transport:
            assert isinstance(transport, NativeTransport)
            assert await transport.execute("ECHO", "first") == b"first"
            before = connections_received(raw)
            for n in range(100):
                assert await transport.execute("ECHO", str(n)) == str(n).encode()
            opened_meanwhile = connections_received(raw) - before
    assert opened_meanwhile == 0


async def test_a_connection_the_server_closed_while_idle_is_replaced(
    redis_server: RedisServer, raw_server: redis.Redis
) -> None:
    async with opened(redis_server.url) as transport:
        assert isinstance(transport, NativeTransport)
        client_id = await transport.execute("CLIENT", "ID")
        [idle] = transport._pool._idle
        assert raw_server.client_kill_filter(_id=client_id) == 1
        assert idle._sock is not None
        await trio.lowlevel.wait_readable(idle._sock)  # the server's FIN has arrived
        # The next command notices the closed connection before using it.
        assert await transport.execute("ECHO", "after") == b"after"
        assert await transport.execute("CLIENT", "ID") != client_id


async def test_a_command_with_no_reply_times_out_and_leaves_no_stale_reply(
    redis_server: RedisServer, raw_server: redis.Redis
) -> None:
    async with opened(redis_server.url, command_timeout=0.3) as transport:
        await transport.execute("PING")
        raw_server.client_pause(1000)
        try:
            with pytest.raises(trunner.RedisUnavailable, match="no reply from Redis within"):
                await transport.execute("ECHO", "paused")
        finally:
            raw_server.client_unpause()
        # The paused command's reply arrives on a connection that was closed: nobody reads it.
        for n in range(5):
            assert await transport.execute("ECHO", f"after-{n}") == f"after-{n}".encode()


@pytest.mark.redis  # starts a redis-server of its own
async def test_a_unix_socket_runs_tasks(group: str, keys: Keys, tally: Tally) -> None:
    with RedisServer() as server:
        socket_path = server.dir / "redis.sock"
        server.stop()
        server.extra_args += ["--unixsocket", str(socket_path), "--unixsocketperm", "700"]
        server.start()
        url = f"unix://{socket_path}?db=1"
        assert native_options(url) is not None
        tasks = trunner.TaskRegistry()

        @tasks.task()
        async def record(payload: int) -> None:
            tally.record(payload)

        async with open_checked_runner(url, config(group), tasks) as runner:
            await runner.dispatch_many("record", list(range(20)))
            await tally.wait(20)
        assert sorted(tally.payloads) == list(range(20))
        with redis.Redis(unix_socket_path=str(socket_path), db=1) as raw:
            assert raw.exists(keys.stream) == 1


# -- errors ------------------------------------------------------------------------------------


async def test_a_wrong_password_is_refused_at_start(
    redis_server: RedisServer, raw_server: redis.Redis, group: str
) -> None:
    user = f"native-{group}"
    raw_server.acl_setuser(user, enabled=True, passwords=["+right"], commands=["+@all"], keys="*")
    try:
        url = f"redis://{user}:not-the-s3cret@127.0.0.1:{redis_server.port}/0"
        refused = r"refused to log in: .*WRONGPASS"
        with pytest.raises(trunner.RedisUnavailable, match=refused) as info:
            async with trunner.open_runner(url, config(group), trunner.TaskRegistry()):
                pass
        assert "not-the-s3cret" not in str(info.value)  # the password is never printed
        right = f"redis://{user}:right@127.0.0.1:{redis_server.port}/0"
        async with opened(right) as transport:
            assert await transport.execute("ACL", "WHOAMI") == user.encode()
    finally:
        raw_server.acl_deluser(user)


async def test_connection_failures_say_why(redis_server: RedisServer, group: str) -> None:
    closed = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(trunner.RedisUnavailable, match="Connection refused"):
        async with trunner.open_client(closed, group, connect_timeout=2.0):
            pass
    plain_as_tls = f"rediss://127.0.0.1:{redis_server.port}/0"
    with pytest.raises(trunner.RedisUnavailable, match="is this port serving TLS"):
        async with trunner.open_client(plain_as_tls, group, connect_timeout=0.5):
            pass


async def test_error_replies_and_bad_arguments(redis_server: RedisServer) -> None:
    async with opened(redis_server.url) as transport:
        with pytest.raises(trunner.errors.RedisCommandError, match="unknown command"):
            await transport.execute("NO-SUCH-COMMAND")
        key = "native:{e}:list"
        replies = await transport.pipeline(
            [("DEL", key), ("RPUSH", key, "a"), ("INCR", key), ("LLEN", key)]
        )
        assert replies[:2] == [0, 1]
        assert isinstance(replies[2], trunner.errors.RedisCommandError)
        assert "WRONGTYPE" in str(replies[2])
        assert replies[3] == 1
        for bad in (None, True, object()):
            with pytest.raises(TypeError, match="a Redis argument"):
                await transport.execute("ECHO", bad)  # type: ignore[arg-type]
        # A refused argument sends nothing: the connection is still in step.
        assert await transport.execute("ECHO", "still") == b"still"
        await transport.execute("DEL", key)
