"""A Trio-native transport for one Redis server: sockets in Trio, replies parsed by hiredis.

Commands do not cross into an asyncio loop: a command is packed into RESP bytes
(:func:`~trunner._redis.transports.resp.pack`), written with ``trio.SocketStream`` (or
``trio.SSLStream`` for TLS, or a Unix socket), and its reply parsed by hiredis, the parser
redis-py itself uses. One round trip costs a fifth of the CPU
of a bridged redis.asyncio call, and cancellation is plain Trio: a call cancelled while its
reply is in flight closes that connection, so no later caller can read the stale reply.

Used for ``redis://``, ``rediss://`` and ``unix://`` URLs whose options it knows
(:func:`~trunner._redis.urls.native_options`); Cluster, Sentinel and other options use the
bridged redis-py client (:class:`~trunner._redis.transports.bridged.BridgedTransport`). It
imports no redis-py module.
"""

from __future__ import annotations

import collections
import contextlib
import select
import socket
import ssl
from collections.abc import AsyncIterator, Sequence
from typing import Any

import hiredis
import trio

from ...errors import RedisUnavailable
from ..errors import hiredis_reply, map_exceptions, reply_error, socket_errors
from ..urls import ServerAddress
from .base import (
    Arg,
    Dedicated,
    DedicatedConnections,
    Subscriber,
    Transport,
    UnblockableReader,
)
from .resp import pack

__all__ = ["NativeTransport"]

#: What :meth:`Connection.read_within` returns when no reply came in time.
QUIET: Any = object()

_READ_SIZE = 65536
#: Idle connections kept for blocking commands (see ``Transport.execute_blocking``).
BLOCKING_IDLE = 2
#: Blocking commands that may run at once (each on a connection of its own).
MAX_BLOCKING = 10_000


