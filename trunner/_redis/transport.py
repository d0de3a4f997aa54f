"""Transports: the only place where commands cross into a Redis client.

Three implementations share one Trio-facing interface:

* :class:`~trunner._redis.native.NativeTransport` talks to one server over Trio sockets,
  with hiredis parsing the replies (``redis://``, ``rediss://``, ``unix://``).
* :class:`~trunner._redis.bridged.AsyncioTransport` runs redis-py's asyncio client on a
  trio-asyncio loop (Cluster, Sentinel, URL options only redis-py implements).
* :class:`~trunner._redis.memory.MemoryTransport` runs fakeredis in-process.

This module holds what they share, and imports no client library: a worker on one server
never loads redis-py's asyncio client nor fakeredis.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

import trio

from .errors import ScriptNotLoaded
from .scripts import Script

__all__ = [
    "Arg",
    "Reader",
    "ScriptNotLoaded",
    "Subscriber",
    "Transport",
    "UnblockableReader",
]

Arg = str | bytes | int | float

#: How often, and how far apart, an interrupt repeats CLIENT UNBLOCK for a read.
UNBLOCK_TRIES = 10
UNBLOCK_RETRY = 0.05


class Reader(abc.ABC):
    """A connection reserved for blocking reads of one fetcher."""

    @abc.abstractmethod
    async def xreadgroup(
        self, group: str, consumer: str, stream: str, count: int, block: float
    ) -> Any:
        """XREADGROUP ... COUNT count BLOCK block*1000 STREAMS stream > (raw reply)."""

    @abc.abstractmethod
    async def interrupt(self) -> None:
        """Make the read in progress return at once (or, if none is, the next one).

        An interrupted read returns what Redis already delivered to it, or nothing.
        """

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Close the reader's connection."""


class UnblockableReader(Reader):
    """A reader whose interrupt ends a blocked read with CLIENT UNBLOCK.

    CLIENT UNBLOCK ends a blocked read as if its BLOCK time passed: no cancellation, so
    the connection stays clean and nothing is delivered unseen. Subclasses connect (and
    learn their ``CLIENT ID``), send and read.
    """

    def __init__(self) -> None:
        self._client_id: int | None = None  # -1: CLIENT ID refused (ACL), no fast interrupt
        self._reading = False
        self._read_done = trio.Event()
        self._interrupted = False
        self._closed = False

    @abc.abstractmethod
    async def _send_read(self, args: Sequence[Arg], block: float) -> Any:
        """Send ``args`` on this reader's connection (connecting first) and return the
        reply, bounded by ``block`` plus the command timeout. If ``_interrupted`` is set
        once connected, return None without sending. On any error, drop the connection."""

    @abc.abstractmethod
    async def _unblock(self, client_id: int) -> None:
        """CLIENT UNBLOCK ``client_id``, on another connection."""

    async def xreadgroup(
        self, group: str, consumer: str, stream: str, count: int, block: float
    ) -> Any:
        args: tuple[Arg, ...] = (
            "XREADGROUP", "GROUP", group, consumer, "COUNT", count,
            "BLOCK", max(1, int(block * 1000)), "STREAMS", stream, ">",
        )  # fmt: skip
        if self._interrupted:
            self._interrupted = False
            await trio.lowlevel.checkpoint()
            return None
        self._reading = True
        self._read_done = trio.Event()
        try:
            return await self._send_read(args, block)
        finally:
            self._reading = False
            self._interrupted = False  # an interrupt ends one read
            self._read_done.set()

    async def interrupt(self) -> None:
        # The UNBLOCK may reach Redis before the read does, so it is repeated while the
        # read goes on.
        self._interrupted = True
        for _ in range(UNBLOCK_TRIES):
            client_id = self._client_id
            if not self._reading:
                break
            if client_id is not None and client_id > 0:
                await self._unblock(client_id)
            with trio.move_on_after(UNBLOCK_RETRY):
                await self._read_done.wait()
        await trio.lowlevel.checkpoint()


class Subscriber(abc.ABC):
    """A connection subscribed to one pub/sub channel."""

    @abc.abstractmethod
    async def subscribe(self) -> None:
        """Connect and subscribe now (otherwise the first ``next_message`` does)."""

    @abc.abstractmethod
    async def next_message(self) -> bytes:
        """Wait for the next message published on the channel; return its data."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Close the subscriber's connection."""


class Transport(abc.ABC):
    """A Trio-facing Redis connection: commands, pipelines, scripts and readers."""

    #: Where this transport connects to, with any password hidden.
    description: str

    @abc.abstractmethod
    async def execute(self, *args: Arg) -> Any:
        """Run one command; return its raw reply."""

    @abc.abstractmethod
    async def pipeline(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        """Run commands in one round trip; each failed one is an exception in its place."""

    @abc.abstractmethod
    def open_reader(self, name: str, key: str | None = None) -> Reader:
        """A new reader with a connection of its own (connected on first use), to the
        server of ``key`` (on Cluster: the node serving its slot)."""

    @abc.abstractmethod
    def open_subscriber(self, channel: str) -> Subscriber:
        """A new subscriber of ``channel`` with a connection of its own (connected on use)."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Close every connection."""

    async def evalsha(self, script: Script, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """Run a script by its SHA1, loading it first if Redis does not know it."""
        try:
            return await self.execute("EVALSHA", script.sha, len(keys), *keys, *args)
        except ScriptNotLoaded:
            pass
        await self.execute("SCRIPT", "LOAD", script.source)
        return await self.execute("EVALSHA", script.sha, len(keys), *keys, *args)
