"""Serving the dashboard on hypercorn's Trio worker, and the ``trunner dashboard`` command.

The library never installs signal handlers: :func:`serve_dashboard` runs until cancelled
(or until ``shutdown_trigger`` returns). The command owns SIGINT and SIGTERM.
"""

from __future__ import annotations

import functools
import ipaddress
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import cast

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from hypercorn.typing import Framework
from hypercorn.utils import LifespanFailureError
from starlette.types import ASGIApp

from trunner import TaskRegistry

from ._app import create_app

__all__ = ["allowed_hosts_for", "is_loopback", "run_dashboard", "serve_dashboard"]

#: Host headers a loopback dashboard without a token answers (against DNS rebinding),
#: besides the address it is bound to.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` serves this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts_for(host: str, token: str | None) -> tuple[str, ...] | None:
    """The ``Host`` headers a dashboard bound to ``host`` answers: with a token, any (the
    token guards it); bound to loopback without one, only loopback names and the bound
    address (a name of another's that resolves to loopback is DNS rebinding)."""
    if token is not None or not is_loopback(host):
        return None
    bound = host.strip("[]")
    return LOOPBACK_HOSTS if bound in LOOPBACK_HOSTS else (*LOOPBACK_HOSTS, bound)


async def serve_dashboard(
    app: ASGIApp,
    host: str = "127.0.0.1",
    port: int = 8080,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` with hypercorn's Trio worker until cancelled or ``shutdown_trigger``
    returns; ``task_status.started`` gets the URLs it listens on (port 0: a free port)."""
    config = Config()
    bracketed = f"[{host}]" if ":" in host and not host.startswith("[") else host
    config.bind = [f"{bracketed}:{port}"]
    config.accesslog = None
    config.errorlog = None  # trunner says where it listens; errors reach the logging tree
    config.graceful_timeout = 1.0  # event streams never end by themselves
    await serve(
        cast(Framework, app), config, shutdown_trigger=shutdown_trigger, task_status=task_status
    )


async def run_dashboard(
    redis_url: str,
    groups: Sequence[str],
    *,
    host: str,
    port: int,
    read_only: bool,
    token: str | None,
    tasks: TaskRegistry | None,
    prefix: str,
    interval: float = 1.0,
) -> int:
    """``trunner dashboard``: refuse an unsafe bind, then serve until SIGINT or SIGTERM
    (``groups``: those named; none: every group found)."""
    if not is_loopback(host) and token is None:
        raise ValueError(
            f"refusing to serve on {host}, beyond this machine, without a token: pass "
            "--token or --token-file (or bind 127.0.0.1 and use an SSH tunnel)"
        )
    app = create_app(
        redis_url,
        groups,
        read_only=read_only,
        token=token,
        tasks=tasks,
        prefix=prefix,
        interval=interval,
        allowed_hosts=allowed_hosts_for(host, token),
    )
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

        async def stop_on_signal() -> None:
            async for signum in signals:
                print(f"{signal.Signals(signum).name}: stopping", file=sys.stderr)
                return

        try:
            async with trio.open_nursery() as nursery:
                serving = functools.partial(serve_dashboard, shutdown_trigger=stop_on_signal)
                urls = await nursery.start(serving, app, host, port)
                # Hypercorn serves, and reports its address, even when the app's startup
                # failed; the failure comes after. Say where it serves only if it started.
                if app.state.dashboard.started:
                    for url in urls:
                        print(f"trunner dashboard on {url}/", flush=True)
        except BaseExceptionGroup as error:
            if (why := _startup_failure(error)) is not None:
                raise why from None  # Redis unreachable, groups not found ...: one line
            raise
    return 0


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def _startup_failure(error: BaseException) -> BaseException | None:
    """The one error that failed the app's startup (its lifespan: finding the groups,
    opening their clients), which hypercorn reports as a LifespanFailureError raised
    while handling it; None if ``error`` is not that."""
    leaves = _leaves(error)
    if len(leaves) != 1 or not isinstance(leaves[0], LifespanFailureError):
        return None
    context = leaves[0].__context__
    causes = _leaves(context) if context is not None else []
    return causes[0] if len(causes) == 1 and isinstance(causes[0], Exception) else None
