"""Runs the body of a plain ``def`` task in a worker thread, under a limiter of its own.

``await body(payload)`` is ``trio.to_thread.run_sync(action, payload)`` with
``abandon_on_cancel=True`` and the executor's own :class:`trio.CapacityLimiter`, never
Trio's default one: the runner's own thread work (name lookups, file reads) never waits
behind task code, nor task code behind it.

What the thread sees and may do:

- the attempt's :mod:`contextvars` (Trio copies them into the thread), so
  ``current_message()`` and ``current_runner()`` work there;
- ``trio.from_thread.run(afn, ...)`` runs ``afn`` on the event loop, in those same context
  variables: ``trunner.report_progress`` and the runner's Redis handle are used that way;
- ``trio.from_thread.check_cancelled()`` raises ``trio.Cancelled`` once the attempt was
  cancelled or timed out, so a loop that calls it stops early.

A timeout or a cancellation ends the *attempt* at once: the await raises, and the attempt
fails with ``TaskTimeout`` or is cancelled, as an ``async def`` one would. A thread cannot be
killed, so it is **abandoned**: it runs on until its function returns, still holding its
token of the limiter (so runaway threads never grow past the limit), and what it returns or
raises then is dropped by Trio, never recorded as an outcome, and its progress reports are
fenced to its delivery (``DESIGN.md`` §5), so discarded once the attempt has ended. Other
calls it makes through the runner after that (commands on the Redis handle, dispatches)
still run: a thread that may outlive its timeout should check for cancellation before
such a call.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import trio

from .base import Body

__all__ = ["ThreadExecutor"]


def _call(action: Callable[[Any], Any], payload: Any, started: list[bool]) -> Any:
    """In the worker thread: the action, refusing a result that is awaitable (a sync
    function that returns a coroutine would have it dropped unawaited)."""
    started.append(True)
    result = action(payload)
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if close is not None:
            close()  # no "never awaited" warning on top of this error
        raise TypeError(
            f"{action!r} returned an awaitable from a worker thread: define the task with "
            "'async def' to run it on the event loop"
        )
    return result


class ThreadExecutor:
    """Worker threads for ``def`` task bodies, at most ``limit`` at once (abandoned ones
    included, until they return)."""

    def __init__(self, limit: int) -> None:
        self.limiter = trio.CapacityLimiter(limit)
        #: Attempts whose thread was abandoned (their timeout or cancellation came first).
        self.abandoned = 0

    def body(self, action: Callable[[Any], Any], name: str) -> Body:
        del name
        limiter = self.limiter
        run_sync = trio.to_thread.run_sync

        async def in_thread(payload: Any) -> Any:
            started: list[bool] = []  # appended to by the thread (waiting for the limiter
            try:  # and cancelled there abandons nothing)
                return await run_sync(
                    _call, action, payload, started, limiter=limiter, abandon_on_cancel=True
                )
            except trio.Cancelled:
                if started:
                    self.abandoned += 1
                raise

        return in_thread

    @property
    def running(self) -> int:
        """Threads running a task body now (abandoned ones included)."""
        return int(self.limiter.borrowed_tokens)
