"""Opening a transport from a URL."""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from .._util import unwrap_single
from ..errors import RedisUnavailable
from .native import NativeTransport, native_options
from .topology import parse_endpoint
from .transport import Transport

__all__ = ["SUPPORTED_SCHEMES", "check_url", "open_transport", "redact_url"]

SUPPORTED_SCHEMES = (
    "redis",
    "rediss",
    "unix",
    "memory",
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "rediss+sentinel",
)

#: Bound on closing connections at shutdown.
CLOSE_TIMEOUT = 5.0


def redact_url(url: str) -> str:
    """``url`` with its passwords replaced by ``***``.

    Covers the password in ``user:password@`` and the ``password`` and
    ``sentinel_password`` query options, for single-host and multi-host URLs.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    rest, qmark, query = rest.partition("?")
    query, hash_, fragment = query.partition("#")
    netloc, slash, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.split(':', 1)[0]}:***@{hosts}"
    if query:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        if any(name in _SECRET_OPTIONS for name, _ in pairs):
            safe = [(n, "***" if n in _SECRET_OPTIONS else v) for n, v in pairs]
            query = urllib.parse.urlencode(safe, safe="*/")
    return f"{scheme}{sep}{netloc}{slash}{path}{qmark}{query}{hash_}{fragment}"


_SECRET_OPTIONS = frozenset({"password", "sentinel_password"})


def check_url(url: object) -> str:
    """Check a Redis URL; return its scheme. Raises ValueError or TypeError saying why."""
    if not isinstance(url, str):
        raise TypeError(f"redis must be a URL string, got {type(url).__name__}")
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in SUPPORTED_SCHEMES:
        raise ValueError(
            f"unsupported Redis URL {redact_url(url)!r}: use one of "
            + ", ".join(f"{s}://" for s in SUPPORTED_SCHEMES)
        )
    if scheme == "memory":
        if not url[len("memory://") :]:
            raise ValueError("a memory:// URL needs a name, e.g. memory://demo")
        return scheme
    try:
        if "+" in scheme:
            parse_endpoint(url)
        else:
            path = urllib.parse.urlparse(url).path.strip("/")
            if scheme != "unix" and path and not path.isdigit():
                raise ValueError(f"the database in the path must be a number, not {path!r}")
            if native_options(url) is None:  # options only redis-py reads: let it check them
                _check_redis_py_options(url)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"invalid Redis URL {redact_url(url)!r}: {exc}") from None
    return scheme


def _check_redis_py_options(url: str) -> None:
    """Refuse query options redis-py's connections do not take (they would fail later,
    at the first connection, with a TypeError from inside redis-py)."""
    import inspect  # noqa: PLC0415 - only for URLs with options the native path lacks

    from redis.asyncio import connection  # noqa: PLC0415

    options = dict(connection.parse_url(url))
    known: set[str] = set()
    for cls in (
        connection.AbstractConnection,
        connection.Connection,
        connection.SSLConnection,
        connection.UnixDomainSocketConnection,
        connection.BlockingConnectionPool,
    ):
        known.update(inspect.signature(cls.__init__).parameters)
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown option {', '.join(unknown)} (not a redis-py connection option)")


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
    trio-asyncio loop (:class:`~trunner._redis.bridged.AsyncioTransport`), as does
    ``bridge=True``.
    """
    scheme = check_url(url)
    transport: Transport
    if scheme == "memory":
        from .memory import MemoryTransport  # noqa: PLC0415 - loads fakeredis

        transport = MemoryTransport(url[len("memory://") :])
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

    from .bridged import AsyncioTransport  # noqa: PLC0415

    # The loop runs in nurseries, which wrap whatever crosses them in exception groups;
    # a single exception (from start-up, or from the caller's block) leaves as itself.
    body_error: BaseException | None = None
    to_raise: BaseException | None
    try:
        async with trio_asyncio.open_loop() as loop:
            transport = AsyncioTransport(loop, parse_endpoint(url), **common)
            async with _checked(transport, connect_timeout):
                try:
                    yield transport
                except BaseException as exc:
                    body_error = exc
                    raise
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
    where = transport.description
    try:
        with trio.fail_after(limit):
            await transport.execute("PING")
    except trio.TooSlowError:
        hint = ""
        if where.split("://", 1)[0].startswith("rediss"):
            hint = " (no answer to the TLS handshake either: is this port serving TLS?)"
        raise RedisUnavailable(f"Redis at {where} did not answer within {limit} s{hint}") from None
    except RedisUnavailable as exc:
        text = str(exc)
        if any(code in text for code in ("WRONGPASS", "NOAUTH", "NOPERM")):
            raise RedisUnavailable(f"Redis at {where} refused to log in: {text}") from None
        raise RedisUnavailable(f"cannot reach Redis at {where}: {text}") from None
