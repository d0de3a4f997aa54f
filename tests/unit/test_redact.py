"""Passwords in Redis URLs never appear in what trunner prints: errors, logs, the CLI.

Property-tested: for random passwords (any characters), in every place a URL carries a
secret (``user:password@``, ``password``, ``sentinel_password``, ``ssl_password``), of
single-host and multi-host URLs, neither the password nor its percent-encoded form is in
``redact_url``'s result, in the error of a URL that is refused, nor in the error of a
connection that fails.
"""

from __future__ import annotations

import urllib.parse

import pytest
import trio
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import trunner
from trunner._redis import check_url, open_transport

from ..conftest import run_python
from ..support.servers import free_port

passwords = st.text(st.characters(exclude_categories=["Cs"]), min_size=4, max_size=24)
MARK = "\x00PASSWORD\x00"

#: URLs with the password in the user information (as written, or percent-encoded).
USERINFO = [
    "redis://user:{}@h1.example:6379/0",
    "redis://:{}@h1.example/2?db=2&client_name=c",
    "rediss://user:{}@h1.example:6380/0?ssl_cert_reqs=none",
    "unix://user:{}@/run/redis.sock?db=1",
    "redis+cluster://:{}@a.example:7000,b.example:7001/",
    "rediss+sentinel://user:{}@a.example:26379,b.example:26379/svc/1?x=1",
]
#: URLs with the password in a query option (query values must be percent-encoded).
QUERY = [
    "redis://h1.example:6379/0?password={}",
    "redis://h1.example:6379/0?db=1&password={}&client_name=c",
    "rediss://h1.example/0?ssl_certfile=/c.pem&ssl_password={}",
    "redis+sentinel://a.example:26379,b.example:26379/svc?sentinel_password={}&db=1",
    "rediss+sentinel://a.example:26379/svc?ssl_password={}",
]


def urls(password: str) -> list[str]:
    quoted = urllib.parse.quote(password, safe="")
    found = [t.format(password) for t in USERINFO] + [t.format(quoted) for t in USERINFO]
    return found + [t.format(quoted) for t in QUERY]


def leaks(text: str, password: str) -> bool:
    return password in text or urllib.parse.quote(password, safe="") in text


def _shown_elsewhere(password: str) -> bool:
    """The password is part of the URLs' own text, of what redaction writes, or of the
    wording of a refusal (e.g. "unknown option")."""
    skeleton = " ".join(t.format(MARK) for t in USERINFO + QUERY) + " *** "
    return leaks(skeleton + " ".join(_refusal(url) for url in urls(MARK)), password)


def _refusal(url: str) -> str:
    """The text of the error ``check_url`` raises for ``url`` ("" if it takes it)."""
    try:
        check_url(url)
    except ValueError as exc:
        return str(exc)
    return ""


@settings(max_examples=100, deadline=None)
@given(passwords)
def test_redact_url_never_shows_a_password(password: str) -> None:
    assume(not _shown_elsewhere(password))
    for url in urls(password):
        shown = trunner.redact_url(url)
        assert not leaks(shown, password), (url, shown)
        assert "***" in shown
        error = _refusal(url)
        assert not leaks(error, password), (url, error)


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(passwords)
def test_a_failed_connection_never_shows_the_password(password: str) -> None:
    assume(not _shown_elsewhere(password))
    port = free_port()

    def candidates(secret: str) -> list[str]:
        quoted = urllib.parse.quote(secret, safe="")
        return [
            f"redis://user:{quoted}@127.0.0.1:{port}/0",
            f"redis://127.0.0.1:{port}/0?password={quoted}",
            f"redis+sentinel://:{quoted}@127.0.0.1:{port}/svc?sentinel_password={quoted}",
        ]

    async def errors(secret: str) -> list[str]:
        found = []
        for url in candidates(secret):
            with pytest.raises(trunner.RedisUnavailable) as info:
                async with open_transport(
                    url, client_name="t", max_connections=1, connect_timeout=0.3
                ):
                    pytest.fail("connected to a closed port")
            found += [str(info.value), repr(info.value)]
        return found

    # What the errors say whatever the password (the port, "client_name=None", ...) is
    # no leak: the same errors for a password that cannot occur by chance.
    assume(not any(leaks(text, password) for text in trio.run(errors, MARK)))
    for text in trio.run(errors, password):
        assert not leaks(text, password), text


def test_known_urls_are_shown_without_their_secrets() -> None:
    shown = {
        "redis://:ab/cd+ef==@h:6379/0": "redis://:***@h:6379/0",
        "redis://u:a?b#c@h/0?db=1": "redis://u:***@h/0?db=1",
        "redis://u:p@ss@h/0": "redis://u:***@h/0",
        "rediss://h/0?ssl_password=pw&ssl_certfile=/c.pem": (
            "rediss://h/0?ssl_password=***&ssl_certfile=/c.pem"
        ),
        "redis://h/0?password=a&b&db=1": "redis://h/0?password=***&db=1",
        "redis+sentinel://u:p/w@a:1,b:2/svc?sentinel_password=q": (
            "redis+sentinel://u:***@a:1,b:2/svc?sentinel_password=***"
        ),
        "unix:///tmp/r@1.sock?db=1": "unix:///tmp/r@1.sock?db=1",
    }
    for url, expected in shown.items():
        assert trunner.redact_url(url) == expected


def test_a_password_that_breaks_the_url_is_refused_saying_how_to_encode_it() -> None:
    with pytest.raises(ValueError, match=r"percent-encode it \(/ as %2F\)") as info:
        check_url("redis://:ab/cd==@h:6379/0")
    assert "ab/cd" not in str(info.value)


def test_the_cli_never_prints_the_password() -> None:
    secret = "Zx9/q?Rt#w@b64=="
    port = free_port()
    for url in (
        f"redis://user:{secret}@127.0.0.1:{port}/0",
        f"redis://user:{urllib.parse.quote(secret, safe='')}@127.0.0.1:{port}/0",
        f"rediss://127.0.0.1:{port}/0?ssl_password={urllib.parse.quote(secret, safe='')}",
    ):
        done = run_python("-m", "trunner", "inspect", "g", "--redis", url)
        assert done.returncode == 1
        assert "***" in done.stderr
        assert not leaks(done.stdout + done.stderr, secret), done.stderr
