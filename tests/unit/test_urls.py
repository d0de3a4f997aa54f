"""Redis URLs (trunner/_redis/urls.py): read as redis-py reads them, the transport each
gets, and the ones refused, with the reason; passwords never shown."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection, parse_url, to_bool

import trunner
from trunner._redis import check_url, native_options, parse_endpoint, parse_server_url

from ..conftest import config


def test_single_server_urls_are_served_natively() -> None:
    plain = native_options("redis://user:secret@example.org:6380/3")
    assert plain is not None
    assert (plain.host, plain.port, plain.db) == ("example.org", 6380, 3)
    assert (plain.username, plain.password, plain.ssl_context) == ("user", "secret", None)
    tls = native_options("rediss://example.org/0?ssl_cert_reqs=none")
    assert tls is not None
    assert tls.ssl_context is not None
    assert tls.ssl_context.check_hostname is False
    unix = native_options("unix:///run/redis.sock?db=2&socket_connect_timeout=1.5")
    assert unix is not None
    assert (unix.path, unix.db, unix.connect_timeout) == ("/run/redis.sock", 2, 1.5)
    named = native_options("redis://localhost/0?client_name=billing&health_check_interval=5")
    assert named is not None
    assert named.client_name == "billing"


@pytest.mark.parametrize(
    "url",
    [
        "redis://localhost/0?retry_on_timeout=true",  # an option only redis-py implements
        "redis://localhost/0?ssl_ca_certs=/ca.crt",  # TLS options on a plain URL
    ],
)
def test_urls_with_other_options_use_redis_py(url: str) -> None:
    assert native_options(url) is None


@pytest.mark.parametrize(
    "url",
    [
        "redis://localhost",
        "redis://h:7000/5",
        "redis://u%40x:p%3Aw@h/1?db=3",
        "redis://:only-password@h:6380/",
        "redis://h/not-a-db",
        "rediss://h/0?ssl_cert_reqs=none&ssl_check_hostname=false&socket_connect_timeout=2.5",
        "rediss://h/0?ssl_ca_certs=%2Fetc%2Fca.pem&client_name=a%20b",
        "redis://h/0?socket_keepalive=yes&health_check_interval=30&password=q",
        "redis://[::1]:6379/0",
        "unix:///tmp/redis.sock?db=4&password=pw",
        "unix://user@/tmp/redis.sock",
    ],
)
def test_urls_are_read_as_redis_py_reads_them(url: str) -> None:
    theirs: dict[str, Any] = dict(parse_url(url))
    ours = parse_server_url(url)
    connection_class = theirs.pop("connection_class", None)
    assert ours.pop("tls", False) == (connection_class is SSLConnection)
    if connection_class is UnixDomainSocketConnection:
        assert ours.pop("path") == theirs.pop("path")
    assert ours == theirs


@pytest.mark.parametrize("value", ["0", "no", "N", "false", "F", "1", "yes", "TRUE", "on", "off"])
def test_a_boolean_option_means_what_redis_py_makes_of_it_in_every_url(value: str) -> None:
    """One reading for every scheme: before, Cluster and Sentinel URLs took only 1, true
    and yes as true (so ``on`` was false there, and true on one server)."""
    theirs = to_bool(value)
    assert isinstance(theirs, bool)
    assert parse_server_url(f"rediss://h/0?ssl_check_hostname={value}")["ssl_check_hostname"] is (
        theirs
    )
    address = native_options(f"rediss://h/0?ssl_check_hostname={value}")
    assert address is not None
    assert address.ssl_context is not None
    assert address.ssl_context.check_hostname is theirs
    for url in (
        f"rediss+cluster://h:7000/?ssl_check_hostname={value}",
        f"rediss+sentinel://h:26379/service?ssl_check_hostname={value}",
    ):
        assert parse_endpoint(url).options["ssl_check_hostname"] is theirs


def test_option_values_are_read_by_redis_py_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a copy of redis-py's reading: what its table of option parsers says is what
    trunner reads, for every scheme (so a redis-py release cannot make the two differ)."""
    from redis.asyncio import connection  # noqa: PLC0415

    parsers = dict(connection.URL_QUERY_ARGUMENT_PARSERS)
    parsers["ssl_check_hostname"] = lambda value: value == "sure"
    monkeypatch.setattr(connection, "URL_QUERY_ARGUMENT_PARSERS", parsers)
    monkeypatch.setattr(
        connection,
        "parse_url",
        lambda url: {"host": "h", "ssl_check_hostname": parsers["ssl_check_hostname"]("sure")},
    )
    assert parse_server_url("rediss://h/0?ssl_check_hostname=sure")["ssl_check_hostname"] is True
    for url in (
        "rediss+cluster://h:7000/?ssl_check_hostname=sure",
        "rediss+sentinel://h:26379/service?ssl_check_hostname=sure",
    ):
        assert parse_endpoint(url).options["ssl_check_hostname"] is True


