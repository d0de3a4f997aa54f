"""The one protocol every way of running a task body follows (an :class:`Executor`), and
the table that binds each task of a registry to the body its executor makes, once per run.

A task body runs in one of three places (``Task.run_in``): on the event loop (an
``async def``: its action *is* its body, so the pool's hot path awaits it directly and pays
nothing for executors), in a worker thread (a plain ``def``), or in a worker process
(``run_in="process"``). Whatever the place, the body is awaited in the attempt's Trio
task, so a timeout or a cancellation of the attempt ends the await at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

from .._task import RunIn

__all__ = ["RUN_IN", "Body", "Executor", "LoopExecutor", "RunIn", "bind_bodies"]

#: Where a task body runs: on the event loop, in a worker thread, in a worker process.
RUN_IN: tuple[RunIn, ...] = ("loop", "thread", "process")

#: What an attempt awaits: ``await body(payload)`` returns the action's result.
Body = Callable[[Any], Awaitable[Any]]


class Executor(Protocol):
    """Makes the body that runs an action in one place (the loop, a thread, a process)."""

    def body(self, action: Callable[[Any], Any], name: str) -> Body:
        """The body of the task ``name`` whose action is ``action``: ``await
        body(payload)`` runs ``action(payload)`` here and returns its result; a
        cancellation of the awaiting task ends the await at once."""
        ...


class LoopExecutor:
    """Runs ``async def`` actions on the event loop: the body is the action itself."""

    def body(self, action: Callable[[Any], Any], name: str) -> Body:
        del name
        return action


class _Runnable(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def action(self) -> Callable[[Any], Any]: ...
    @property
    def run_in(self) -> RunIn | None: ...


def bind_bodies(tasks: Iterable[_Runnable], executors: Mapping[RunIn, Executor]) -> dict[str, Body]:
    """Each task's body, by name, made once by the executor of its ``run_in``."""
    return {
        task.name: executors[task.run_in or "loop"].body(task.action, task.name) for task in tasks
    }
