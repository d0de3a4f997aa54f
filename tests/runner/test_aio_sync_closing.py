"""The asyncio client (trunner/aio.py) at its close, on a real redis-server: a dispatch
under way when the client closes completes first, and a wait raises ``RunnerNotRunning``.

No worker runs: the tasks dispatched here only wait in the stream.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis
import trio

import trunner
import trunner.aio
from trunner.errors import RunnerNotRunning
from trunner.keys import Keys

from ..support.servers import RedisServer


class Held(trunner.Middleware):
    """Holds the dispatch of the payload ``"held"`` in its on_dispatch hook until
    ``released`` is set: a dispatch under way for as long as a test wants."""

    def __init__(self, in_thread: Callable[[Callable[[], bool]], Awaitable[bool]]) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()
        self._in_thread = in_thread

    async def on_dispatch(self, dispatch: trunner.DispatchInfo) -> None:
        if dispatch.payload == "held":
            self.entered.set()
            await self._in_thread(self.released.wait)


def subscribed(url: str, keys: Keys) -> bool:
    """Whether a client waits for finished tasks (its one subscription is up)."""
    with redis.Redis.from_url(url) as raw:
        return int(raw.pubsub_numsub(keys.done)[0][1]) == 1


def queued(url: str, keys: Keys) -> list[str]:
    """The payloads in the group's stream."""
    with redis.Redis.from_url(url) as raw:
        entries = raw.xrange(keys.stream)
    return [json.loads(fields[b"payload"])["payload"] for _, fields in entries]


def connections(url: str, role: str) -> list[str]:
    with redis.Redis.from_url(url) as raw:
        return [c["name"] for c in raw.client_list() if c["name"].startswith(role)]


@pytest.mark.deadline(60)
async def test_an_asyncio_client_closing_lets_a_dispatch_under_way_complete_first(
    redis_server: RedisServer, group: str, keys: Keys
) -> None:
    """The same on asyncio: the dispatch under way completes before ``aclose`` returns,
    over the connections it began on (none is opened again behind the close)."""
    url = redis_server.url

    async def scenario() -> tuple[Any, list[str], list[str]]:
        held = Held(asyncio.to_thread)
        client = trunner.aio.Client(url, queue=group, middleware=[held])
        await client.open()
        waited = await client.dispatch("kept", "waited")
        waiting = asyncio.ensure_future(waited.result())
        while not subscribed(url, keys):  # noqa: ASYNC110 - Redis state: no event to await
            await asyncio.sleep(0.01)
        dispatching = asyncio.ensure_future(client.dispatch("kept", "held"))
        await asyncio.to_thread(held.entered.wait)
        closing = asyncio.ensure_future(client.aclose())
        with pytest.raises(RunnerNotRunning):
            await waiting
        with pytest.raises(RunnerNotRunning, match="not open"):
            await client.dispatch("kept", "late")
        held.released.set()
        await closing
        assert dispatching.done()
        at_close = queued(url, keys)
        return dispatching.result(), at_close, connections(url, f"trunner-aio:{group}@")

    handle, at_close, left = await trio.to_thread.run_sync(
        lambda: asyncio.run(scenario()), abandon_on_cancel=True
    )
    assert isinstance(handle, trunner.TaskHandle)
    assert at_close == ["waited", "held"]
    assert left == []
