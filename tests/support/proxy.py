"""A TCP proxy in Trio, for tests that break the network between trunner and Redis.

::

    async with open_proxy(server.port) as proxy:
        ...  # connect to proxy.url instead of the server
        proxy.cut()  # every open connection is closed; new ones are closed at once
        proxy.restore()  # connections are forwarded again
        proxy.delay = 0.05  # replies (target -> client) are held back this long
        proxy.drop_replies(1)  # the next reply is lost: its connection closes instead
        proxy.blackhole()  # open connections stay open, and nothing crosses (a NAT forgot them)

Everything the proxy starts is closed when the block exits.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

__all__ = ["Proxy", "open_proxy"]

_CHUNK = 65536


class Proxy:
    """Forwards each accepted connection to ``127.0.0.1:target_port``. Use :func:`open_proxy`."""

    def __init__(self, listener: trio.SocketListener, target_port: int) -> None:
        self._listener = listener
        self.target_port = target_port
        self.port: int = listener.socket.getsockname()[1]
        #: Seconds each chunk of a reply (target -> client) is held back before it is sent.
        self.delay = 0.0
        self._scopes: set[trio.CancelScope] = set()
        self._cut = False
        #: How many connections were accepted, and how many of them were refused while cut.
        self.accepted = 0
        self.refused = 0
        self._drop = 0
        self._silent = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def is_cut(self) -> bool:
        return self._cut

    @property
    def open_connections(self) -> int:
        return len(self._scopes)

    def cut(self) -> None:
        """Close every open connection now, and close new ones at once until :meth:`restore`."""
        self._cut = True
        for scope in self._scopes:
            scope.cancel()

    def restore(self) -> None:
        """Forward new connections again."""
        self._cut = False

    def blackhole(self) -> None:
        """From now on, nothing crosses the open connections, in either direction, and
        none is closed: a NAT or a firewall that forgot them without a word."""
        self._silent = True

    def drop_replies(self, count: int) -> None:
        """Lose the next ``count`` replies: Redis ran the command, the client sees its
        connection close instead of the answer."""
        self._drop = count

    async def _serve(self, nursery: trio.Nursery) -> None:
        while True:
            stream = await self._listener.accept()
            self.accepted += 1
            if self._cut:
                self.refused += 1
                await stream.aclose()
                continue
            scope = trio.CancelScope()
            self._scopes.add(scope)
            nursery.start_soon(self._forward, stream, scope)

    async def _forward(self, client: trio.SocketStream, scope: trio.CancelScope) -> None:
        try:
            with scope:
                async with client:
                    try:
                        upstream = await trio.open_tcp_stream("127.0.0.1", self.target_port)
                    except OSError:
                        return  # nothing listens there: the client sees its connection close
                    async with upstream, trio.open_nursery() as nursery:
                        nursery.start_soon(self._pump, client, upstream, False, nursery)
                        nursery.start_soon(self._pump, upstream, client, True, nursery)
        finally:
            self._scopes.discard(scope)

    async def _pump(
        self,
        source: trio.SocketStream,
        sink: trio.SocketStream,
        reply: bool,
        nursery: trio.Nursery,
    ) -> None:
        """Copy ``source`` to ``sink``; when either side ends, end the whole connection."""
        try:
            while data := await source.receive_some(_CHUNK):
                if self._silent:
                    continue
                if reply and self.delay > 0:
                    await trio.sleep(self.delay)
                if reply and self._drop > 0:
                    self._drop -= 1
                    break
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def open_proxy(target_port: int) -> AsyncIterator[Proxy]:
    """A proxy on a free loopback port forwarding to ``127.0.0.1:target_port``."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    (listener,) = listeners
    async with listener, trio.open_nursery() as nursery:
        proxy = Proxy(listener, target_port)
        nursery.start_soon(proxy._serve, nursery)
        try:
            yield proxy
        finally:
            nursery.cancel_scope.cancel()
