"""The health and metrics endpoints: loopback by default, bounded connections, timed out.

300 idle connections to the health port used to leave the worker unable to open Redis
connections (every one was accepted and held a file descriptor for ever).
"""

from __future__ import annotations

import inspect
import os
import socket

import pytest
import trio
import trio.testing

from trunner import cli
from trunner._worker.http import MAX_CONNECTIONS, Response, serve_http
from trunner.serve import run_worker


async def ok() -> Response:
    await trio.lowlevel.checkpoint()
    return 200, "text/plain", b"ok\n"


ROUTES = {"/healthz": ok}


async def get(port: int, path: str = "/healthz") -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        answer = b""
        while chunk := await stream.receive_some(4096):
            answer += chunk
    return answer


def non_loopback_address() -> str | None:
    """An address of this machine other than loopback, if it has one (nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_the_endpoints_listen_on_loopback_unless_told_otherwise() -> None:
    assert inspect.signature(serve_http).parameters["host"].default == "127.0.0.1"
    assert inspect.signature(run_worker).parameters["host"].default == "127.0.0.1"
    args = cli._parser().parse_args(["worker", "app:settings", "--health-port", "0"])
    assert args.host == "127.0.0.1"
    args = cli._parser().parse_args(["worker", "app:settings", "--host", "0.0.0.0"])
    assert args.host == "0.0.0.0"


async def test_the_default_server_is_not_reachable_from_another_interface() -> None:
    other = non_loopback_address()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_http, ROUTES, 0)
        assert (await get(port)).startswith(b"HTTP/1.1 200 OK")
        if other is not None:
            with pytest.raises(OSError, match="connect"):
                await trio.open_tcp_stream(other, port)
        nursery.cancel_scope.cancel()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open files in /proc")
async def test_idle_connections_hold_at_most_a_few_file_descriptors() -> None:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_http, ROUTES, 0)
        before = open_files()
        idle = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(100)]
        await trio.testing.wait_all_tasks_blocked(cushion=0.05)
        accepted = open_files() - before - len(idle)
        assert accepted <= MAX_CONNECTIONS, f"{accepted} idle connections accepted"
        for stream in idle:
            await stream.aclose()
        nursery.cancel_scope.cancel()


async def test_idle_connections_are_closed_and_requests_then_answered() -> None:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            lambda task_status: serve_http(
                ROUTES, 0, max_connections=4, connection_time=0.2, task_status=task_status
            )
        )
        idle = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(12)]
        # Every idle connection is served in turn, then closed by the server.
        for stream in idle:
            assert await stream.receive_some(100) == b""
            await stream.aclose()
        assert (await get(port)).startswith(b"HTTP/1.1 200 OK")
        assert b"404" in (await get(port, "/nope")).split(b"\r\n")[0]
        nursery.cancel_scope.cancel()
