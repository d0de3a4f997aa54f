"""The asyncio and synchronous clients' faces, without Redis: their arguments checked
before connecting, ``memory://`` refused, the error of a client not open, and what
importing them loads."""

from __future__ import annotations

import asyncio

import pytest

import trunner
import trunner.aio
import trunner.sync

from ..conftest import run_python


@pytest.mark.parametrize("client", [trunner.aio.Client, trunner.sync.Client])
def test_memory_urls_are_refused_before_connecting(client: type) -> None:
    with pytest.raises(ValueError, match=r"memory:// cannot be used from asyncio or synchronous"):
        client("memory://demo", queue="q")


@pytest.mark.parametrize("client", [trunner.aio.Client, trunner.sync.Client])
def test_arguments_are_checked_before_connecting(client: type) -> None:
    with pytest.raises(TypeError, match="needs the queue"):
        client("redis://127.0.0.1:1/0")
    with pytest.raises(ValueError, match="max_connections"):
        client("redis://127.0.0.1:1/0", queue="q", max_connections=0)
    with pytest.raises(ValueError, match="unsupported Redis URL"):
        client("http://example.com", queue="q")


def test_an_asyncio_client_not_open_says_how_to_open_it() -> None:
    client = trunner.aio.Client("redis://127.0.0.1:1/0", queue="q")

    async def dispatch() -> None:
        await client.dispatch("t", 1)

    with pytest.raises(trunner.errors.RunnerNotRunning, match=r"async with client"):
        asyncio.run(dispatch())
    with pytest.raises(trunner.errors.RunnerNotRunning, match=r"async with client"):
        client.admin  # noqa: B018


def test_an_unreachable_server_fails_the_opening() -> None:
    async def open_it() -> None:
        async with trunner.aio.Client("redis://127.0.0.1:1/0", queue="q", connect_timeout=2):
            pass

    with pytest.raises(trunner.RedisUnavailable, match="cannot reach Redis"):
        asyncio.run(open_it())
    with pytest.raises(trunner.RedisUnavailable, match="cannot reach Redis"):
        trunner.sync.Client("redis://127.0.0.1:1/0", queue="q", connect_timeout=2).open()


LOADED = """
import sys, trunner
{step}
print(sorted({{n.split(".")[0] for n in sys.modules}} & {{"asyncio", "redis", "trio_asyncio"}}))
"""


@pytest.mark.parametrize(
    ("step", "loaded"),
    [
        ("", []),  # import trunner: neither loop's client
        ("trunner.sync", []),  # the sync client is the Trio client in a thread
        ("trunner.aio", ["asyncio", "redis"]),
    ],
)
def test_what_importing_each_client_loads(step: str, loaded: list[str]) -> None:
    done = run_python("-c", LOADED.format(step=step))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == str(loaded)
