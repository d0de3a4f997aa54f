"""Eager mode for test suites: :func:`call_task` checks its arguments, then runs the core's
attempt loop (``trunner._eager``, which ``TaskRegistry.call`` runs too)."""

from __future__ import annotations

from typing import Any

from .._eager import DEFAULT_MAX_PAYLOAD_BYTES, run_eagerly
from ..task import Task, TaskRegistry, checked_task_name

__all__ = ["DEFAULT_MAX_PAYLOAD_BYTES", "call_task"]


async def call_task(
    tasks: TaskRegistry | Task,
    task_name: str | None = None,
    payload: Any = None,
    *,
    sleep_backoff: bool = False,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
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
    the failed-task handler, the dead-letter stream and ``trunner.current_runner()``.

    Args:
        tasks: A registry, or one [``Task``][trunner.Task].
        task_name: The task's name, with a registry.
        payload: The payload, JSON-serializable.
        sleep_backoff: Sleep the backoff between attempts.
        max_payload_bytes: The largest encoded message accepted (1 MiB by default, like
            ``RunnerConfig``).

    Returns:
        What the action returns.

    Raises:
        MaxRetryExceeded: The last attempt failed, like a runner gives up; ``__cause__``
            is the last attempt's exception.
        TaskNotFound: The registry has no task of that name.
        TypeError: ``tasks`` is neither a registry nor a task, or ``task_name`` is not a
            string.
        InvalidPayload: The payload is not JSON-serializable, or too large.
    """
    task = _resolve(tasks, task_name)
    return await run_eagerly(
        task, payload, sleep_backoff=sleep_backoff, max_payload_bytes=max_payload_bytes
    )


def _resolve(tasks: TaskRegistry | Task, task_name: str | None) -> Task:
    if isinstance(tasks, Task):
        return tasks
    if not isinstance(tasks, TaskRegistry):
        raise TypeError(f"call_task() takes a TaskRegistry or a Task, got {type(tasks).__name__}")
    return tasks.get(checked_task_name(task_name))
