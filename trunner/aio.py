"""Dispatching from asyncio code (FastAPI, Starlette, Django's async views, aiohttp,
scripts): :class:`Client`, the Trio client's producer driven on the running asyncio loop.

```python
client = trunner.aio.Client("redis://localhost:6379/0", queue="images", tasks=tasks)

async with client:  # or: await client.open() ... await client.aclose()
    handle = await client.dispatch(resize, ResizeRequest(path="a.png"))
    thumb = await handle.result(timeout=10)
```

The dispatching, the lanes, the result waiting and the admin queries are the Trio
client's own code (``trunner._producer``), written against two ports: a Redis transport
(here redis-py's asyncio client, ``trunner._redis``) and the event loop's primitives
(here ``_ASYNCIO``). Only those two ports are asyncio's.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TypeVar

from ._producer.dispatch import Producer
from ._producer.dispatching import DispatchCalls
from ._producer.opening import ClientArgs
from ._producer.scheduling import ScheduleCalls
from ._redis import (
    AioTransport,
    Broker,
    close_aio_transport,
    open_aio_transport,
)
from ._util import connection_name, logger
from ._waiting.runtime import Event, Runtime
from ._waiting.waiters import Waiters
from .admin import Admin
from .errors import RunnerNotRunning

__all__ = ["Client"]

T = TypeVar("T")


class _Asyncio:
    """The asyncio runtime: the producer core's primitives on the running asyncio loop."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def event(self) -> Event:
        return asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def shielded(self, fn: Callable[[], Awaitable[None]]) -> None:
        await asyncio.shield(fn())

    async def until(self, deadline: float, fn: Callable[[], Awaitable[T]]) -> tuple[bool, T | None]:
        if math.isinf(deadline):
            return True, await fn()
        timeout = asyncio.timeout_at(deadline)
        try:
            async with timeout:
                return True, await fn()
        except TimeoutError:
            if not timeout.expired():
                raise
        return False, None


#: The asyncio runtime of the producer core.
_ASYNCIO: Runtime = _Asyncio()

#: What the client is called in its errors, with how to open it.
_NAME = "trunner.aio.Client (open it first: async with client, or await client.open())"


class Client(ClientArgs, DispatchCalls, ScheduleCalls):
    """A client of one consumer group for asyncio code: dispatches tasks, waits for their
    results, and through its [``admin``][trunner.aio.Client.admin] inspects and
    administers the group.

    Make it anywhere (it connects when opened), open it once for the life of the
    application (``async with client:``, e.g. in a FastAPI/Starlette lifespan, or
    ``await client.open()`` and ``await client.aclose()``), and share it between every
    task of that asyncio loop: it holds a pool of connections, and one subscription
    through which every handle's ``result()`` is woken (no polling). Its dispatch
    methods, handles and admin are the Trio client's (see
    [``Client``][trunner.Client]), awaited on asyncio: the same messages, keys, scripts,
    checks and errors.

    The arguments are those of [``open_client``][trunner.open_client] (``redis`` is any
    URL but ``memory://``, which lives in a Trio program: ``ValueError``). They are
    checked here, before connecting.
    """

    def _made(self) -> None:
        options = self._options
        self._dispatcher = Producer(
            registry=options["tasks"],
            max_payload_bytes=options["max_payload_bytes"],
            middleware=options["middleware"],
            name=_NAME,
            runtime=_ASYNCIO,
        )
        self._transport: AioTransport | None = None
        #: While ``open`` connects: a second ``open`` is refused, an ``aclose`` is kept for
        #: when it has connected (set to True then).
        self._opening: bool | None = None
        self._admin: Admin | None = None
        self._serving: asyncio.Task[None] | None = None
        #: Set once the last close ended: a close while another one runs waits for it.
        self._closed: asyncio.Event | None = None

    def __repr__(self) -> str:
        return f"<trunner.aio.Client group={self.consumer_group!r}>"

    @property
    def consumer_group(self) -> str:
        """The group this client dispatches to."""
        return self.keys.group

    @property
    def admin(self) -> Admin:
        """The [``Admin``][trunner.admin.Admin] of the client's group, over the client's
        connections: ``await client.admin.pause()``, ``await client.admin.inspect()`` ...

        Raises:
            RunnerNotRunning: The client is not open.
        """
        if self._admin is None:
            raise RunnerNotRunning(f"{_NAME} is not open")
        return self._admin

    async def open(self) -> Client:
        """Connect (Redis must answer within ``connect_timeout``); return the client.

        Raises:
            RuntimeError: The client is open already.
            RedisUnavailable: Redis cannot be reached, or refused to log in.
        """
        if self._transport is not None or self._opening is not None:
            raise RuntimeError("this trunner.aio.Client is open already")
        self._opening = False
        try:
            transport = await open_aio_transport(
                self._url,
                client_name=connection_name(f"trunner-aio:{self.keys.queue}"),
                max_connections=self._options["max_connections"],
                connect_timeout=self._options["connect_timeout"],
                command_timeout=self._options["command_timeout"],
            )
        finally:
            closed_meanwhile, self._opening = self._opening, None
        if closed_meanwhile:
            await close_aio_transport(transport)
            raise RunnerNotRunning(f"{_NAME} was closed while it connected")
        broker = Broker(transport, self.keys)
        waiters = Waiters(broker, _ASYNCIO)
        self._serving = asyncio.get_running_loop().create_task(
            waiters.serve(), name=f"trunner.aio waiters of {self.keys.group}"
        )
        self._serving.add_done_callback(_log_failure)
        self._dispatcher.open(broker, waiters)
        self._admin = Admin(
            broker,
            registry=self._dispatcher.registry,
            max_payload_bytes=self._dispatcher.max_payload_bytes,
            instance_ttl=self._options["instance_ttl"],
            name=_NAME,
            calls=self._dispatcher._calls(),
        )
        self._transport = transport
        return self

    async def aclose(self) -> None:
        """Close the client, letting the calls under way end first.

        From the start of the close, every call raises ``RunnerNotRunning`` at once, until
        the client is opened again, and so do handles still waiting for an outcome
        (``result()``, ``cancel(wait=True)``). The other calls under way (a dispatch, a
        handle's ``status()``, an admin query) end before the connections close: once this
        returns, each of them has completed, or failed on its own (say, Redis did not
        answer within ``command_timeout``). Closing a closed client does nothing; a close
        while another one runs returns once that one ended.
        """
        if self._opening is not None:
            self._opening = True  # open closes what it connected, and raises
        transport, self._transport = self._transport, None
        serving, self._serving = self._serving, None
        if transport is None:
            if self._closed is not None:
                await self._closed.wait()
            return
        closed = self._closed = asyncio.Event()
        calls = self._dispatcher._calls()
        self._dispatcher.close()
        if self._admin is not None:
            self._admin._close()
            self._admin = None
        try:
            if serving is not None:
                serving.cancel()
                await asyncio.wait([serving])
            await calls.ended()
        finally:
            await close_aio_transport(transport)
            closed.set()

    async def __aenter__(self) -> Client:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


def _log_failure(task: asyncio.Task[None]) -> None:
    """Log how the waiters' task failed (a defect: waiting handles raise
    ``RunnerNotRunning``)."""
    if not task.cancelled() and (error := task.exception()) is not None:
        logger.error("the waiters of a trunner.aio.Client failed", exc_info=error)
