"""The plumbing under :class:`~trunner._redis.transports.bridged.BridgedTransport`: redis-py's
asyncio clients built for an endpoint and run on a trio-asyncio loop, and the connections
of their own that its blocking readers and subscribers get."""

from __future__ import annotations

import asyncio
import contextlib
import math
import weakref
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import redis.asyncio
import redis.exceptions
import trio
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff

from ...errors import RedisUnavailable
from ..endpoints import Endpoint
from ..errors import map_exceptions, redis_py_errors
from .base import Arg, Dedicated, DedicatedConnections, Subscriber, Transport, UnblockableReader
from .dropped import DroppedNodes

__all__ = ["Bridge", "BridgedReader", "BridgedSubscriber", "deposed"]

T = TypeVar("T")

#: Replies the Cluster client parses for itself (topology and command table).
_CLUSTER_OWN = ("COMMAND", "CLUSTER", "READONLY", "READWRITE", "ASKING")


def deposed(pool: SentinelConnectionPool, conn: Any) -> bool:
    """Whether ``conn`` is open to another node than the master ``pool`` last heard of."""
    master = pool.master_address
    return bool(conn.is_connected) and master is not None and (conn.host, conn.port) != master


class MasterPool(SentinelConnectionPool):
    """redis-py's Sentinel pool, which never hands out a connection to a deposed master.

    redis-py asks the sentinels for the master only when it opens a connection, and keeps
    using the connections it has until their node refuses a write. Here a pooled
    connection to another node than ``master_address`` (kept current by
    :meth:`~trunner._redis.transports.bridged.BridgedTransport.follow_master`) is closed at
    checkout, and reopened to the master.
    """

    async def ensure_connection(self, connection: Any) -> None:
        if deposed(self, connection):
            await connection.disconnect()
        await super().ensure_connection(connection)


class Bridge(DedicatedConnections, Transport):
    """redis-py's asyncio client for ``endpoint``, run on the trio-asyncio loop ``loop``:
    its clients and pools, calls across the bridge, and dedicated connections."""

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
                connection_pool_class=MasterPool,
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
        #: Cluster: the nodes a topology refresh dropped, closed here (redis-py may not).
        self._dropped = None
        if self._cluster is not None:
            self._dropped = DroppedNodes(self._cluster, command_timeout)
        # Raw replies, parsed by the broker; the Cluster client keeps the parsers it needs
        # itself to learn the topology.
        callbacks = self._client.response_callbacks
        for name in list(callbacks):
            if self._cluster is None or not str(name).upper().startswith(_CLUSTER_OWN):
                del callbacks[name]
        # The Cluster client's per-node pools raise at their limit instead of waiting, so
        # pooled calls wait here: at most max_connections at once, hence per node.
        self._gate = self._semaphore(max_connections) if self._cluster is not None else None
        # Blocking commands: each on a connection of its own (a few kept idle, per node).
        self._blocking_idle: dict[str | None, list[Any]] = {}
        self._blocking_all: set[Any] = set()
        self._switches: Any = None  # Sentinel: the subscription to SWITCH_CHANNEL
        #: Sentinel: the subscriptions open, broken when their node is no longer master.
        self._subscribers: weakref.WeakSet[BridgedSubscriber] = weakref.WeakSet()
        self._master_lot = trio.lowlevel.ParkingLot()  # woken when the sentinels answered
        self.command_timeout = command_timeout
        self.connect_timeout = connect_timeout
        DedicatedConnections.__init__(self)

    def _semaphore(self, size: int) -> AbstractAsyncContextManager[Any]:
        """A semaphore of ``size`` on the loop the transport's callers run on (Trio)."""
        return trio.Semaphore(size)

    async def _sleep(self, seconds: float) -> None:
        """Sleep on the loop the transport's callers run on (Trio)."""
        await trio.sleep(seconds)

    async def _park_master(self) -> None:
        """Wait until the sentinels next answered (see :meth:`_unpark_master`)."""
        await self._master_lot.park()

    def _unpark_master(self) -> None:
        """Wake whoever waits in :meth:`_park_master`: the sentinels answered."""
        self._master_lot.unpark_all()

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
        return self._sentinel is not None and deposed(self._pool, conn)

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


class _Dedicated(Dedicated[Bridge]):
    """A redis-py connection of its own, made by the transport like a pooled one; used
    only inside the transport's asyncio loop."""

    #: What closing it is called in errors.
    _closing = "close"

    def __init__(self, transport: Bridge) -> None:
        super().__init__(transport)
        self._conn: Any = None

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        await self._transport._disconnect(conn, self._closing)


class BridgedReader(_Dedicated, UnblockableReader):
    _closing = "close reader"

    def __init__(self, transport: Bridge, key: str | None) -> None:
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


class BridgedSubscriber(_Dedicated, Subscriber):
    _closing = "close subscriber"

    def __init__(self, transport: Bridge, channel: str) -> None:
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
            transport = self._transport
            pinged = False
            while True:
                wait = transport.command_timeout if pinged else transport.subscription_ping
                reply = await conn.read_response(timeout=wait)  # None: nothing came
                if reply is None:
                    if pinged:
                        raise redis.exceptions.ConnectionError(
                            f"no answer to a PING within {wait} s: the connection is gone"
                        )
                    await conn.send_command("PING")  # heard nothing for a while: still there?
                    pinged = True
                    continue
                pinged = False
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
