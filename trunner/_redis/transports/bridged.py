"""redis-py's asyncio client under Trio: the transport for Cluster and Sentinel.

:class:`BridgedTransport` runs redis-py's asyncio client on a trio-asyncio loop that the
transport owns. Control traffic goes through a blocking connection pool; every blocking
reader gets a dedicated connection of its own, so a blocked XREADGROUP never starves a
lease renewal or an acknowledgement (on a shared pool, control commands would wait for a
connection behind the blocked reads). Every error of the client library is translated
into :mod:`trunner.errors` by the map of :mod:`trunner._redis.errors`.

On Sentinel, :meth:`BridgedTransport.follow_master` keeps the master's address current
(the sentinels' ``+switch-master`` announcements, and a periodic question), and no command
goes on a connection to another node: after a failover that leaves the old master up
(``SENTINEL FAILOVER``, a healed partition), that node goes on acknowledging writes as a
master until the sentinels reconfigure it, about ten seconds later, and then discards them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import weakref
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import redis.asyncio
import redis.exceptions
import trio
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff

from ..._util import LoopBackoff, logger
from ...errors import BackendError, RedisUnavailable
from ..errors import map_exceptions, redis_py_errors, redis_py_reply
from ..urls import Endpoint
from .base import (
    Arg,
    Dedicated,
    DedicatedConnections,
    Reader,
    Subscriber,
    Transport,
    UnblockableReader,
)
from .resp import library_args

__all__ = ["BridgedTransport"]

T = TypeVar("T")

#: Replies the Cluster client parses for itself (topology and command table).
_CLUSTER_OWN = ("COMMAND", "CLUSTER", "READONLY", "READWRITE", "ASKING")

#: Idle connections kept for blocking commands, per node (see ``execute_blocking``).
BLOCKING_IDLE = 2

#: Commands named by two words, which the Cluster client routes by both.
_TWO_WORD = frozenset({"SCRIPT", "CONFIG", "CLIENT", "CLUSTER"})

#: Sentinel: seconds between two questions for the master when no switch was announced
#: (an announcement is pub/sub, so it can be missed).
MASTER_CHECK = 2.0

#: The sentinels' channel announcing a new master: "<service> <old ip> <old port> <new ip>
#: <new port>".
SWITCH_CHANNEL = "+switch-master"


def _deposed(pool: SentinelConnectionPool, conn: Any) -> bool:
    """Whether ``conn`` is open to another node than the master ``pool`` last heard of."""
    master = pool.master_address
    return bool(conn.is_connected) and master is not None and (conn.host, conn.port) != master


class _MasterPool(SentinelConnectionPool):
    """redis-py's Sentinel pool, which never hands out a connection to a deposed master.

    redis-py asks the sentinels for the master only when it opens a connection, and keeps
    using the connections it has until their node refuses a write. Here a pooled
    connection to another node than ``master_address`` (kept current by
    :meth:`BridgedTransport.follow_master`) is closed at checkout, and reopened to the
    master.
    """

    async def ensure_connection(self, connection: Any) -> None:
        if _deposed(self, connection):
            await connection.disconnect()
        await super().ensure_connection(connection)


class BridgedTransport(DedicatedConnections, Transport):
    """redis-py's asyncio client, run on the trio-asyncio loop ``loop``."""

    def __init__(
        self,
        loop: Any,
        endpoint: Endpoint,
        *,
        description: str,
        client_name: str,
        max_connections: int,
        connect_timeout: float,
        command_timeout: float,
    ) -> None:
        self._loop = loop
        self.description = description
        common: dict[str, Any] = {
            # No per-read socket timeout: a blocking read may take as long as its BLOCK
            # (redis-py's default would fail, then resend, a read blocking for longer), and
            # a timer per read is costly under the bridge. Trio cancel scopes bound calls.
            "socket_timeout": None,
            "socket_connect_timeout": connect_timeout,
            "client_name": client_name,
            # RESP2 on every connection: the broker parses raw replies of one shape.
            "protocol": 2,
        }
        if not endpoint.url.lower().startswith("unix://"):
            common["socket_keepalive"] = True  # TCP only: unix sockets refuse the option
        # No automatic retries: a command whose reply was lost may have run (an XADD would
        # enqueue twice, a claim would leave entries unseen). Callers see the error and
        # decide; pooled connections closed by the server are replaced at checkout.
        no_retry = Retry(NoBackoff(), 0)
        self._cluster: redis.asyncio.RedisCluster | None = None
        self._sentinel: Sentinel | None = None
        self._client: Any
        if endpoint.kind == "cluster":
            self._cluster = self._client = redis.asyncio.RedisCluster(
                startup_nodes=[ClusterNode(host, port) for host, port in endpoint.nodes],
                max_connections=max_connections,
                **common,
                **endpoint.options,
            )
            self._pool: Any = None
            self._reader_pool: Any = None
        elif endpoint.kind == "sentinel":
            sentinel = Sentinel(
                list(endpoint.nodes),
                sentinel_kwargs={
                    "socket_connect_timeout": connect_timeout,
                    "protocol": 2,
                    **endpoint.sentinel_options,
                },
                retry=no_retry,
                **common,
                **endpoint.options,
            )
            assert endpoint.service is not None
            self._sentinel = sentinel
            self._client = sentinel.master_for(
                endpoint.service,
                redis_class=redis.asyncio.Redis,
                connection_pool_class=_MasterPool,
                max_connections=max_connections,
            )
            self._pool = self._reader_pool = self._client.connection_pool
        else:
            self._pool = redis.asyncio.BlockingConnectionPool.from_url(
                endpoint.url,
                max_connections=max_connections,
                timeout=None,
                retry=no_retry,
                **common,
            )
            self._client = redis.asyncio.Redis(connection_pool=self._pool)
            self._reader_pool = redis.asyncio.ConnectionPool.from_url(
                endpoint.url, retry=no_retry, **common
            )
        # Raw replies, parsed by the broker; the Cluster client keeps the parsers it needs
        # itself to learn the topology.
        callbacks = self._client.response_callbacks
        for name in list(callbacks):
            if self._cluster is None or not str(name).upper().startswith(_CLUSTER_OWN):
                del callbacks[name]
        # The Cluster client's per-node pools raise at their limit instead of waiting, so
        # pooled calls wait here: at most max_connections at once, hence per node.
        self._gate = trio.Semaphore(max_connections) if self._cluster is not None else None
        # Blocking commands: each on a connection of its own (a few kept idle, per node).
        self._blocking_idle: dict[str | None, list[Any]] = {}
        self._blocking_all: set[Any] = set()
        self._switches: Any = None  # Sentinel: the subscription to SWITCH_CHANNEL
        #: Sentinel: the subscriptions open, broken when their node is no longer master.
        self._subscribers: weakref.WeakSet[_BridgedSubscriber] = weakref.WeakSet()
        self._master_lot = trio.lowlevel.ParkingLot()  # woken when the sentinels answered
        self.command_timeout = command_timeout
        self.connect_timeout = connect_timeout
        DedicatedConnections.__init__(self)

    # -- Sentinel: following the master --------------------------------------------------------

    @property
    def follows_master(self) -> bool:
        """Whether :meth:`follow_master` has work to do (Sentinel)."""
        return self._sentinel is not None

    @property
    def master_address(self) -> tuple[str, int] | None:
        """Sentinel: the master's address as last heard from the sentinels."""
        address: tuple[str, int] | None = None
        if self._sentinel is not None:
            address = self._pool.master_address
        return address

    async def follow_master(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Sentinel: keep the master's address current until cancelled.

        The address is learned again at every ``+switch-master`` a sentinel announces, and
        every :data:`MASTER_CHECK` seconds in case an announcement was missed; pooled and
        dedicated connections to any other node are then closed before their next command
        (the pool closes its idle ones at once).
        """
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._follow_announcements)
            task_status.started()
            while True:
                await trio.sleep(MASTER_CHECK)
                await self._learn_master()

    async def wait_master(self, address: tuple[str, int]) -> None:
        """Sentinel: wait until the sentinels have named ``address`` the master."""
        while self.master_address != address:
            await self._master_lot.park()

    async def _learn_master(self) -> None:
        try:
            await self._call(self._pool.get_master_address, "SENTINEL MASTERS")
            await self._break_deposed_subscriptions()
        except BackendError as exc:  # the next question or announcement tries again
            logger.debug("asking the sentinels for the master failed: %s", exc)
        self._master_lot.unpark_all()

    async def _break_deposed_subscriptions(self) -> None:
        """Close each subscription open on a node that is no longer the master.

        Nothing published on the new master reaches it until the sentinels make the old
        one its replica (about ten seconds), and what was published meanwhile is never
        heard: its owner (the waiters of results, of cancellations, of a pause) hears the
        break instead, looks again at what it waits for, and subscribes again, to the
        master."""
        for subscriber in list(self._subscribers):
            conn = subscriber._conn
            if conn is not None and _deposed(self._pool, conn):

                async def close(conn: Any = conn) -> None:
                    await conn.disconnect(nowait=True)

                await self._call(close, "close subscriber")

    async def _follow_announcements(self) -> None:
        backoff = LoopBackoff()
        while True:
            try:
                if self._switches is None:
                    await self._subscribe_switches()  # one may have been missed meanwhile
                else:
                    await self._call(self._next_switch, f"SUBSCRIBE {SWITCH_CHANNEL}", math.inf)
            except BackendError as exc:
                logger.debug("listening to the sentinels failed: %s", exc)
                await trio.sleep(backoff.next_delay())
                continue
            backoff.reset()
            await self._learn_master()

    async def _subscribe_switches(self) -> None:
        """Subscribe to SWITCH_CHANNEL on the first sentinel that answers."""
        assert self._sentinel is not None
        failure: BackendError | None = None
        for sentinel in list(self._sentinel.sentinels):
            pool: Any = sentinel.connection_pool
            conn = pool.make_connection()

            async def subscribe(conn: Any = conn) -> None:
                try:
                    await conn.connect()
                    await conn.send_command("SUBSCRIBE", SWITCH_CHANNEL)
                    await conn.read_response(timeout=math.inf)  # the confirmation
                except BaseException:
                    await conn.disconnect(nowait=True)
                    raise

            try:
                await self._call(subscribe, f"SUBSCRIBE {SWITCH_CHANNEL}", self.connect_timeout)
            except BackendError as exc:
                failure = exc
                continue
            self._switches = conn
            return
        raise failure or RedisUnavailable("no sentinel to listen to")

    async def _next_switch(self) -> None:
        """Return at the next announcement of a switch of masters."""
        conn = self._switches
        try:
            while True:
                reply = await conn.read_response(timeout=math.inf)
                if isinstance(reply, list) and len(reply) == 3 and reply[0] == b"message":
                    return
        except BaseException:
            self._switches = None
            await conn.disconnect(nowait=True)
            raise

    # -- dedicated connections (blocking reads, subscriptions) -------------------------------

    def _connection(self, key: str | None) -> tuple[Any, str | None]:
        """A new, unconnected connection for a reader of ``key``: (connection, node name).

        On Cluster it goes to the node serving ``key``'s slot (any node without a key).
        """
        if self._cluster is None:
            return self._reader_pool.make_connection(), None
        cluster = self._cluster
        node = cluster.get_node_from_key(key) if key is not None else cluster.get_random_node()
        if node is None:
            raise RedisUnavailable(f"no Cluster node serves {key!r} now")
        return node.connection_class(**node.connection_kwargs), node.name

    def _deposed(self, conn: Any) -> bool:
        """Sentinel: whether dedicated ``conn`` is open to a node that is no longer master."""
        return self._sentinel is not None and _deposed(self._pool, conn)

    async def _after_error(self, error: BaseException) -> None:
        """A dedicated connection failed: on Cluster, refresh the slot map (a failover, a
        migration) so that the next connection goes to the right node. Not after a
        cancellation (``asyncio.CancelledError`` on this side of the bridge): a refresh
        cut off in turn at shutdown would drop the connected nodes it had made."""
        if self._cluster is not None and not isinstance(
            error, (trio.Cancelled, asyncio.CancelledError)
        ):
            with contextlib.suppress(Exception):
                await self._cluster.nodes_manager.initialize()

    async def _unblock(self, node: str | None, client_id: int) -> None:
        if self._cluster is None:
            await self.execute("CLIENT", "UNBLOCK", client_id)
            return
        target = self._cluster.get_node(node_name=node) if node else None

        async def go() -> Any:
            return await self._client.execute_command(
                "CLIENT", "UNBLOCK", client_id, target_nodes=target
            )

        await self._pooled(go, "CLIENT UNBLOCK")

    async def _disconnect(self, conn: Any, where: str) -> None:
        """Close a dedicated connection (if it was opened), shielded from cancellation."""
        if conn is None:
            await trio.lowlevel.checkpoint()
            return

        async def close() -> None:
            await conn.disconnect()

        with trio.CancelScope(shield=True):
            await self._call(close, where)

    # -- commands --------------------------------------------------------------------------

    async def _call(
        self,
        make: Callable[[], Coroutine[Any, Any, T]],
        where: str,
        limit: float | None = None,
    ) -> T:
        """Run the asyncio coroutine ``make()`` on our loop; translate its errors.

        A call without a reply within ``limit`` seconds (default: the command timeout) raises
        RedisUnavailable; its connection is dropped (a half-open TCP connection would
        otherwise block the caller for many minutes). Pass ``math.inf`` for none.
        """
        limit = self.command_timeout if limit is None else limit
        try:
            with trio.fail_after(limit), map_exceptions(redis_py_errors, where):
                result: T = await self._loop.run_aio_coroutine(make())
        except trio.TooSlowError:
            raise RedisUnavailable(f"{where}: no reply from Redis within {limit} s") from None
        return result

    async def _pooled(self, make: Callable[[], Coroutine[Any, Any, T]], where: str) -> T:
        if self._gate is None:
            return await self._call(make, where)
        async with self._gate:
            return await self._call(make, where)

    async def execute(self, *args: Arg) -> Any:
        args = tuple(library_args(args))
        if self._cluster is not None and str(args[0]).upper() in _TWO_WORD:
            # The Cluster client routes keyless commands by their full name ("SCRIPT LOAD").
            args = (f"{args[0]!s} {args[1]!s}", *args[2:])
        return await self._pooled(lambda: self._client.execute_command(*args), str(args[0]))

    async def execute_blocking(self, *args: Arg, key: str | None = None) -> Any:
        args = tuple(library_args(args))
        where = str(args[0])
        node = None
        if self._cluster is not None:
            target = self._cluster.get_node_from_key(key) if key is not None else None
            node = target.name if target is not None else None
        idle = self._blocking_idle.get(node)
        if idle:
            conn = idle.pop()
        else:
            conn, node = self._connection(key)
            self._blocking_all.add(conn)

        async def go() -> Any:
            try:
                if self._deposed(conn):
                    await conn.disconnect()
                await conn.connect()  # nothing to do when connected
                await conn.send_command(*args)
                return await conn.read_response()
            except redis.exceptions.ResponseError:
                raise  # an error reply: the connection is in step
            except BaseException as exc:
                # Cancelled or broken: whatever is in flight is unknown; drop it.
                self._blocking_all.discard(conn)
                await conn.disconnect(nowait=True)
                await self._after_error(exc)
                raise

        try:
            return await self._call(go, where, limit=math.inf)
        finally:
            if conn in self._blocking_all:  # in step: a reply, or an error reply
                kept = self._blocking_idle.setdefault(node, [])
                if len(kept) < BLOCKING_IDLE:
                    kept.append(conn)
                else:
                    self._blocking_all.discard(conn)
                    await self._disconnect(conn, "close")

    async def pipeline(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        commands = [library_args(command) for command in commands]  # nothing sent if bad

        async def go() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                for command in commands:
                    pipe.execute_command(*command)
                result: list[Any] = await pipe.execute(raise_on_error=False)
                return result

        if self._cluster is not None and any(c[0] in ("MULTI", "EXEC") for c in commands):
            raise BackendError("transactions are not supported on Redis Cluster by trunner")

        replies = await self._pooled(go, "pipeline")
        return [redis_py_reply(r, str(c[0])) for r, c in zip(replies, commands, strict=True)]

    async def scan_keys(
        self, match: str, *, count: int, max_calls: int
    ) -> tuple[list[bytes], bool]:
        if self._cluster is None:
            return await super().scan_keys(match, count=count, max_calls=max_calls)
        # On Cluster each primary holds its own keys, with its own cursor: scan each.
        found: list[bytes] = []
        complete = True
        for node in self._cluster.get_primaries():
            cursor = 0
            for _ in range(max_calls):

                async def go(node: Any = node, cursor: int = cursor) -> Any:
                    return await self._client.execute_command(
                        "SCAN", cursor, "MATCH", match, "COUNT", count, target_nodes=node
                    )

                reply = await self._pooled(go, "SCAN")
                cursor, keys = _scan_reply(reply, node.name)
                found.extend(keys)
                if cursor == 0:
                    break
            else:
                complete = False
        return found, complete

    def open_reader(self, key: str | None = None) -> Reader:
        return _BridgedReader(self, key)

    def open_subscriber(self, channel: str) -> Subscriber:
        subscriber = _BridgedSubscriber(self, channel)
        if self._sentinel is not None:
            self._subscribers.add(subscriber)
        return subscriber

    async def aclose(self) -> None:
        await self._close_dedicated()
        blocking, self._blocking_all = self._blocking_all, set()
        self._blocking_idle.clear()
        for conn in blocking:
            await self._disconnect(conn, "close")

        switches, self._switches = self._switches, None

        async def close() -> None:
            if switches is not None:
                await switches.disconnect(nowait=True)
            await self._client.aclose()
            for pool in {id(p): p for p in (self._pool, self._reader_pool) if p}.values():
                await pool.disconnect()
            if self._sentinel is not None:
                for client in self._sentinel.sentinels:
                    await client.aclose()

        await self._call(close, "close")


class _Dedicated(Dedicated[BridgedTransport]):
    """A redis-py connection of its own, made by the transport like a pooled one; used
    only inside the transport's asyncio loop."""

    #: What closing it is called in errors.
    _closing = "close"

    def __init__(self, transport: BridgedTransport) -> None:
        super().__init__(transport)
        self._conn: Any = None

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        await self._transport._disconnect(conn, self._closing)


class _BridgedReader(_Dedicated, UnblockableReader):
    _closing = "close reader"

    def __init__(self, transport: BridgedTransport, key: str | None) -> None:
        UnblockableReader.__init__(self)
        _Dedicated.__init__(self, transport)
        self._key = key
        self._node: str | None = None

    async def _connect(self) -> None:
        if self._conn is None:
            self._conn, self._node = self._transport._connection(self._key)
        conn = self._conn
        await conn.connect()
        try:
            await conn.send_command("CLIENT", "ID")
            self._client_id = int(await conn.read_response())
        except redis.exceptions.ResponseError:  # CLIENT not allowed (ACL): no fast interrupt
            self._client_id = -1

    async def _read(self, args: Sequence[Arg]) -> Any:
        try:
            if self._conn is not None and self._transport._deposed(self._conn):
                await self._conn.disconnect()
            if self._client_id is None or self._conn is None or not self._conn.is_connected:
                await self._connect()
            if self._interrupted:
                return None  # interrupted before it was sent
            await self._conn.send_command(*args)
            return await self._conn.read_response()
        except BaseException as exc:
            # Cancelled, or the connection broke, or the slot moved: whatever is in flight on
            # this socket is unknown, so drop the connection; the next read starts afresh.
            self._client_id = None
            conn, self._conn = self._conn, None
            if conn is not None:
                await conn.disconnect(nowait=True)
            await self._transport._after_error(exc)
            raise

    async def _send_read(self, args: Sequence[Arg], block: float) -> Any:
        limit = block + self._transport.command_timeout
        return await self._transport._call(lambda: self._read(args), "XREADGROUP", limit)

    async def _unblock(self, client_id: int) -> None:
        await self._transport._unblock(self._node, client_id)


class _BridgedSubscriber(_Dedicated, Subscriber):
    _closing = "close subscriber"

    def __init__(self, transport: BridgedTransport, channel: str) -> None:
        super().__init__(transport)
        self._channel = channel.encode()
        self._subscribed = False

    async def _subscribe(self) -> None:
        if self._conn is None:
            self._conn, _ = self._transport._connection(None)
        conn = self._conn
        try:
            await conn.connect()
            await conn.send_command("SUBSCRIBE", self._channel)
            await conn.read_response(timeout=math.inf)  # the confirmation
        except BaseException:
            await conn.disconnect(nowait=True)
            raise
        self._subscribed = True

    async def subscribe(self) -> None:
        await self._transport._call(self._subscribe, "SUBSCRIBE")

    async def _next(self) -> bytes:
        try:
            if self._subscribed and (self._conn is None or not self._conn.is_connected):
                # Closed between two messages (a master switch): what was published since
                # is not heard here, so the owner must learn of the break and look again.
                raise redis.exceptions.ConnectionError("the subscription was closed")
            if not self._subscribed:
                await self._subscribe()
            conn = self._conn
            while True:
                reply = await conn.read_response(timeout=math.inf)
                kind = reply[0] if isinstance(reply, list) and len(reply) == 3 else None
                if kind == b"message" and reply[1] == self._channel:
                    data: bytes = reply[2]
                    return data
        except BaseException:
            self._subscribed = False
            if self._conn is not None:
                await self._conn.disconnect(nowait=True)
            raise

    async def next_message(self) -> bytes:
        return await self._transport._call(self._next, "SUBSCRIBE", limit=math.inf)


def _scan_reply(reply: Any, node: str) -> tuple[int, list[bytes]]:
    """(cursor, keys) of a Cluster client's reply to a SCAN sent to ``node``: its result
    callback makes it ({node: cursor}, keys); a raw reply is [cursor, keys]."""
    first, keys = reply[0], reply[1]
    cursor = first[node] if isinstance(first, dict) else first
    return int(cursor), list(keys)
