"""A tiny HTTP/1.1 server on Trio, for health checks and metrics of the worker command.

Bounded, so that a scanner or a stuck load balancer cannot starve the worker: it listens on
127.0.0.1 unless told otherwise, serves at most :data:`MAX_CONNECTIONS` connections at once
(it accepts no more until one ends: the others wait in the kernel's listen backlog and hold
no file descriptor of the process), and gives each one :data:`TIMEOUT` seconds in all to
send its request and take the answer.
"""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable, Mapping

import trio

from .._util import logger

__all__ = ["MAX_CONNECTIONS", "TIMEOUT", "Handler", "Response", "serve_http"]

#: (status, content type, body)
Response = tuple[int, str, bytes]
Handler = Callable[[], Awaitable[Response]]

_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}
_MAX_REQUEST = 8192
#: Connections served at once, per server.
MAX_CONNECTIONS = 16
#: Seconds one connection may take, from its acceptance to the end of the answer.
TIMEOUT = 5.0
#: accept() errors that mean "out of resources now": wait a little and accept again.
_ACCEPT_AGAIN = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})


async def _respond(stream: trio.abc.Stream, routes: Mapping[str, Handler]) -> None:
    request = b""
    while b"\r\n\r\n" not in request and len(request) < _MAX_REQUEST:
        chunk = await stream.receive_some(_MAX_REQUEST)
        if not chunk:
            break
        request += chunk
    line = request.split(b"\r\n", 1)[0].decode("latin-1").split()
    if len(line) < 2:
        return
    method, path = line[0], line[1].split("?", 1)[0]
    handler = routes.get(path)
    if handler is None:
        status, kind, body = 404, "text/plain", b"not found\n"
    elif method not in ("GET", "HEAD"):
        status, kind, body = 405, "text/plain", b"method not allowed\n"
    else:
        status, kind, body = await handler()
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n"
        f"Content-Type: {kind}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode("latin-1")
    await stream.send_all(head if method == "HEAD" else head + body)


async def serve_http(
    routes: Mapping[str, Handler],
    port: int,
    host: str = "127.0.0.1",
    *,
    max_connections: int = MAX_CONNECTIONS,
    connection_time: float = TIMEOUT,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``routes`` (path -> handler) on ``host``:``port`` until cancelled; report the
    bound port. At most ``max_connections`` at once, each for ``connection_time`` seconds
    at most.
    """
    slots = trio.Semaphore(max_connections)

    async def handle(stream: trio.SocketStream) -> None:
        try:
            async with stream:
                with trio.move_on_after(connection_time):
                    await _respond(stream, routes)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            slots.release()

    async def accept(listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        async with listener:
            while True:
                await slots.acquire()  # no slot: leave connections in the backlog
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    slots.release()
                    if exc.errno not in _ACCEPT_AGAIN:
                        raise
                    logger.warning("health/metrics server: cannot accept now: %s", exc)
                    await trio.sleep(0.1)
                    continue
                except BaseException:
                    slots.release()
                    raise
                nursery.start_soon(handle, stream)

    listeners = await trio.open_tcp_listeners(port, host=host)
    bound: int = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(accept, listener, nursery)
        task_status.started(bound)
