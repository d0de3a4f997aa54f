"""The dashboard served by hypercorn's Trio worker: the event stream sends the group's
snapshot at once, then each change.

The stream is read over a plain Trio socket (httpx's streaming leaves async generators
for the garbage collector, which this suite's warnings-as-errors refuse)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import httpx
import trio

from trunner.keys import Keys

from ..conftest import raw_client
from ..support.seeding import seed_dead
from .helpers import served


class EventReader:
    """Server-sent events of one GET, read from a socket."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._buffer = b""
        self.head = b""

    @classmethod
    async def open(cls, base: str, path: str) -> EventReader:
        where = urlsplit(base)
        stream = await trio.open_tcp_stream(where.hostname or "", where.port or 80)
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {where.netloc}\r\nAccept: text/event-stream\r\n\r\n"
        )
        await stream.send_all(request.encode())
        reader = cls(stream)
        reader.head = await reader._until(b"\r\n\r\n")
        return reader

    async def _until(self, mark: bytes) -> bytes:
        while mark not in self._buffer:
            data = await self._stream.receive_some(65536)
            if not data:
                raise AssertionError("the event stream ended")
            self._buffer += data
        found, _, self._buffer = self._buffer.partition(mark)
        return found

    async def snapshot(self) -> dict[str, Any]:
        """The next snapshot event's data (chunk-size lines are skipped)."""
        while True:
            line = await self._until(b"\n")
            if line.startswith(b"data: "):
                snapshot: dict[str, Any] = json.loads(line[len(b"data: ") :])
                return snapshot

    async def aclose(self) -> None:
        await self._stream.aclose()


async def test_the_event_stream_sends_a_snapshot_at_once_then_each_change(
    memory_url: str, group: str, keys: Keys
) -> None:
    raw = raw_client(memory_url)
    async with served(memory_url, [group]) as base:
        events = await EventReader.open(base, f"/group/{group}/events")
        try:
            assert b"content-type: text/event-stream" in events.head.lower()
            first = await events.snapshot()
            assert first["counts"]["dead"] == 0
            seed_dead(raw, keys, 2)
            while (await events.snapshot())["counts"]["dead"] != 2:
                pass
        finally:
            await events.aclose()
        async with httpx.AsyncClient(base_url=base) as http:
            page = await http.get(f"/group/{group}")
        assert page.status_code == 200
        assert page.headers["server"].startswith("hypercorn")
