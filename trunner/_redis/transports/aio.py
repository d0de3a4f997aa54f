"""redis-py's asyncio client on the caller's own asyncio loop: the transport of the asyncio
client (``trunner.aio``).

:class:`AioTransport` is the bridged transport without the bridge: the same redis-py
clients and pools, built the same way for every URL (one server, TLS, ACL, Cluster,
Sentinel), the same dedicated subscriber connections and the same error map; only the
calls are awaited directly on the running asyncio loop, bounded by asyncio timeouts. It
dispatches and waits for results; it reads no streams (a worker runs on Trio).

On Sentinel it follows the master as the bridged transport does, with the same code
(:meth:`~trunner._redis.transports.bridged.BridgedTransport.follow_master`'s two duties,
run as asyncio tasks from opening to closing): at each ``+switch-master`` and every
``MASTER_CHECK`` seconds it asks the sentinels for the master; then no command goes on a
connection to another node, and the result subscription is moved to the new master.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from ..._util import logger
from ...errors import RedisUnavailable
from ..endpoints import parse_endpoint
from ..errors import map_exceptions, redis_py_errors
from ..urls import redact_url, refuse_memory
from .base import Reader
from .bridged import BridgedTransport
from .connect import no_answer, not_reached

__all__ = ["AioTransport", "open_aio_transport"]

T = TypeVar("T")

#: Bound on closing connections at shutdown.
CLOSE_TIMEOUT = 5.0


class AioTransport(BridgedTransport):
    """redis-py's asyncio client, called on the asyncio loop of its caller."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._heard = asyncio.Event()  # replaced each time the sentinels answered
        self._following: list[asyncio.Task[None]] = []

    def start_following(self) -> None:
        """Sentinel: follow the master on the running loop until :meth:`aclose` (as
        :meth:`~trunner._redis.transports.bridged.BridgedTransport.follow_master` does on
        Trio): listen to the sentinels' announcements, and ask them every few seconds."""
        if not self.follows_master or self._following:
            return
        loop = asyncio.get_running_loop()
        for duty in (self._follow_announcements, self._ask_for_master):
            task = loop.create_task(duty(), name=f"trunner: {duty.__name__[1:]}")
            task.add_done_callback(_log_failure)
            self._following.append(task)

    async def _sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def _park_master(self) -> None:
        await self._heard.wait()

    def _unpark_master(self) -> None:
        heard, self._heard = self._heard, asyncio.Event()
        heard.set()

    def _semaphore(self, size: int) -> AbstractAsyncContextManager[Any]:
        return asyncio.Semaphore(size)

    async def _call(
        self,
        make: Callable[[], Coroutine[Any, Any, T]],
        where: str,
        limit: float | None = None,
    ) -> T:
        limit = self.command_timeout if limit is None else limit
        try:
            async with asyncio.timeout(None if math.isinf(limit) else limit):
                with map_exceptions(redis_py_errors, where):
                    return await make()
        except TimeoutError:
            raise RedisUnavailable(f"{where}: no reply from Redis within {limit} s") from None

    async def _disconnect(self, conn: Any, where: str) -> None:
        if conn is None:
            await asyncio.sleep(0)
            return

        async def close() -> None:
            await conn.disconnect()

        await asyncio.shield(self._call(close, where))

    async def checkpoint(self) -> None:
        await asyncio.sleep(0)

    def open_reader(self, key: str | None = None) -> Reader:
        raise NotImplementedError("the asyncio client reads no streams: workers run on Trio")

    async def aclose(self) -> None:
        following, self._following = self._following, []
        for task in following:
            task.cancel()
        if following:
            await asyncio.wait(following)
        await super().aclose()


def _log_failure(task: asyncio.Task[None]) -> None:
    """Log how a duty following the master failed (a defect: the client keeps the master
    it knew until a command fails on a deposed one)."""
    if not task.cancelled() and (error := task.exception()) is not None:
        logger.error("following the Sentinel master failed", exc_info=error)


async def open_aio_transport(
    url: str,
    *,
    client_name: str,
    max_connections: int,
    connect_timeout: float,
    command_timeout: float,
) -> AioTransport:
    """A transport for ``url`` on the running asyncio loop, once Redis answered a ``PING``
    within ``connect_timeout``; close it with ``aclose``."""
    refuse_memory(url)
    transport = AioTransport(
        None,
        parse_endpoint(url),
        description=redact_url(url),
        client_name=client_name,
        max_connections=max_connections,
        connect_timeout=connect_timeout,
        command_timeout=command_timeout,
    )
    try:
        async with asyncio.timeout(connect_timeout):
            await transport.execute("PING")
    except TimeoutError:
        await close_aio_transport(transport)
        raise no_answer(transport.description, connect_timeout) from None
    except RedisUnavailable as exc:
        await close_aio_transport(transport)
        raise not_reached(transport.description, exc) from None
    except BaseException:
        await close_aio_transport(transport)
        raise
    transport.start_following()
    return transport


async def close_aio_transport(transport: AioTransport) -> None:
    """Close ``transport``'s connections, within :data:`CLOSE_TIMEOUT`."""
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT):
            await asyncio.shield(transport.aclose())
    except TimeoutError:
        pass
