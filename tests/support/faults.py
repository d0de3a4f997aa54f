"""A fault-injecting wrapper with the interface of the Redis boundary (a ``Transport``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import trio

from trunner._redis import Arg, Reader, Script, Subscriber, Transport
from trunner.errors import RedisUnavailable

Match = Callable[[Sequence[Arg]], bool]


def script_call(script: Script) -> Match:
    """Matches EVALSHA calls of ``script``."""
    return lambda args: len(args) > 1 and args[0] == "EVALSHA" and args[1] == script.sha


class FaultyTransport(Transport):
    """Passes commands to ``inner`` unless told to fail or to hold them.

    - ``fail(match)``: matching commands raise RedisUnavailable (not sent).
    - ``hold(match)``: matching commands wait until ``release_held()`` (like a paused Redis).
    """

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.description = f"faulty {inner.description}"
        self.command_timeout = inner.command_timeout
        self._fail: Match | None = None
        self._hold: Match | None = None
        self._released = trio.Event()
        self.failed = 0
        self.held = 0

    def fail(self, match: Match | None) -> None:
        self._fail = match

    def hold(self, match: Match | None) -> None:
        self._hold = match
        self._released = trio.Event()

    def release_held(self) -> None:
        self._hold = None
        self._released.set()

    async def _gate(self, args: Sequence[Arg]) -> None:
        if self._fail is not None and self._fail(args):
            self.failed += 1
            await trio.lowlevel.checkpoint()
            raise RedisUnavailable(f"injected failure of {args[0]!r}")
        if self._hold is not None and self._hold(args):
            self.held += 1
            await self._released.wait()

    async def execute(self, *args: Arg) -> Any:
        await self._gate(args)
        return await self.inner.execute(*args)

    async def execute_blocking(self, *args: Arg, key: str | None = None) -> Any:
        await self._gate(args)
        return await self.inner.execute_blocking(*args, key=key)

    async def pipeline(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        for command in commands:
            await self._gate(command)
        return await self.inner.pipeline(commands)

    def open_reader(self, key: str | None = None) -> Reader:
        return self.inner.open_reader(key)

    def open_subscriber(self, channel: str) -> Subscriber:
        return self.inner.open_subscriber(channel)

    async def aclose(self) -> None:
        await self.inner.aclose()
