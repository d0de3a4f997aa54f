"""The interface of the Redis boundary: what every transport promises, under cancellation too.

Three implementations share one Trio-facing interface:

* :class:`~trunner._redis.transports.native.NativeTransport` talks to one server over Trio
  sockets, with hiredis parsing the replies (``redis://``, ``rediss://``, ``unix://``).
* :class:`~trunner._redis.transports.bridged.BridgedTransport` runs redis-py's asyncio client
  on a trio-asyncio loop (Cluster, Sentinel, URL options only redis-py implements).
* :class:`~trunner._redis.transports.memory.MemoryTransport` runs fakeredis in-process.

Replies are raw, as RESP2 has them (bytes, int, None, lists of those): the broker parses
them. Errors are trunner's (:mod:`trunner.errors`, translated by :mod:`trunner._redis.errors`);
no exception of a client library leaves a transport.

One rule holds for every call that crosses: **a cancelled call may still have run on
Redis**. A command, once written to the socket, cannot be called back; a transport only
makes sure that its reply, when it comes, is read by nobody (the connection is dropped).

Arguments: str, bytes, int or float; a str is sent as UTF-8, with Python's
``surrogateescape`` so that text read from Redis by :func:`~.resp.as_str` (where bytes
that are not UTF-8 read as surrogate escapes) goes back as the same bytes. An argument of
another type raises TypeError, a str holding any other surrogate (a lone ``"\\ud800"``)
:class:`~trunner.errors.InvalidArgument`: on every transport, before anything is sent.

This module holds what the transports share, and imports no client library: a worker on
one server never loads redis-py nor fakeredis.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

import trio

from ..errors import ScriptNotLoaded
from ..scripts import Script
from .resp import Arg

__all__ = [
    "Arg",
    "Dedicated",
    "DedicatedConnections",
    "Reader",
    "Subscriber",
    "Transport",
    "UnblockableReader",
    "call_script",
]


#: How often, and how far apart, an interrupt repeats CLIENT UNBLOCK for a read.
UNBLOCK_TRIES = 10
UNBLOCK_RETRY = 0.05


class Reader(abc.ABC):
    """A connection of its own for the blocking reads of one fetcher.

    Blocked reads never hold a connection that control traffic needs: with blocked readers
    on a shared pool, a lease renewal or an acknowledgement would wait behind them, and
    could miss its deadline.
    """

    @abc.abstractmethod
    async def xreadgroup(
        self, group: str, consumer: str, stream: str | Sequence[str], count: int, block: float
    ) -> Any:
        """``XREADGROUP GROUP group consumer COUNT count BLOCK block STREAMS stream >``
        (with several streams, ``COUNT`` is per stream).

        Waits up to ``block`` seconds for new entries. Returns the raw reply: None or an
        empty list when none came, else ``[[stream, [[id, [field, value, ...]], ...]]]``.
        An interrupted read (:meth:`interrupt`) returns what Redis already delivered to
        it, or nothing.

        If cancelled, Redis may already have delivered entries to this read: they stay
        pending for ``consumer`` although nobody saw them (a "ghost delivery"), and must be
        left to be reclaimed. The connection is dropped; the next read opens another one.
        A read may also return normally after its scope was cancelled (the bridged
        transport cannot always stop redis-py in time), with entries: what a read returns
        must be handed on or released, never dropped.

        Raises:
            RedisUnavailable: Redis cannot be reached, the connection broke, or no reply
                came within ``block`` plus the transport's ``command_timeout`` (the
                connection is dropped: entries delivered to the read are ghosts).
            RedisCommandError: Redis refused the read (no such group: ``NOGROUP``).
        """

    @abc.abstractmethod
    async def interrupt(self) -> None:
        """Make the read in progress return at once (or, if none is, the next one).

        An interrupted read returns what Redis already delivered to it, or nothing: it is
        not cancelled, so nothing is delivered unseen and its connection stays in use. This
        may return before the interrupted read has returned.

        Raises:
            BackendError: asking Redis to end the read failed; the read then ends at its
                BLOCK time (or by cancellation).
        """

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Close the reader's connection. Closing again only checkpoints.

        The connection is closed even if this call is cancelled.
        """


