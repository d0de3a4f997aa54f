"""Redis URLs: which schemes trunner takes, what each option means, and where Redis is.

* ``redis://``, ``rediss://`` (TLS), ``unix://``: one server, read as redis-py's
  ``parse_url`` reads them (:func:`parse_server_url`); the native transport serves those
  whose options it implements (:func:`native_options`), redis-py the others.
* ``redis+cluster://[user:password@]host:port[,host:port...]/`` (``rediss+cluster://``
  for TLS): a Redis Cluster, from any of its nodes.
* ``redis+sentinel://[user:password@]host:port[,host:port...]/service[/db]``
  (``rediss+sentinel://``): the master of ``service`` according to the sentinels.
* ``memory://NAME``: an in-process fakeredis server.

Query parameters pass connection options through to redis-py, e.g.
``?ssl_ca_certs=/path/ca.pem&ssl_certfile=...&ssl_keyfile=...&ssl_cert_reqs=required``,
and for Sentinel ``sentinel_username`` / ``sentinel_password`` for the sentinels' own AUTH.
Every option value is read by redis-py's own URL reading (``parse_url`` and its table of
option parsers), whatever the scheme, so a redis-py release can never make trunner read a
URL differently from redis-py. A URL without options is read with :mod:`urllib.parse`
alone: it has no value to read, and the native transport never imports redis-py (importing
it costs ~11 MB of memory and ~170 ms).
"""

from __future__ import annotations

import contextlib
import re
import ssl
import urllib.parse
from typing import Any

import attrs

from .endpoints import SENTINEL_OWN, Kind, parse_endpoint, redis_py_url_reading

__all__ = [
    "SUPPORTED_SCHEMES",
    "ServerAddress",
    "check_url",
    "native_options",
    "parse_server_url",
    "redact_url",
    "refuse_memory",
]

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