class Connection:
    """One socket to Redis, with its reply parser."""

    def __init__(self, stream: trio.abc.Stream, sock: socket.socket | None) -> None:
        self._stream = stream
        self._sock = sock  # for the idle check
        self._parser = hiredis.Reader()
        self.broken = False

    @classmethod
    async def open(
        cls, address: ServerAddress, client_name: str, connect_limit: float
    ) -> Connection:
        """Connect, log in, select the database, name the connection: within the URL's
        ``socket_connect_timeout``, else ``connect_limit`` seconds."""
        limit = address.connect_timeout if address.connect_timeout is not None else connect_limit
        stream: trio.abc.Stream | None = None
        try:
            with trio.fail_after(limit):
                if address.path is not None:
                    unix = await trio.open_unix_socket(address.path)
                    stream, sock = unix, unix.socket
                else:
                    tcp = await trio.open_tcp_stream(address.host, address.port)
                    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                    stream, sock = tcp, tcp.socket
                    if address.ssl_context is not None:
                        tls = trio.SSLStream(tcp, address.ssl_context, server_hostname=address.host)
                        stream = tls
                        await tls.do_handshake()
                conn = cls(stream, sock)  # type: ignore[arg-type]
                await conn._hello(address, client_name)
        except trio.TooSlowError:
            if stream is not None:
                await trio.aclose_forcefully(stream)
            raise RedisUnavailable(f"connecting: no answer within {limit} s") from None
        except (OSError, ssl.SSLError, trio.BrokenResourceError) as exc:
            if stream is not None:
                await trio.aclose_forcefully(stream)
            reason = f"{type(exc).__name__}: {exc}"
            cause = exc.__cause__  # trio: "all attempts failed"; each attempt's error here
            if isinstance(cause, BaseExceptionGroup):
                reason += f" ({'; '.join(str(e) for e in cause.exceptions)})"
            elif cause is not None:
                reason += f" ({cause})"
            raise RedisUnavailable(f"connecting: {reason}") from None
        except BaseException:
            if stream is not None:
                await trio.aclose_forcefully(stream)
            raise
        return conn

    async def _hello(self, address: ServerAddress, client_name: str) -> None:
        commands: list[tuple[Arg, ...]] = []
        if address.password is not None:
            if address.username:
                commands.append(("AUTH", address.username, address.password))
            else:
                commands.append(("AUTH", address.password))
        commands.append(("CLIENT", "SETNAME", address.client_name or client_name))
        if address.db:
            commands.append(("SELECT", address.db))
        replies = await self.round_trip(commands)
        for command, reply in zip(commands, replies, strict=True):
            if isinstance(reply, hiredis.ReplyError):
                if command[0] == "AUTH":
                    raise RedisUnavailable(f"AUTH: {reply}")
                raise reply_error(str(reply), " ".join(str(c) for c in command[:2]))

    def idle_ok(self) -> bool:
        """A pooled connection is usable if the server has sent nothing since (no EOF)."""
        if self.broken or self._sock is None:
            return not self.broken
        try:
            readable, _, _ = select.select([self._sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    async def round_trip(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        """Send ``commands`` together and read their replies (error replies in place).

        Any failure or cancellation here leaves the connection broken: whatever was in
        flight on it is unknown.
        """
        data = b"".join(pack(command) for command in commands)  # TypeError: nothing sent
        self.broken = True
        with map_exceptions(socket_errors, chain=False):
            await self._stream.send_all(data)
            replies = [await self._read() for _ in commands]
        self.broken = False
        return replies

    async def read(self) -> Any:
        """Read one more reply (pub/sub); the connection is broken if this fails."""
        self.broken = True
        with map_exceptions(socket_errors, chain=False):
            reply = await self._read()
        self.broken = False
        return reply

    async def read_within(self, seconds: float) -> Any:
        """Read one more reply (pub/sub) if one comes within ``seconds``; else return
        :data:`QUIET`, the connection in step (a read cancelled between two replies loses
        nothing: what came in part stays in the parser). Broken if this fails."""
        self.broken = True
        with map_exceptions(socket_errors, chain=False), trio.move_on_after(seconds):
            reply = await self._read()
            self.broken = False
            return reply
        self.broken = False
        return QUIET

    async def send(self, command: Sequence[Arg]) -> None:
        """Send ``command`` without reading its reply (a PING on a subscription); broken
        if this fails."""
        data = pack(command)
        self.broken = True
        with map_exceptions(socket_errors, chain=False):
            await self._stream.send_all(data)
        self.broken = False

    async def _read(self) -> Any:
        parser = self._parser
        while True:
            reply = parser.gets()
            if reply is not False:
                return reply
            data = await self._stream.receive_some(_READ_SIZE)
            if not data:
                raise RedisUnavailable("Connection closed by server")
            parser.feed(data)  # type: ignore[arg-type]  # bytearray from TLS streams

    async def aclose(self) -> None:
        self.broken = True
        await trio.aclose_forcefully(self._stream)


class _Pool:
    """Up to ``size`` connections; a caller waits for a free one. At most ``max_idle`` idle
    connections are kept (default: all)."""

    def __init__(self, transport: NativeTransport, size: int, max_idle: int | None = None) -> None:
        self._transport = transport
        self._max_idle = size if max_idle is None else max_idle
        self._slots = trio.Semaphore(size)
        self._idle: collections.deque[Connection] = collections.deque()
        self._all: set[Connection] = set()
        self.closed = False

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        if self.closed:
            raise RedisUnavailable("the transport is closed")
        async with self._slots:
            conn = None
            while self._idle:
                candidate = self._idle.pop()
                if candidate.idle_ok():
                    conn = candidate
                    break
                await self._drop(candidate)
            if conn is None:
                conn = await self._transport._connect()
                self._all.add(conn)
            try:
                yield conn
            finally:
                if conn.broken or self.closed or len(self._idle) >= self._max_idle:
                    with trio.CancelScope(shield=True):
                        await self._drop(conn)
                else:
                    self._idle.append(conn)

    async def _drop(self, conn: Connection) -> None:
        self._all.discard(conn)
        await conn.aclose()

    async def aclose(self) -> None:
        self.closed = True
        for conn in list(self._all):
            await self._drop(conn)
        self._idle.clear()


class NativeTransport(DedicatedConnections, Transport):
    """Commands over Trio sockets to one Redis server."""

    def __init__(
        self,
        address: ServerAddress,
        *,
        description: str,
        client_name: str,
        max_connections: int,
        connect_timeout: float,
        command_timeout: float,
    ) -> None:
        self.address = address
        self.description = description
        self.client_name = client_name
        self.connect_timeout = connect_timeout
        self.command_timeout = command_timeout
        self._pool = _Pool(self, max_connections)
        #: Connections for blocking commands, apart from the pool: a few are kept idle.
        self._blocking = _Pool(self, MAX_BLOCKING, max_idle=BLOCKING_IDLE)
        DedicatedConnections.__init__(self)

    async def _connect(self) -> Connection:
        return await Connection.open(self.address, self.client_name, self.connect_timeout)

    async def _call(self, commands: Sequence[Sequence[Arg]], where: str) -> list[Any]:
        """The replies of ``commands``, sent on a pooled connection, within the command
        timeout (waiting for the connection included)."""
        try:
            with trio.fail_after(self.command_timeout):
                async with self._pool.connection() as conn:
                    return await conn.round_trip(commands)
        except trio.TooSlowError:
            raise RedisUnavailable(
                f"{where}: no reply from Redis within {self.command_timeout} s"
            ) from None
        except RedisUnavailable as exc:
            raise RedisUnavailable(f"{where}: {exc}") from None

    async def execute(self, *args: Arg) -> Any:
        where = str(args[0])
        [reply] = await self._call([args], where)
        if isinstance(reply, hiredis.ReplyError):
            raise reply_error(str(reply), where)
        return reply

    async def execute_blocking(self, *args: Arg, key: str | None = None) -> Any:
        where = str(args[0])
        pack(args)  # TypeError, InvalidArgument: before a connection is taken
        try:
            async with self._blocking.connection() as conn:
                [reply] = await conn.round_trip([args])  # as long as it blocks
        except RedisUnavailable as exc:
            raise RedisUnavailable(f"{where}: {exc}") from None
        if isinstance(reply, hiredis.ReplyError):
            raise reply_error(str(reply), where)
        return reply

    async def pipeline(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        if not commands:
            await trio.lowlevel.checkpoint()
            return []
        replies = await self._call(commands, "pipeline")
        return [
            hiredis_reply(reply, str(command[0]).upper())
            for reply, command in zip(replies, commands, strict=True)
        ]

    def open_reader(self, key: str | None = None) -> _NativeReader:
        return _NativeReader(self)  # one server: every key is on it

    def open_subscriber(self, channel: str) -> _NativeSubscriber:
        return _NativeSubscriber(self, channel)

    async def aclose(self) -> None:
        await self._close_dedicated()
        await self._blocking.aclose()
        await self._pool.aclose()


class _Dedicated(Dedicated[NativeTransport]):
    """A socket of its own, opened by the transport like a pooled one."""

    def __init__(self, transport: NativeTransport) -> None:
        super().__init__(transport)
        self._conn: Connection | None = None

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with trio.CancelScope(shield=True):
                await conn.aclose()


class _NativeReader(_Dedicated, UnblockableReader):
    def __init__(self, transport: NativeTransport) -> None:
        UnblockableReader.__init__(self)
        _Dedicated.__init__(self, transport)

    async def _send_read(self, args: Sequence[Arg], block: float) -> Any:
        transport = self._transport
        limit = block + transport.command_timeout
        try:
            with trio.fail_after(limit):
                if self._conn is None or self._conn.broken:
                    await self._connect()
                assert self._conn is not None
                if self._interrupted:
                    return None  # interrupted before it was sent
                [reply] = await self._conn.round_trip([args])
        except BaseException as exc:
            # Cancelled, timed out or broken: what is in flight on the socket is unknown,
            # so drop the connection; the next read starts afresh.
            await self._drop()
            if isinstance(exc, trio.TooSlowError):
                raise RedisUnavailable(
                    f"XREADGROUP: no reply from Redis within {limit} s"
                ) from None
            if isinstance(exc, RedisUnavailable):
                raise RedisUnavailable(f"XREADGROUP: {exc}") from None
            raise
        if isinstance(reply, hiredis.ReplyError):
            raise reply_error(str(reply), "XREADGROUP")
        return reply

    async def _connect(self) -> None:
        await self._drop()
        conn = await self._transport._connect()
        self._conn = conn
        [reply] = await conn.round_trip([("CLIENT", "ID")])
        # CLIENT ID not allowed (ACL): no fast interrupt, reads end by their BLOCK time.
        self._client_id = -1 if isinstance(reply, hiredis.ReplyError) else int(reply)

    async def _drop(self) -> None:
        self._client_id = None
        await super()._drop()

    async def _unblock(self, client_id: int) -> None:
        await self._transport.execute("CLIENT", "UNBLOCK", client_id)


class _NativeSubscriber(_Dedicated, Subscriber):
    def __init__(self, transport: NativeTransport, channel: str) -> None:
        super().__init__(transport)
        self._channel = channel.encode()

    async def subscribe(self) -> None:
        try:
            with trio.fail_after(self._transport.command_timeout):
                await self._subscribe()
        except trio.TooSlowError:
            await self._drop()
            raise RedisUnavailable("SUBSCRIBE: no reply from Redis in time") from None

    async def _subscribe(self) -> None:
        await self._drop()
        try:
            conn = await self._transport._connect()
            self._conn = conn
            [reply] = await conn.round_trip([("SUBSCRIBE", self._channel)])
        except BaseException:
            await self._drop()
            raise
        if isinstance(reply, hiredis.ReplyError):
            await self._drop()
            raise reply_error(str(reply), "SUBSCRIBE")

    async def next_message(self) -> bytes:
        try:
            if self._conn is None or self._conn.broken:
                await self._subscribe()
            conn = self._conn
            assert conn is not None
            transport = self._transport
            pinged = False
            while True:
                wait = transport.command_timeout if pinged else transport.subscription_ping
                reply = await conn.read_within(wait)
                if reply is QUIET:
                    if pinged:
                        raise RedisUnavailable(
                            f"no answer to a PING within {wait} s: the connection is gone"
                        )
                    await conn.send(("PING",))  # heard nothing for a while: still there?
                    pinged = True
                    continue
                pinged = False
                if (
                    isinstance(reply, list)
                    and len(reply) == 3
                    and reply[0] == b"message"
                    and reply[1] == self._channel
                ):
                    data: bytes = reply[2]
                    return data
        except BaseException as exc:
            await self._drop()
            if isinstance(exc, RedisUnavailable):
                raise RedisUnavailable(f"SUBSCRIBE: {exc}") from None
            raise
