"""Opening a transport from a URL: the native one, the bridged one, or memory://."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from ..._util import unwrap_single
from ...errors import RedisUnavailable
from ..endpoints import parse_endpoint
from ..urls import check_url, native_options, redact_url
from .base import Transport
from .native import NativeTransport

__all__ = ["no_answer", "not_reached", "open_transport"]

#: Bound on closing connections at shutdown.
CLOSE_TIMEOUT = 5.0


@asynccontextmanager
async def open_transport(
    url: str,
    *,
    client_name: str,
    max_connections: int,
    connect_timeout: float,
    command_timeout: float = 10.0,
    bridge: bool = False,
) -> AsyncIterator[Transport]:
    """Open a transport for ``url`` and check that Redis answers within ``connect_timeout``.

    One server is reached over Trio sockets (:class:`NativeTransport`) unless its URL has
    options only redis-py knows; Cluster and Sentinel use redis-py's asyncio clients on a
    trio-asyncio loop (:class:`~trunner._redis.transports.bridged.BridgedTransport`), as does
    ``bridge=True``.
    """
    scheme = check_url(url)
    transport: Transport
    if scheme == "memory":
        from .memory import MemoryTransport  # noqa: PLC0415 - loads fakeredis

        transport = MemoryTransport(url[len("memory://") :], command_timeout=command_timeout)
        try:
            yield transport
        finally:
            await transport.aclose()
        return
    common: dict[str, Any] = {
        "description": redact_url(url),
        "client_name": client_name,
        "max_connections": max_connections,
        "connect_timeout": connect_timeout,
        "command_timeout": command_timeout,
    }
    address = None if "+" in scheme or bridge else native_options(url)
    if address is not None:
        transport = NativeTransport(address, **common)
        async with _checked(transport, connect_timeout):
            yield transport
        return

    # Only Cluster, Sentinel and rare URL options load redis-py's asyncio client.
    import trio_asyncio  # noqa: PLC0415

    from .bridged import BridgedTransport  # noqa: PLC0415

    # The loop runs in nurseries, which wrap whatever crosses them in exception groups;
    # a single exception (from start-up, or from the caller's block) leaves as itself.
    body_error: BaseException | None = None
    to_raise: BaseException | None
    try:
        async with trio_asyncio.open_loop() as loop:
            transport = BridgedTransport(loop, parse_endpoint(url), **common)
            async with _checked(transport, connect_timeout), trio.open_nursery() as nursery:
                if transport.follows_master:  # Sentinel: follow the master while open
                    await nursery.start(transport.follow_master)
                try:
                    yield transport
                except BaseException as exc:
                    body_error = exc
                    raise
                finally:
                    nursery.cancel_scope.cancel()
        return
    except BaseExceptionGroup as group:
        to_raise = unwrap_single(group, body_error)
        if to_raise is None:
            raise
    raise to_raise


@asynccontextmanager
async def _checked(transport: Transport, connect_timeout: float) -> AsyncIterator[None]:
    """Check that Redis answers; close the transport at the end, whatever happens."""
    try:
        await _check_reachable(transport, connect_timeout)
        yield
    finally:
        with trio.move_on_after(CLOSE_TIMEOUT, shield=True):
            await transport.aclose()


async def _check_reachable(transport: Transport, limit: float) -> None:
    try:
        with trio.fail_after(limit):
            await transport.execute("PING")
    except trio.TooSlowError:
        raise no_answer(transport.description, limit) from None
    except RedisUnavailable as exc:
        raise not_reached(transport.description, exc) from None


def no_answer(where: str, limit: float) -> RedisUnavailable:
    """The error of a server at ``where`` that did not answer a ``PING`` within ``limit``."""
    hint = ""
    if where.split("://", 1)[0].startswith("rediss"):
        hint = " (no answer to the TLS handshake either: is this port serving TLS?)"
    return RedisUnavailable(f"Redis at {where} did not answer within {limit} s{hint}")


def not_reached(where: str, exc: RedisUnavailable) -> RedisUnavailable:
    """The error of a first ``PING`` to ``where`` that failed with ``exc``."""
    text = str(exc)
    if any(code in text for code in ("WRONGPASS", "NOAUTH", "NOPERM")):
        return RedisUnavailable(f"Redis at {where} refused to log in: {text}")
    return RedisUnavailable(f"cannot reach Redis at {where}: {text}")
