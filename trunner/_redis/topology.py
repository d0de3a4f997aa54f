"""Where Redis is: one server, a Cluster, or a Sentinel-managed master, from a URL.

* ``redis://``, ``rediss://`` (TLS), ``unix://``: one server (redis-py's own URL parsing).
* ``redis+cluster://[user:password@]host:port[,host:port...]/`` (``rediss+cluster://``
  for TLS): a Redis Cluster, from any of its nodes.
* ``redis+sentinel://[user:password@]host:port[,host:port...]/service[/db]``
  (``rediss+sentinel://``): the master of ``service`` according to the sentinels.

Query parameters pass connection options through to redis-py, e.g.
``?ssl_ca_certs=/path/ca.pem&ssl_certfile=...&ssl_keyfile=...&ssl_cert_reqs=required``,
and for Sentinel ``sentinel_username`` / ``sentinel_password`` for the sentinels' own AUTH.
"""

from __future__ import annotations

import urllib.parse
from typing import Any, Literal

import attrs

__all__ = ["Endpoint", "parse_endpoint"]

Kind = Literal["single", "cluster", "sentinel"]

_BOOLEAN = {"ssl_check_hostname"}
_SENTINEL_OWN = {"sentinel_username", "sentinel_password"}


@attrs.frozen
class Endpoint:
    kind: Kind
    url: str
    nodes: tuple[tuple[str, int], ...] = ()
    service: str | None = None
    options: dict[str, Any] = attrs.field(factory=dict)
    """Connection keyword arguments for redis-py (cluster and sentinel)."""
    sentinel_options: dict[str, Any] = attrs.field(factory=dict)


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
    for name, values in urllib.parse.parse_qs(parts.query).items():
        value: Any = values[-1]
        if name in _BOOLEAN:
            value = value.lower() in ("1", "true", "yes")
        if name in _SENTINEL_OWN:
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
