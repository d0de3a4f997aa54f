"""The few primitives of an event loop that the producer's coroutines use, as a port:
the Trio one here, the asyncio one beside the asyncio client (``trunner.aio``).

The producer core (dispatch, the lanes, the waiters, task handles, admin queries, the
broker's scripts) is written once, as coroutines that await only their ports: a
``Transport`` for Redis, and this for the clock, events, sleeping, shielding and
deadlines. Neither Trio nor asyncio is called by name in it, so the same code runs on
either loop; a synchronous client drives the Trio one from a thread of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import trio

__all__ = ["TRIO", "Event", "Runtime"]

T = TypeVar("T")


class Event(Protocol):
    """An event, as ``trio.Event`` and ``asyncio.Event`` both are."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...

    async def wait(self) -> object: ...


class Runtime(Protocol):
    """What the producer core asks of the event loop it runs on."""

    def now(self) -> float:
        """The loop's clock (seconds; deadlines are on it)."""
        ...

    def event(self) -> Event:
        """A new event."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``."""

    async def shielded(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn()`` to its end even if the caller is being cancelled (a cleanup)."""

    async def until(self, deadline: float, fn: Callable[[], Awaitable[T]]) -> tuple[bool, T | None]:
        """``(True, fn())``, or ``(False, None)`` when ``deadline`` (on :meth:`now`'s
        clock; ``math.inf``: none) passed first and ``fn`` was cancelled."""
        ...


class _Trio:
    """The Trio runtime."""

    def now(self) -> float:
        return trio.current_time()

    def event(self) -> Event:
        return trio.Event()

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)

    async def shielded(self, fn: Callable[[], Awaitable[None]]) -> None:
        with trio.CancelScope(shield=True):
            await fn()

    async def until(self, deadline: float, fn: Callable[[], Awaitable[T]]) -> tuple[bool, T | None]:
        with trio.move_on_at(deadline):
            return True, await fn()
        return False, None


#: The Trio runtime: the runner's, ``open_client``'s and the synchronous client's.
TRIO: Runtime = _Trio()