def test_a_url_without_options_does_not_import_redis_py() -> None:
    """The native transport serves a plain URL without redis-py in memory (~11 MB)."""
    code = (
        "import sys, trunner._redis.urls as u; "
        "assert u.native_options('redis://user:pw@h:6380/2').db == 2; "
        "print('redis' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://h:99999/0", "Port out of range"),
        ("redis://h/0?db=x", "Invalid value for 'db'"),
        ("redis://h/0?socket_connect_timeout=soon", "Invalid value for 'socket_connect_timeout'"),
    ],
)
def test_bad_url_values_are_refused_like_redis_py_does(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_server_url(url)
    with pytest.raises(ValueError, match=problem):
        parse_url(url)
    with pytest.raises(ValueError, match="invalid Redis URL"):
        check_url(url)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://h/abc", "the database in the path must be a number, not 'abc'"),
        ("redis://h/0/extra", "the database in the path must be a number"),
        ("redis://h/0?bogus_option=1", "unknown option bogus_option"),
        # Options of redis-py's blocking pool, which trunner's other pools pass on to
        # their connections: they used to crash the runner after it started.
        ("redis://h/0?timeout=3", "unknown option timeout"),
        ("redis://h/0?queue_class=asyncio.LifoQueue", "unknown option queue_class"),
        ("unix:///tmp/redis.sock?timeout=3", "unknown option timeout"),
        ("redis+cluster://h:7000/?timeout=3", "unknown option timeout"),
        ("redis+sentinel://h:26379/service?queue_class=x", "unknown option queue_class"),
    ],
)
def test_urls_redis_py_would_misread_are_refused(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        check_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "redis://h/0?retry_on_timeout=true",
        "rediss://h/0?ssl_ciphers=HIGH",
        "unix:///tmp/redis.sock?db=2&retry_on_timeout=1",
        "redis+cluster://h:7000/?read_from_replicas=true",
        "rediss+cluster://h:7000/?ssl_ca_certs=/ca.pem",
        "redis+sentinel://h:26379/service?sentinel_password=pw&retry_on_timeout=1",
    ],
)
def test_options_redis_py_takes_pass_the_check(url: str) -> None:
    check_url(url)


async def test_an_unknown_option_is_refused_before_anything_starts() -> None:
    # Port 9 (discard) would fail to connect: a ValueError shows the URL was refused first.
    url = "redis://127.0.0.1:9/0?timeout=3"
    with pytest.raises(ValueError, match="unknown option timeout"):
        async with trunner.open_runner(url, config("g"), trunner.TaskRegistry()):
            pytest.fail("started with an option redis-py does not take")
    with pytest.raises(ValueError, match="unknown option timeout"):
        trunner.Runner(url, config("g"), trunner.TaskRegistry())


def test_a_bad_tls_option_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="ssl_cert_reqs must be one of none, optional"):
        native_options("rediss://localhost/0?ssl_cert_reqs=sometimes")


async def test_bad_urls_raise_value_error() -> None:
    cfg = config("g")
    with pytest.raises(ValueError, match="unsupported Redis URL"):
        async with trunner.open_runner("http://x", cfg, trunner.TaskRegistry()):
            pytest.fail("started on an http:// URL")
    with pytest.raises(ValueError, match="memory:// URL needs a name"):
        async with trunner.open_runner("memory://", cfg, trunner.TaskRegistry()):
            pytest.fail("started on memory:// without a name")
    with pytest.raises(ValueError, match="unsupported Redis URL"):
        async with trunner.open_client("http://x", "g"):
            pytest.fail("a client opened on an http:// URL")


@pytest.mark.parametrize(
    "url",
    [
        "redis+cluster://127.0.0.1:7000,127.0.0.1:7001/0",  # Cluster has database 0 only
        "redis+cluster://127.0.0.1:x/",
        "redis+sentinel://127.0.0.1:26379/",  # no service name
        "redis+sentinel://127.0.0.1:26379/mymaster/zero",
        "redis+sentinel://127.0.0.1:26379/mymaster/0/extra",
    ],
)
async def test_bad_cluster_and_sentinel_urls_say_why(url: str) -> None:
    with pytest.raises(ValueError, match="invalid Redis URL"):
        async with trunner.open_client(url, "g"):
            pytest.fail(f"a client opened on {url}")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://u:s3cret@h:6379/0", "redis://u:***@h:6379/0"),
        ("redis://:s3cret@h", "redis://:***@h"),
        ("redis://user@h/1", "redis://user@h/1"),
        ("unix:///run/redis.sock?db=2&password=s3cret", "unix:///run/redis.sock?db=2&password=***"),
        (
            "redis+sentinel://u:s3cret@a:26379,b:26379/main/1?sentinel_password=s3cret&x=1",
            "redis+sentinel://u:***@a:26379,b:26379/main/1?sentinel_password=***&x=1",
        ),
        ("rediss+cluster://:s3cret@a:7000,b:7001/", "rediss+cluster://:***@a:7000,b:7001/"),
        ("rediss://h/0?ssl_ca_certs=/etc/ca.pem", "rediss://h/0?ssl_ca_certs=/etc/ca.pem"),
    ],
)
def test_redact_url_hides_every_password(url: str, shown: str) -> None:
    assert trunner.redact_url(url) == shown
    assert "s3cret" not in trunner.redact_url(url)
