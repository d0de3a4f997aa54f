"""The Cluster nodes that a topology refresh of redis-py dropped, kept until they are closed.

When a refresh of the slot map lists a node nowhere (during a failover, a demoted master is
briefly the replica of no one), redis-py takes it out of its topology and closes its idle
connections. A command that chose that node before the refresh may still take a connection
from it afterwards and reconnect it; the node then holds an open socket that nothing
reaches any more: ``RedisCluster.aclose`` closes only the nodes it still knows, and the
socket stays open until the garbage collector finds it (seen on the failover test in about
one run out of three, three or four sockets at a time).

:class:`DroppedNodes` listens to redis-py's event after each refresh, notes the nodes that
left the topology since the one before, closes those that left longer ago than any command
may take, and closes the rest when the transport closes.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import redis.event

__all__ = ["DroppedNodes"]

#: The event redis-py sends after each refresh of a Cluster's topology (recent releases;
#: without it, nothing is noted and redis-py's own closing is all there is).
_REFRESHED: Any = getattr(redis.event, "AsyncAfterSlotsCacheRefreshEvent", None)


class DroppedNodes:
    """The nodes that redis-py's Cluster client ``cluster`` dropped from its topology.

    ``grace`` is how long a command may take (the transport's command timeout): a node
    dropped longer ago than that has no command left on it, and is closed at the next
    refresh.
    """

    def __init__(self, cluster: Any, grace: float) -> None:
        self._manager = cluster.nodes_manager
        self._grace = grace
        self._known: dict[int, Any] = {}  # id -> node, as of the last refresh
        self._dropped: list[tuple[float, Any]] = []  # (when, node)
        if _REFRESHED is not None:
            cluster._event_dispatcher.register_listeners({_REFRESHED: [self]})

    def _in_use(self) -> dict[int, Any]:
        manager = self._manager
        used = (*manager.nodes_cache.values(), *manager.startup_nodes.values())
        return {id(node): node for node in used}

    async def listen(self, event: object) -> None:
        """After a refresh: note the nodes it dropped; close those dropped long enough ago."""
        in_use = self._in_use()
        now = time.monotonic()
        self._dropped.extend((now, n) for key, n in self._known.items() if key not in in_use)
        self._known = in_use
        due = [node for when, node in self._dropped if now - when > self._grace]
        self._dropped = [(w, node) for w, node in self._dropped if now - w <= self._grace]
        for node in due:
            if id(node) not in in_use:  # not taken back meanwhile
                await _close(node)

    async def aclose(self) -> None:
        """Close every node dropped (call it as the client closes: closing a node twice
        does no harm)."""
        in_use = self._in_use()
        dropped = [node for _, node in self._dropped]
        dropped += [node for key, node in self._known.items() if key not in in_use]
        self._dropped, self._known = [], {}
        for node in dropped:
            await _close(node)


async def _close(node: Any) -> None:
    """Close ``node``'s connections; an error (an unreachable node) is of no matter here."""
    with contextlib.suppress(Exception):
        await node.disconnect()
