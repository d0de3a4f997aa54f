"""Eager mode for test suites: :func:`call_task` checks its arguments, then runs the core's
attempt loop (``trunner._executors.eager``, which ``TaskRegistry.call`` runs too)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .._context import _current_runner
from .._executors.eager import DEFAULT_MAX_PAYLOAD_BYTES, run_eagerly
from .._task import Task, checked_task_name
from ..errors import RunnerNotRunning
from ..middleware import Middleware
from ..registry import TaskRegistry
from ..runner import Runner
from ..statistics import RunnerState

__all__ = ["DEFAULT_MAX_PAYLOAD_BYTES", "call_task"]


async def call_task(
    tasks: TaskRegistry | Task,
    task_name: str | None = None,
    payload: Any = None,
    *,
    sleep_backoff: bool = False,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    runner: Runner | None = None,
    headers: Mapping[str, str] | None = None,
    middleware: Iterable[Middleware] = (),
) -> Any:
    """Run a task now, in the calling Trio task, as a runner would, without Redis.

    ``await tasks.call("name", payload)`` does the same. The payload makes the JSON round
    trip a dispatch makes (a payload ``dispatch`` refuses raises the same error here, and
    the action sees what a worker would see); attempts are numbered 1 .. ``max_retry +
    1``, each with its own message id and the same task id, and
    ``trunner.current_message()`` works inside. Exceptions that are not ``Exception``
    (cancellation, ``KeyboardInterrupt``) pass through.

    Backoff between attempts is computed (``retry_backoff``) but not slept unless
    ``sleep_backoff`` (on the Trio clock: use a ``MockClock`` to skip it). Not emulated:
    the failed-task handler and the dead-letter stream.

    ``trunner.current_runner()`` inside the task is ``runner``: its
    [``redis``][trunner.Runner.redis] handle and its ``dispatch`` work as in a runner's
    task (on its Redis, in its group). Without ``runner``, ``current_runner()`` raises
    [``RunnerNotRunning``][trunner.errors.RunnerNotRunning], and the call raises it at once,
    saying how to give the task a runner (no retry: the test, not the attempt, is wrong).

    Args:
        tasks: A registry, or one [``Task``][trunner.Task].
        task_name: The task's name, with a registry.
        payload: The payload, JSON-serializable.
        sleep_backoff: Sleep the backoff between attempts.
        max_payload_bytes: The largest encoded message accepted (1 MiB by default, like
            ``RunnerConfig``).
        runner: A started runner for ``trunner.current_runner()`` in the task, e.g. one
            of the ``trunner_runner`` fixture (on a ``memory://`` server by default).
        headers: The message's headers, as ``dispatch`` takes them
            (``current_message().headers`` in the task).
        middleware: [Middleware][trunner.Middleware] run as a runner runs them: the
            ``on_dispatch`` hooks once, the ``around_attempt`` hooks around each attempt.
            A middleware that swallows an attempt's exception or cancellation raises
            [``MiddlewareError``][trunner.errors.MiddlewareError] (a runner reports it).

    Returns:
        What the action returns.

    Raises:
        MaxRetryExceeded: The last attempt failed, like a runner gives up; ``__cause__``
            is the last attempt's exception.
        TaskNotFound: The registry has no task of that name.
        TypeError: ``tasks`` is neither a registry nor a task, or ``task_name`` is not a
            string.
        InvalidPayload: The payload is not JSON-serializable, or too large.
        RunnerNotRunning: ``runner`` is not started; or the task called
            ``trunner.current_runner()`` and no ``runner`` was given.
    """
    task = _resolve(tasks, task_name)
    if runner is not None and runner.state is not RunnerState.STARTED:
        raise RunnerNotRunning(f"call_task(runner=...) needs a started runner; {runner!r}")
    token = _current_runner.set(runner) if runner is not None else None
    try:
        return await run_eagerly(
            task,
            payload,
            sleep_backoff=sleep_backoff,
            max_payload_bytes=max_payload_bytes,
            headers=headers,
            middleware=middleware,
        )
    finally:
        if token is not None:
            _current_runner.reset(token)


def _resolve(tasks: TaskRegistry | Task, task_name: str | None) -> Task:
    if isinstance(tasks, Task):
        return tasks
    if not isinstance(tasks, TaskRegistry):
        raise TypeError(f"call_task() takes a TaskRegistry or a Task, got {type(tasks).__name__}")
    return tasks.get(checked_task_name(task_name))
