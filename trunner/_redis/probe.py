"""A short-lived blocking look at one Redis server, from outside trunner.

The leak checks of ``trunner.testing`` must work from a synchronous ``__exit__``, where
trunner's asynchronous transports cannot run: redis-py's blocking client does the job (for
``memory://``, a fakeredis client on the in-process server). redis-py and fakeredis are
imported only when a probe is made.
"""

from __future__ import annotations

from typing import Any

from .errors import map_exceptions, redis_py_errors
from .transports import memory
from .transports.base import Arg
from .transports.resp import as_str

__all__ = ["Probe"]


class Probe:
    """A blocking client on the server of ``url``; each call waits ``timeout`` seconds at
    most. On a ``memory://`` server that was forgotten (or never used) there is nothing to
    look at: every query finds nothing. Close it with :meth:`close`."""

    def __init__(self, url: str, *, timeout: float) -> None:
        self.url = url
        self.memory = url.startswith("memory://")
        self._client: Any = None
        if self.memory:
            name = url[len("memory://") :]
            if memory.has_server(name):
                self._client = memory.server_client(name, raw=True)
            return
        import redis  # noqa: PLC0415 - a blocking client, for checks only

        self._client = redis.Redis.from_url(
            url, protocol=2, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        self._client.response_callbacks.clear()

    def execute(self, *args: Arg) -> Any:
        """One command's raw reply (None when there is no server to look at).

        Raises:
            RedisUnavailable, RedisCommandError: as a transport's ``execute`` would.
        """
        if self._client is None:
            return None
        with map_exceptions(redis_py_errors, f"{as_str(args[0])} (leak check)"):
            return self._client.execute_command(*args)

    def client_list(self) -> list[dict[str, str]]:
        """CLIENT LIST of a real server, one dict per connection (memory:// has none)."""
        if self.memory:
            return []
        reply = as_str(self.execute("CLIENT", "LIST") or b"")
        return [
            dict(item.split("=", 1) for item in line.split(" ") if "=" in item)
            for line in reply.splitlines()
            if line
        ]

    def pending_ids(self, stream: str, group: str, consumer: str, count: int) -> list[str]:
        """Ids of up to ``count`` entries pending for ``consumer`` (none when the group or
        its stream is gone)."""
        try:
            entries = self.execute("XPENDING", stream, group, "-", "+", count, consumer) or []
        except Exception as exc:
            if "NOGROUP" in str(exc) or "no such key" in str(exc):
                return []
            raise
        return [as_str(entry[0]) for entry in entries]

    def entry_fields(self, stream: str, message_id: str) -> list[bytes] | None:
        """The flat field list of one stream entry; None when it was deleted."""
        reply = self.execute("XRANGE", stream, message_id, message_id)
        return list(reply[0][1]) if reply else None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
