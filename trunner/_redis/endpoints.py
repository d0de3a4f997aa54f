"""Cluster and Sentinel URLs, read into the :class:`Endpoint` that the bridged transport
connects to (the schemes and options are described in :mod:`trunner._redis.urls`)."""

from __future__ import annotations

import urllib.parse
from typing import Any, Literal

import attrs

__all__ = ["SENTINEL_OWN", "Endpoint", "Kind", "parse_endpoint", "redis_py_url_reading"]

#: What a URL names: one server, a Cluster, or a Sentinel-managed master.
Kind = Literal["single", "cluster", "sentinel"]

#: Query options for the sentinels' own AUTH, not passed to the master's connections.
SENTINEL_OWN = {"sentinel_username", "sentinel_password"}


def redis_py_url_reading() -> tuple[Any, Any]:
    """redis-py's asyncio URL reading (the client trunner uses when the native transport
    does not serve a URL): ``(parse_url, URL_QUERY_ARGUMENT_PARSERS)``."""
    from redis.asyncio import connection  # noqa: PLC0415 - only for URLs with options

    return connection.parse_url, connection.URL_QUERY_ARGUMENT_PARSERS


@attrs.frozen
class Endpoint:
    """Where Redis is, as the bridged transport needs it: one server (its URL), a Cluster
    (its seed nodes), or a Sentinel-managed master (the sentinels and the service)."""

    kind: Kind
    url: str = attrs.field(repr=False)
    nodes: tuple[tuple[str, int], ...] = ()
    service: str | None = None
    options: dict[str, Any] = attrs.field(factory=dict, repr=False)
    """Connection keyword arguments for redis-py (cluster and sentinel)."""
    sentinel_options: dict[str, Any] = attrs.field(factory=dict, repr=False)


def _nodes(netloc: str, default_port: int) -> tuple[tuple[str, int], ...]:
    hosts = netloc.rsplit("@", 1)[-1]
    nodes = []
    for part in hosts.split(","):
        if not part:
            continue
        host, _, port = part.rpartition(":") if part.count(":") == 1 else (part, "", "")
        if part.startswith("["):  # [::1]:7000
            host, _, port = part[1:].partition("]:")
        try:
            nodes.append((host or part, int(port) if port else default_port))
        except ValueError:
            raise ValueError(f"bad port in {part!r}") from None
    if not nodes:
        raise ValueError("no host:port given")
    return tuple(nodes)


def _options(parts: urllib.parse.SplitResult, tls: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(connection options, the sentinels' own options) from a URL's userinfo and query."""
    options: dict[str, Any] = {}
    if parts.username:
        options["username"] = urllib.parse.unquote(parts.username)
    if parts.password:
        options["password"] = urllib.parse.unquote(parts.password)
    if tls:
        options["ssl"] = True
    sentinel_options: dict[str, Any] = {}
    query = urllib.parse.parse_qs(parts.query)
    parsers = redis_py_url_reading()[1] if query else {}
    for name, values in query.items():
        value: Any = values[-1]
        if (reader := parsers.get(name)) is not None:  # as redis-py's from_url reads it
            try:
                value = reader(value)
            except (TypeError, ValueError):
                raise ValueError(f"Invalid value for '{name}' in connection URL.") from None
        if name in SENTINEL_OWN:
            sentinel_options[name.removeprefix("sentinel_")] = value
        else:
            options[name] = value
    if tls:  # the sentinels speak TLS too
        sentinel_options.setdefault("ssl", True)
        for name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs"):
            if name in options:
                sentinel_options.setdefault(name, options[name])
    return options, sentinel_options


def _sentinel(url: str, parts: urllib.parse.SplitResult, tls: bool) -> Endpoint:
    options, sentinel_options = _options(parts, tls)
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise ValueError("a Sentinel URL needs the service name: .../service_name[/db]")
    if len(path) > 2:
        raise ValueError("a Sentinel URL's path is /service_name[/db]")
    if len(path) == 2:
        try:
            options["db"] = int(path[1])
        except ValueError:
            raise ValueError(f"bad database number {path[1]!r}") from None
    return Endpoint(
        "sentinel",
        url,
        _nodes(parts.netloc, 26379),
        service=path[0],
        options=options,
        sentinel_options=sentinel_options,
    )


def parse_endpoint(url: str) -> Endpoint:
    """Where the URL says Redis is. Raises ValueError for a Cluster or Sentinel URL that
    cannot be read (a single-server URL is read by redis-py, or :func:`parse_server_url`)."""
    scheme = url.split("://", 1)[0].lower()
    if "+" not in scheme:
        return Endpoint("single", url)
    base, _, kind = scheme.partition("+")
    parts = urllib.parse.urlsplit("x://" + url.split("://", 1)[1])
    tls = base == "rediss"
    if kind == "sentinel":
        return _sentinel(url, parts, tls)
    if kind == "cluster":
        if [p for p in parts.path.split("/") if p]:
            raise ValueError("a Cluster URL has no database or path: Cluster has database 0")
        options, _ = _options(parts, tls)
        return Endpoint("cluster", url, _nodes(parts.netloc, 6379), options=options)
    raise ValueError(f"unknown Redis URL scheme {scheme!r}")
