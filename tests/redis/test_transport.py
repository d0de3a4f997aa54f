"""What every transport promises (the interface in ``_redis/transports/base.py``), on all three.

Cancellation with replies in flight and interrupted reads are tested in test_bridge.py on
the two transports that have sockets.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing

import trunner
from trunner._redis import Transport, open_transport
from trunner.keys import Keys

from ..support.proxy import open_proxy
from ..support.servers import RedisServer


@pytest.fixture(params=["memory", "native", "bridged"])
async def transport(request: pytest.FixtureRequest) -> AsyncIterator[Transport]:
    if request.param == "memory":
        url: str = request.getfixturevalue("memory_url")
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        url = server.url
    async with open_transport(
        url,
        client_name="transport-test",
        max_connections=4,
        connect_timeout=5.0,
        command_timeout=3.0,
        bridge=request.param == "bridged",
    ) as opened:
        yield opened


async def test_every_transport_has_the_command_timeout_it_was_opened_with(
    transport: Transport,
) -> None:
    assert transport.command_timeout == 3.0


async def test_closing_a_reader_or_a_subscriber_again_only_checkpoints(
    transport: Transport, group: str, keys: Keys
) -> None:
    stream = keys.stream
    await transport.execute("XGROUP", "CREATE", stream, group, "0", "MKSTREAM")
    reader = transport.open_reader(stream)
    assert await reader.xreadgroup(group, "c", stream, 1, 0.01) in (None, [])
    subscriber = transport.open_subscriber(f"{group}:channel")
    await subscriber.subscribe()
    for dedicated in (reader, subscriber):
        await dedicated.aclose()
        with trio.testing.assert_checkpoints():
            await dedicated.aclose()
    await transport.execute("DEL", stream)


async def test_closing_the_transport_closes_the_readers_left_open(transport: Transport) -> None:
    reader = transport.open_reader()
    subscriber = transport.open_subscriber("left-open")
    await subscriber.subscribe()
    await transport.aclose()
    # Already closed by the transport: closing again only checkpoints.
    for dedicated in (reader, subscriber):
        with trio.testing.assert_checkpoints():
            await dedicated.aclose()


async def test_an_argument_of_another_type_is_refused_and_nothing_is_sent(
    transport: Transport,
) -> None:
    for bad in (None, True, object()):
        with pytest.raises((TypeError, trunner.BackendError), match=r"bool|type|must be"):
            await transport.execute("ECHO", bad)  # type: ignore[arg-type]
    assert await transport.execute("ECHO", "still in step") == b"still in step"


@pytest.mark.parametrize("bridge", [False, True], ids=["native", "bridged"])
async def test_a_subscription_a_nat_dropped_silently_is_found_broken(
    redis_server: RedisServer, group: str, bridge: bool
) -> None:
    """A subscription that hears nothing for ``subscription_ping`` seconds asks Redis
    whether it is there; when the network swallows the question too (a NAT or a proxy
    forgot the connection, without closing it), ``next_message`` raises RedisUnavailable
    after ``command_timeout`` instead of waiting forever, and its owner subscribes again.
    On a healthy connection the question changes nothing."""
    channel = f"{group}:news"
    async with (
        open_proxy(redis_server.port) as proxy,
        open_transport(
            proxy.url,
            client_name="keepalive-test",
            max_connections=4,
            connect_timeout=5.0,
            command_timeout=5.0,  # pongs on a busy machine: no race with a short one
            bridge=bridge,
        ) as transport,
        open_transport(
            redis_server.url, client_name="publisher", max_connections=1, connect_timeout=5.0
        ) as publisher,
    ):
        transport.subscription_ping = 0.05
        subscriber = transport.open_subscriber(channel)
        await subscriber.subscribe()
        heard: list[bytes] = []
        listening = trio.Event()

        async def listen() -> None:
            listening.set()
            heard.append(await subscriber.next_message())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(listen)
            await listening.wait()
            await trio.sleep(0.3)  # several pings answered meanwhile
            await publisher.execute("PUBLISH", channel, "still here")
        assert heard == [b"still here"]

        transport.command_timeout = 0.5  # how long an unanswered PING is waited for
        proxy.blackhole()
        with pytest.raises(trunner.RedisUnavailable, match="PING"):
            await subscriber.next_message()
        await subscriber.aclose()