class Subscriber(abc.ABC):
    """A connection of its own subscribed to one pub/sub channel.

    Pub/sub delivers at most once: a message published while no subscription is active
    (before :meth:`subscribe`, or while a lost connection is replaced) is missed. Use a
    message as a hint to look at Redis, never as the only copy of the data.
    """

    @abc.abstractmethod
    async def subscribe(self) -> None:
        """Connect and subscribe now (otherwise the first :meth:`next_message` does):
        every message published after this returns is received.

        If cancelled, the subscriber is left unsubscribed; the next call subscribes.

        Raises:
            RedisUnavailable: Redis cannot be reached, or did not confirm the subscription
                within the transport's ``command_timeout``.
            RedisCommandError: Redis refused the subscription.
        """

    @abc.abstractmethod
    async def next_message(self) -> bytes:
        """Wait, for as long as it takes, for the next message published on the channel;
        return its data. Subscribes first if the subscriber is not subscribed.

        If cancelled, a message arriving at that moment may be lost, and the connection
        may be dropped (the next call subscribes again).

        Raises:
            RedisUnavailable: the connection broke (the next call subscribes again).
            RedisCommandError: Redis refused the subscription.
        """

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Close the subscriber's connection. Closing again only checkpoints.

        The connection is closed even if this call is cancelled.
        """


class Transport(abc.ABC):
    """A Trio-facing Redis connection: commands, pipelines, scripts and readers.

    Commands share a pool of connections; readers and subscribers have connections of
    their own (:meth:`open_reader`, :meth:`open_subscriber`), and so does each blocking
    command (:meth:`execute_blocking`).
    """

    #: Where this transport connects to, with any password hidden.
    description: str
    #: Seconds a command may wait for its reply before it raises RedisUnavailable; a
    #: blocking read may take its BLOCK time plus this. ``memory://`` never waits: its
    #: server runs in the process.
    command_timeout: float
    #: Seconds a subscription may hear nothing before it asks Redis whether it is still
    #: there (a ``PING`` on its connection); with no answer within ``command_timeout``, the
    #: subscription counts as broken (``next_message`` raises RedisUnavailable, and its
    #: owner subscribes again). A connection that a NAT, a proxy or a server's idle timeout
    #: dropped without a word is found this way; TCP keepalive would take hours.
    subscription_ping: float = 30.0

    @abc.abstractmethod
    async def execute(self, *args: Arg) -> Any:
        """Run one command; return its raw reply.

        If cancelled, the command may or may not have run; the connection it used is
        dropped and never reused, so no later call can read its reply.

        Raises:
            RedisCommandError: Redis answered with an error; :class:`ScriptNotLoaded` for
                an unknown script (``NOSCRIPT``).
            RedisUnavailable: Redis cannot be reached, the connection broke (the command
                may have run), no reply came within ``command_timeout``, or Redis answered
                "not now" (``LOADING``, ``MASTERDOWN``, ``TRYAGAIN``, a refused login ...).
            TypeError: an argument is not str, bytes, int or float. Nothing was sent.
            InvalidArgument: a str argument cannot be encoded (see the module docs).
                Nothing was sent.
        """

    @abc.abstractmethod
    async def execute_blocking(self, *args: Arg, key: str | None = None) -> Any:
        """Run one command that may block (``BLPOP``, ``XREAD ... BLOCK``, ``WAIT`` ...) on
        a connection of its own, never one of the pool's: however long it blocks, it delays
        no other command. Return its raw reply.

        No ``command_timeout`` applies: the command's own timeout bounds it, and ``BLPOP
        key 0`` waits for as long as it takes (bound it with a Trio cancel scope). Each
        command running has its connection: they are not counted in ``max_connections``
        (a command never waits for another one to end, which would change what an
        ``XREAD ... $`` sees); the connection of a command that returned is kept for the
        next one (a few at most).
        ``key``: on Cluster, the command goes to the node serving ``key``'s slot (any node
        without one).

        If cancelled, the command may or may not have run (a ``BLPOP`` may have popped an
        element that nobody will see); its connection is dropped, so that its reply is
        read by nobody and it leaves nothing blocked on the server. ``memory://`` runs the
        command in a thread of its own, on a fakeredis client of its own, and ends it with
        ``CLIENT UNBLOCK`` when cancelled.

        Raises:
            As :meth:`execute` (``RedisUnavailable`` when the connection breaks).
        """

    @abc.abstractmethod
    async def pipeline(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        """Run ``commands`` in one round trip; return their replies, in order.

        Not a transaction: other clients' commands may run between them (send ``MULTI``
        ... ``EXEC`` for one; not on Cluster). A command that failed has its exception
        (as :meth:`execute` would raise it) in its place in the list, not raised; so do
        the failed commands inside the reply of an ``EXEC``.

        If cancelled, or if the round trip fails, any number of the commands may have run
        (Redis runs them in order, so those that ran are the first ones).

        Raises:
            RedisUnavailable: as for :meth:`execute`; the connection is dropped.
            BackendError: ``MULTI``/``EXEC`` on Cluster (nothing sent).
            TypeError, InvalidArgument: as for :meth:`execute`, for any of the commands
                (nothing sent).
        """

    async def checkpoint(self) -> None:
        """Let the event loop run other tasks (and deliver a cancellation): a call that
        had nothing to send still yields, as every call does."""
        await trio.lowlevel.checkpoint()

    async def evalsha(self, script: Script, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """Run a script by its SHA1, loading it first if Redis does not know it.

        A script runs atomically in Redis: wholly or not at all. If cancelled, it may or
        may not have run (and the script may have been loaded).

        Raises:
            RedisCommandError: the script failed (``error_reply`` or a Lua error).
            RedisUnavailable: as for :meth:`execute`.
        """
        return await call_script(self.execute, script, keys, args)

    async def scan_keys(
        self, match: str, *, count: int, max_calls: int
    ) -> tuple[list[bytes], bool]:
        """The names of the keys matching the glob ``match``: ``SCAN cursor MATCH match
        COUNT count``, at most ``max_calls`` calls (on Cluster: per primary, each node
        scanned for its own keys). Returns the names found, and whether every scan was
        complete (False: ``max_calls`` ran out first, and matching keys may be missing).

        Each call makes Redis look at about ``count`` keys, whatever matches: the cost is
        the keyspace's size, bounded by ``count * max_calls`` per node. A key renamed or
        written meanwhile may be missed (``SCAN``'s own guarantee).
        """
        found: list[bytes] = []
        cursor: bytes | str = "0"
        for _ in range(max_calls):
            reply = await self.execute("SCAN", cursor, "MATCH", match, "COUNT", count)
            cursor, keys = reply[0], reply[1]
            found.extend(keys)
            if cursor in (b"0", "0", 0):
                return found, True
        return found, False

    @abc.abstractmethod
    def open_reader(self, key: str | None = None) -> Reader:
        """A new reader with a connection of its own, opened on its first read, to the
        server of ``key`` (on Cluster: the node serving its slot). Close it with
        ``aclose``; closing the transport closes the readers still open."""

    @abc.abstractmethod
    def open_subscriber(self, channel: str) -> Subscriber:
        """A new subscriber of ``channel`` with a connection of its own, opened on use.
        Close it with ``aclose``; closing the transport closes those still open."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Close every connection: the pool's, and those of the readers and subscribers
        still open. The transport is not used again."""


async def call_script(
    execute: Callable[..., Awaitable[Any]],
    script: Script,
    keys: Sequence[str],
    args: Sequence[Arg],
) -> Any:
    """Run ``script`` through ``execute``: EVALSHA, and when Redis does not know the script
    (restarted, or SCRIPT FLUSH), SCRIPT LOAD then EVALSHA once more."""
    try:
        return await execute("EVALSHA", script.sha, len(keys), *keys, *args)
    except ScriptNotLoaded:
        pass
    await execute("SCRIPT", "LOAD", script.source)
    return await execute("EVALSHA", script.sha, len(keys), *keys, *args)


# -- what the implementations share ------------------------------------------------------------


class DedicatedConnections:
    """The dedicated connections a transport opened (readers, subscribers), closed with it."""

    def __init__(self) -> None:
        self._dedicated: set[Dedicated[Any]] = set()

    def _forget_dedicated(self, dedicated: Dedicated[Any]) -> None:
        self._dedicated.discard(dedicated)

    async def _close_dedicated(self) -> None:
        for dedicated in list(self._dedicated):
            await dedicated.aclose()


TransportT = TypeVar("TransportT", bound=DedicatedConnections)


class Dedicated(abc.ABC, Generic[TransportT]):
    """The lifecycle of a connection of its own (a reader's, a subscriber's): opened on
    use, dropped whenever anything goes wrong on it, given back to nobody, closed once.

    It is known to its transport from creation until it is closed, so that closing the
    transport closes it.
    """

    def __init__(self, transport: TransportT) -> None:
        self._transport = transport
        self._closed = False
        transport._dedicated.add(self)

    @abc.abstractmethod
    async def _drop(self) -> None:
        """Close the connection, if one is open, even if cancelled; the next use opens
        another one."""

    async def aclose(self) -> None:
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        self._transport._forget_dedicated(self)
        await self._drop()


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

    @abc.abstractmethod
    async def _send_read(self, args: Sequence[Arg], block: float) -> Any:
        """Send ``args`` on this reader's connection (connecting first) and return the
        reply, bounded by ``block`` plus the command timeout. If ``_interrupted`` is set
        once connected, return None without sending. On any error, drop the connection."""

    @abc.abstractmethod
    async def _unblock(self, client_id: int) -> None:
        """CLIENT UNBLOCK ``client_id``, on another connection."""

    async def xreadgroup(
        self, group: str, consumer: str, stream: str | Sequence[str], count: int, block: float
    ) -> Any:
        streams = [stream] if isinstance(stream, str) else list(stream)
        args: tuple[Arg, ...] = (
            "XREADGROUP", "GROUP", group, consumer, "COUNT", count,
            "BLOCK", max(1, int(block * 1000)), "STREAMS", *streams, *(">" for _ in streams),
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
        # read goes on, for UNBLOCK_TRIES * UNBLOCK_RETRY seconds at most.
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
