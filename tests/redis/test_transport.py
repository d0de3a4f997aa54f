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
