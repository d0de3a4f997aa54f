"""Run a coroutine inside a Trio task, in a context of its own, and learn when it first waits.

The pool runs many short jobs one after the other in one Trio task (a *worker*) instead of
spawning a Trio task per job: spawning is the largest per-message cost of a busy runner.
Two things a task of its own gave each job are kept:

- its own :mod:`contextvars` context: every step of the job runs inside a fresh copy of the
  worker's context, so a variable a task sets is never seen by the next task the worker
  runs (as with one Trio task per job);
- concurrency: the first time a job suspends (a checkpoint, a sleep, a Redis call), the
  worker is told before the suspension is passed on to Trio, so it can hand the jobs that
  are waiting to other workers instead of holding them behind a job that waits.

The coroutine's suspensions are passed to Trio unchanged and Trio's answers (values,
exceptions such as ``Cancelled``) are passed back unchanged, so to the job the worker is an
ordinary Trio task; ``trio.lowlevel.current_task()`` is the worker's.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Generic, TypeVar

__all__ = ["Isolated"]

T = TypeVar("T")
A = TypeVar("A")


class Isolated(Generic[T, A]):
    """``await Isolated(coro, context, on_first_wait, arg)``: await ``coro``, each of its
    steps run in ``context``; call ``on_first_wait(arg)`` once, when ``coro`` first
    suspends (never if it finishes without suspending). ``on_first_wait`` runs in the
    caller's context, not in ``context``.

    An iterator that drives the coroutine step by step (not a generator): it shows the
    coroutine's frames to Trio's task introspection (``Task.iter_await_frames``) as
    ``gi_frame`` / ``gi_yieldfrom``, as a ``yield from`` would.
    """

    __slots__ = ("_arg", "_context", "_coro", "_on_first_wait")

    def __init__(
        self,
        coro: Coroutine[Any, Any, T],
        context: contextvars.Context,
        on_first_wait: Callable[[A], object],
        arg: A,
    ) -> None:
        self._coro = coro
        self._context = context
        self._on_first_wait: Callable[[A], object] | None = on_first_wait
        self._arg = arg

    def __await__(self) -> Generator[Any, Any, T]:
        return self  # an iterator speaking the generator protocol (send, throw, close)

    def __iter__(self) -> Isolated[T, A]:
        return self

    def __next__(self) -> Any:
        # StopIteration (the coroutine returned) ends the await with its value.
        on_first_wait = self._on_first_wait
        if on_first_wait is None:
            return self._context.run(self._coro.send, None)
        trap = self._context.run(self._coro.send, None)  # the first step
        self._on_first_wait = None
        on_first_wait(self._arg)
        return trap

    def send(self, answer: Any) -> Any:
        if self._on_first_wait is not None:
            return self.__next__()  # the first step: only None can be sent
        return self._context.run(self._coro.send, answer)

    def throw(self, *exc: Any) -> Any:
        """Trio's answer is an exception (e.g. ``Cancelled``): the coroutine's to handle."""
        return self._context.run(self._coro.throw, *exc)

    def close(self) -> None:
        self._context.run(self._coro.close)

    @property
    def gi_frame(self) -> Any:
        return getattr(self._coro, "cr_frame", None)

    @property
    def gi_yieldfrom(self) -> Any:
        return getattr(self._coro, "cr_await", None)
