"""A blocking connection of its own for the stall watchdog's thread: while the event loop
is blocked, it keeps the reservations of the messages the runner holds fresh.

It runs in a plain thread, so it uses redis-py's blocking client, never the runner's
transport (whose connections belong to the blocked event loop). One connection, opened at
the first stall and kept; each call is bounded by ``timeout``. URLs it cannot serve
(``memory://``: the in-process server is blocked with the loop, and nothing outside the
process can reclaim from it; Cluster and Sentinel, not done yet) get no link:
:func:`open_stall_link` returns None.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from typing import Any

from .._util import logger
from .broker import Broker
from .scripts import SCRIPTS
from .urls import check_url

__all__ = ["StallLink", "open_stall_link"]


class StallLink:
    """Heartbeats over a blocking client of its own (see the module docs)."""

    def __init__(self, url: str, broker: Broker, timeout: float) -> None:
        self._url = url
        self._broker = broker
        self._timeout = timeout
        self._client: Any = None
        self._lock = threading.Lock()

    def _connect(self) -> Any:
        import redis  # noqa: PLC0415 - only a runner whose event loop stalled needs it

        timeout = self._timeout
        client = redis.Redis.from_url(
            self._url, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        # A URL's own socket_timeout would win over the arguments: a beat is bounded by
        # the watchdog's interval whatever the URL says.
        client.connection_pool.connection_kwargs.update(
            socket_timeout=timeout, socket_connect_timeout=timeout
        )
        return client

    def beat(self, consumer: str, ids: Sequence[str]) -> None:
        """Extend the reservations of ``consumer``'s ``ids`` that are still its own (the
        ``heartbeat`` script: a message another consumer took stays theirs). Raises what
        redis-py raises (the caller logs it and tries again at its next beat)."""
        import redis  # noqa: PLC0415 - see _connect

        script = SCRIPTS.heartbeat
        with self._lock:
            if self._client is None:
                self._client = self._connect()
            for stream, args, _suffix in self._broker.heartbeat_calls(consumer, ids):
                try:
                    self._client.evalsha(script.sha, 1, stream, *args)
                except redis.exceptions.NoScriptError:
                    self._client.eval(script.source, 1, stream, *args)

    def close(self) -> None:
        """Close the connection, if one was opened."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):  # closing only: nothing left to save
                client.close()


def open_stall_link(url: str, broker: Broker, timeout: float) -> StallLink | None:
    """A link for ``url``, or None where the watchdog cannot help (see the module docs)."""
    scheme = check_url(url)
    if scheme in ("redis", "rediss", "unix"):
        return StallLink(url, broker, timeout)
    if scheme != "memory":
        logger.warning(
            "the stall watchdog cannot keep reservations fresh on %s URLs: a task that "
            "blocks the event loop longer than about two thirds of reclaim_delay lets other "
            "instances reclaim this instance's messages (make blocking tasks plain 'def' "
            "tasks, which run in worker threads)",
            scheme,
        )
    return None
