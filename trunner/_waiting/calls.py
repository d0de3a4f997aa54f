"""The calls in flight on a producer's connections (its dispatches, its handles' looks and
waits, its admin's queries), counted so that a client's close can let them end before it
closes the connections (on the loop of its runtime: Trio or asyncio).

A client made outside Trio closes so (``trunner.aio``, ``trunner.sync``): it refuses every
new call, ends the waits for outcomes, then awaits :meth:`Calls.ended` before it closes
its connections; so a dispatch under way when it closes completes, and no call ever meets
connections closed under it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol, TypeVar

from .runtime import TRIO, Event, Runtime

__all__ = ["Calls", "Counted", "counting"]

C = TypeVar("C", bound=type)


class Calls:
    """The calls in flight on one producer's connections (see the module docs)."""

    def __init__(self, runtime: Runtime = TRIO) -> None:
        self._runtime = runtime
        self._count = 0
        self._none: Event | None = None

    @contextlib.contextmanager
    def counted(self) -> Iterator[None]:
        """Count the call made in this block."""
        self._count += 1
        try:
            yield
        finally:
            self._count -= 1
            if not self._count and self._none is not None:
                self._none.set()

    async def ended(self) -> None:
        """Return once no call is in flight (new ones are refused first: else it may not)."""
        while self._count:
            self._none = self._runtime.event()
            await self._none.wait()


class Counted(Protocol):
    """What :func:`counting` needs of the objects whose calls it counts."""

    def _calls(self) -> Calls: ...


def counting(cls: C) -> C:
    """Count every call of the public coroutine methods of ``cls`` (a :class:`Counted`) in
    its ``_calls()``: a class decorator, so that no method added later is forgotten."""
    for name, method in list(vars(cls).items()):
        if not name.startswith("_") and inspect.iscoroutinefunction(method):
            setattr(cls, name, _counted(method))
    return cls


def _counted(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def call(self: Counted, *args: Any, **kwargs: Any) -> Any:
        with self._calls().counted():
            return await method(self, *args, **kwargs)

    return call
