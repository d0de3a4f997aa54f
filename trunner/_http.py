"""A tiny HTTP/1.1 server on Trio, for health checks and metrics of the worker command."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping

import trio

__all__ = ["Handler", "Response", "serve_http"]

#: (status, content type, body)
Response = tuple[int, str, bytes]
Handler = Callable[[], Awaitable[Response]]

_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}
_MAX_REQUEST = 8192
_TIMEOUT = 5.0


async def _respond(stream: trio.SocketStream, routes: Mapping[str, Handler]) -> None:
    request = b""
    with trio.move_on_after(_TIMEOUT):
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
    host: str = "0.0.0.0",
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``routes`` (path -> handler) until cancelled; report the bound port."""

    async def handle(stream: trio.SocketStream) -> None:
        async with stream:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await _respond(stream, routes)

    listeners = await trio.open_tcp_listeners(port, host=host)
    bound: int = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        task_status.started(bound)
