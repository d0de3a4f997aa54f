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

import math
from collections.abc import Sequence
from typing import Any

import redis.exceptions
import trio

from ..._util import LoopBackoff, logger
from ...errors import BackendError, RedisUnavailable
from ..errors import redis_py_reply
from .base import Arg, Reader, Subscriber
from .bridge import Bridge, BridgedReader, BridgedSubscriber, deposed
from .resp import library_args

__all__ = ["BridgedTransport"]

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


class BridgedTransport(Bridge):
    """redis-py's asyncio client, run on the trio-asyncio loop ``loop``."""

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
            await self._ask_for_master()

    async def wait_master(self, address: tuple[str, int]) -> None:
        """Sentinel: wait until the sentinels have named ``address`` the master."""
        while self.master_address != address:
            await self._park_master()

    async def _ask_for_master(self) -> None:
        """Ask the sentinels for the master every :data:`MASTER_CHECK` seconds, until
        cancelled (an announcement can be missed)."""
        while True:
            await self._sleep(MASTER_CHECK)
            await self._learn_master()

    async def _learn_master(self) -> None:
        try:
            await self._call(self._pool.get_master_address, "SENTINEL MASTERS")
            await self._break_deposed_subscriptions()
        except BackendError as exc:  # the next question or announcement tries again
            logger.debug("asking the sentinels for the master failed: %s", exc)
        self._unpark_master()

    async def _break_deposed_subscriptions(self) -> None:
        """Close each subscription open on a node that is no longer the master.

        Nothing published on the new master reaches it until the sentinels make the old
        one its replica (about ten seconds), and what was published meanwhile is never
        heard: its owner (the waiters of results, of cancellations, of a pause) hears the
        break instead, looks again at what it waits for, and subscribes again, to the
        master."""
        for subscriber in list(self._subscribers):
            conn = subscriber._conn
            if conn is not None and deposed(self._pool, conn):

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
                await self._sleep(backoff.next_delay())
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

    # -- commands --------------------------------------------------------------------------

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
        return BridgedReader(self, key)

    def open_subscriber(self, channel: str) -> Subscriber:
        subscriber = BridgedSubscriber(self, channel)
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
            if self._dropped is not None:
                await self._dropped.aclose()
            for pool in {id(p): p for p in (self._pool, self._reader_pool) if p}.values():
                await pool.disconnect()
            if self._sentinel is not None:
                for client in self._sentinel.sentinels:
                    await client.aclose()

        await self._call(close, "close")


def _scan_reply(reply: Any, node: str) -> tuple[int, list[bytes]]:
    """(cursor, keys) of a Cluster client's reply to a SCAN sent to ``node``: its result
    callback makes it ({node: cursor}, keys); a raw reply is [cursor, keys]."""
    first, keys = reply[0], reply[1]
    cursor = first[node] if isinstance(first, dict) else first
    return int(cursor), list(keys)