def redact_url(url: str) -> str:
    """``url`` with every secret replaced by ``***``: the password of ``user:password@``,
    and the value of every query option that names a secret (``password``,
    ``sentinel_password``, ``ssl_password``, and any other ``...password``, ``...secret``,
    ``...token``), for single-host and multi-host URLs.

    A password is hidden even when it holds characters that a URL parser would read as
    the end of the host part (``/``, ``?``, ``#``, ``@``: common in unencoded base64
    secrets), so what is left can never show it: the user information runs to the last
    ``@`` that is followed by a host list. The rest of the URL is kept as written.

    Args:
        url: A Redis URL.

    Returns:
        The URL without its secrets; a URL without one is returned unchanged.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    end = _userinfo_end(rest)
    hosts_at = 0
    if end >= 0:
        user, colon, _ = rest[:end].partition(":")
        if colon:
            rest = f"{user}:***{rest[end:]}"
            end = len(user) + 4
        hosts_at = end + 1
    qmark = rest.find("?", hosts_at)
    if qmark >= 0:
        rest = rest[: qmark + 1] + _redact_query(rest[qmark + 1 :])
    return f"{scheme}{sep}{rest}"


#: What may follow the ``@`` that ends the user information: hosts, ports, and commas
#: (or nothing, ``unix://user:pw@/path``), up to the path, the query, or the end.
_HOST_LIST = re.compile(r"[\w.\-\[\]:,%~]*(?=[/?#]|$)")
#: Where the next query option starts (``&name=``): a secret's value runs to there, so a
#: secret holding an ``&`` (unencoded) stays hidden whole.
_OPTION_START = re.compile(r"&(?=[A-Za-z_]\w*=)")


def _userinfo_end(rest: str) -> int:
    """The index of the ``@`` that ends the user information of ``rest`` (a URL after
    ``scheme://``), or -1: the last ``@`` followed by a host list. Taking the last one
    never shows part of a password (at worst it hides more than the password)."""
    at = len(rest)
    while (at := rest.rfind("@", 0, at)) >= 0:
        if _HOST_LIST.match(rest, at + 1):
            return at
    return -1


def _is_secret(name: str) -> bool:
    return name.lower().endswith(("password", "passwd", "secret", "token"))


def _redact_query(query: str) -> str:
    options = _OPTION_START.split(query)
    for index, option in enumerate(options):
        name, eq, _ = option.partition("=")
        if eq and _is_secret(urllib.parse.unquote(name)):
            options[index] = f"{name}=***"
    return "&".join(options)


def _password_error(url: str) -> str | None:
    """Why the password in ``url``'s user information cannot be read as written, or None.

    A ``/``, ``?`` or ``#`` in it ends the host part for every URL parser: the client
    would read another host, port or database. It must be percent-encoded."""
    rest = url.partition("://")[2]
    end = _userinfo_end(rest)
    password = rest[:end].partition(":")[2] if end >= 0 else ""
    bad = sorted({c for c in password if c in "/?#"})
    if not bad:
        return None
    codes = ", ".join(f"{c} as %{ord(c):02X}" for c in bad)
    return (
        f"the password holds {' '.join(bad)}, which end the host part of a URL: "
        f"percent-encode it ({codes})"
    )


def refuse_memory(url: object) -> str:
    """Check ``url`` (see :func:`check_url`) for a client outside Trio, which cannot
    reach a ``memory://`` server; return its scheme."""
    scheme = check_url(url)
    if scheme == "memory":
        raise ValueError(
            "memory:// cannot be used from asyncio or synchronous code: a memory:// server "
            "lives inside the Trio program that opened it (the workers and clients of one "
            "process, on one Trio loop); give a redis://, rediss://, unix://, "
            "redis+cluster:// or redis+sentinel:// URL, or use trunner.open_client on Trio"
        )
    return scheme


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
    if (why := _password_error(url)) is not None:
        raise ValueError(f"invalid Redis URL {redact_url(url)!r}: {why}")
    try:
        if "+" in scheme:
            endpoint = parse_endpoint(url)
            _check_redis_py_options(url, endpoint.kind)
        else:
            path = urllib.parse.urlparse(url).path.strip("/")
            if scheme != "unix" and path and not path.isdigit():
                raise ValueError(f"the database in the path must be a number, not {path!r}")
            if native_options(url) is None:  # options only redis-py reads: let it check them
                _check_redis_py_options(url, "single")
    except (ValueError, TypeError, OSError) as exc:  # OSError: a TLS file that cannot be read
        raise ValueError(f"invalid Redis URL {redact_url(url)!r}: {exc}") from None
    return scheme


def _check_redis_py_options(url: str, kind: Kind) -> None:
    """Refuse query options that the redis-py objects trunner builds for ``url`` do not
    take: they would fail later, at the first connection, with a TypeError from inside
    redis-py (a runner would crash after it started).

    Every option of a URL reaches each connection (trunner's pools pass them on), so only
    connection options are taken, and for Cluster the client's own: a pool option such as
    ``timeout`` or ``queue_class`` (``BlockingConnectionPool``'s) is refused too.
    """
    import inspect  # noqa: PLC0415 - only for URLs with options the native path lacks

    from redis.asyncio import cluster, connection  # noqa: PLC0415

    scheme = url.split("://", 1)[0].lower()
    classes: list[Any] = [connection.AbstractConnection]
    classes.append(
        connection.UnixDomainSocketConnection if scheme == "unix" else connection.Connection
    )
    if scheme.startswith("rediss"):
        classes.append(connection.SSLConnection)
    if kind == "cluster":
        classes.append(cluster.RedisCluster)
    known = {"max_connections", "ssl"} if kind != "single" else {"max_connections"}
    for cls in classes:
        known.update(inspect.signature(cls.__init__).parameters)
    known -= {"self", "kwargs", "connection_kwargs"}
    query = urllib.parse.urlsplit("x://" + url.split("://", 1)[1]).query
    names = set(urllib.parse.parse_qs(query, keep_blank_values=True))
    if kind == "sentinel":
        names -= SENTINEL_OWN
    unknown = sorted(names - known)
    if unknown:
        raise ValueError(
            f"unknown option {', '.join(unknown)} (not an option of redis-py's "
            f"connections{', nor of its Cluster client' if kind == 'cluster' else ''})"
        )


#: URL query options the native transport implements; a URL with any other uses redis-py.
_KNOWN_OPTIONS = frozenset(
    {
        "db",
        "username",
        "password",
        "host",
        "port",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_ca_data",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_password",
        "ssl_cert_reqs",
        "ssl_check_hostname",
        "socket_connect_timeout",
        "socket_keepalive",
        "client_name",
        "health_check_interval",
    }
)
_CERT_REQS = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


@attrs.frozen
class ServerAddress:
    """Where one server is, and how to log in."""

    host: str = "localhost"
    port: int = 6379
    path: str | None = None  # a Unix socket
    db: int = 0
    username: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    ssl_context: ssl.SSLContext | None = None
    connect_timeout: float | None = None
    client_name: str | None = None  # from the URL: wins over the name trunner gives


def parse_server_url(url: str) -> dict[str, Any]:
    """The options of a ``redis://``, ``rediss://`` or ``unix://`` URL as redis-py's
    ``parse_url`` reads them (same names and values; ``tls`` and ``path`` from the scheme).

    A URL with query options is read by redis-py itself. One without is read with
    :mod:`urllib.parse` as redis-py does (the suite holds the two to the same answers), so
    that a runner on the native transport never imports redis-py.
    Raises ValueError for a value that cannot be read."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("redis", "rediss", "unix"):
        raise ValueError("Redis URL must specify one of redis://, rediss://, unix://")
    if parsed.query:
        parse_url, _ = redis_py_url_reading()
        options: dict[str, Any] = dict(parse_url(url))
        options.pop("connection_class", None)
    else:
        options = _bare_url_options(parsed)
    if parsed.scheme == "unix":
        options["path"] = options.get("path")
    else:
        options["tls"] = parsed.scheme == "rediss"
    return options


def _bare_url_options(parsed: urllib.parse.ParseResult) -> dict[str, Any]:
    """What redis-py's ``parse_url`` reads from a URL without query options."""
    options: dict[str, Any] = {}
    if parsed.username:
        options["username"] = urllib.parse.unquote(parsed.username)
    if parsed.password:
        options["password"] = urllib.parse.unquote(parsed.password)
    if parsed.scheme == "unix":
        if parsed.path:
            options["path"] = urllib.parse.unquote(parsed.path)
        return options
    if parsed.hostname:
        options["host"] = urllib.parse.unquote(parsed.hostname)
    if parsed.port is not None:  # ValueError for a port out of range or not a number
        options["port"] = parsed.port
    if parsed.path:
        with contextlib.suppress(ValueError):
            options["db"] = int(urllib.parse.unquote(parsed.path).replace("/", ""))
    return options


def native_options(url: str) -> ServerAddress | None:
    """The address of a single-server URL for the native transport, or None when it needs
    redis-py's own client (an option the native transport does not implement)."""
    options = parse_server_url(url)
    tls = options.pop("tls", False)
    path = options.pop("path", None)
    if not set(options) <= _KNOWN_OPTIONS:
        return None
    context = None
    if tls:
        context = _ssl_context(options)
    elif any(name.startswith("ssl_") for name in options):
        return None  # TLS options on a plain URL: let redis-py say what it makes of them
    timeout = options.get("socket_connect_timeout")
    return ServerAddress(
        host=options.get("host") or "localhost",
        port=int(options.get("port") or 6379),
        path=path,
        db=int(options.get("db") or 0),
        username=options.get("username"),
        password=options.get("password"),
        ssl_context=context,
        connect_timeout=float(timeout) if timeout is not None else None,
        client_name=options.get("client_name") or None,
    )


def _ssl_context(options: dict[str, Any]) -> ssl.SSLContext:
    """The TLS settings of redis-py's SSLConnection, from the same URL options."""
    reqs = options.get("ssl_cert_reqs", "required")
    if isinstance(reqs, str):
        if reqs.lower() not in _CERT_REQS:
            raise ValueError(f"ssl_cert_reqs must be one of {', '.join(_CERT_REQS)}")
        reqs = _CERT_REQS[reqs.lower()]
    check = options.get("ssl_check_hostname")  # read by redis-py already
    check = True if check is None else check
    context = ssl.create_default_context()
    context.check_hostname = bool(check) and reqs != ssl.CERT_NONE
    context.verify_mode = reqs
    if options.get("ssl_certfile") or options.get("ssl_keyfile"):
        context.load_cert_chain(
            certfile=options["ssl_certfile"],
            keyfile=options.get("ssl_keyfile"),
            password=options.get("ssl_password"),
        )
    ca = (options.get("ssl_ca_certs"), options.get("ssl_ca_path"), options.get("ssl_ca_data"))
    if any(item is not None for item in ca):
        context.load_verify_locations(cafile=ca[0], capath=ca[1], cadata=ca[2])
    return context
