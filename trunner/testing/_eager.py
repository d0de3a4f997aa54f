"""Eager mode: run a task's action directly, as a runner would, without Redis."""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

import trio

from .._context import Given, _current_message
from ..errors import MaxRetryExceeded
from ..message import PAYLOAD_FIELD, decode_message, encode_message, reencode_for_retry
from ..task import Task, TaskRegistry

__all__ = ["DEFAULT_MAX_PAYLOAD_BYTES", "call_task"]

#: The largest encoded message eager calls accept (``RunnerConfig``'s default).
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
#: Re-encoding a message for its next attempt never fails on size (as in the runner).
_NO_LIMIT = 1 << 62

_eager_ids = itertools.count(1)


def _eager_id() -> str:
    return f"{int(time.time() * 1000)}-{next(_eager_ids)}"


async def call_task(
    tasks: TaskRegistry | Task,
    task_name: str | None = None,
    payload: Any = None,
    *,
    sleep_backoff: bool = False,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> Any:
    """Run a task now, in the calling Trio task, as a runner would, without Redis.

    ``await tasks.call("name", payload)`` calls this. The payload makes the JSON round trip
    a dispatch makes (a payload ``dispatch`` refuses raises the same error here, and the
    action sees what a worker would see); attempts are numbered 1 .. ``max_retry + 1``,
    each with its own message id and the same task id, and ``trunner.current_message()``
    works inside. Returns what the action returns; after the last failed attempt raises
    :class:`~trunner.MaxRetryExceeded` from the last error, like a runner gives up.
    Exceptions that are not ``Exception`` (cancellation, KeyboardInterrupt) pass through.

    Backoff between attempts is computed (``retry_backoff``) but not slept unless
    ``sleep_backoff`` (on the Trio clock: use a ``MockClock`` to skip it). Not emulated:
    the failed-task handler, the dead-letter stream and ``trunner.current_runner()``.
    """
    task = _resolve(tasks, task_name)
    unique_key = task.key_for(payload) if task.unique else None
    data = encode_message(
        task.name,
        payload,
        enqueued_at=time.time(),
        unique_key=unique_key,
        unique_token=uuid.uuid4().hex if unique_key is not None else None,
        max_bytes=max_payload_bytes,
    )
    message = decode_message(_eager_id(), [PAYLOAD_FIELD, data])
    while True:
        result: Any = None
        failure: Exception | None = None
        token = _current_message.set(Given(message))
        try:
            result = await task.action(message.payload)
        except Exception as exc:  # noqa: BLE001 - a failed attempt, like the runner's
            failure = exc
        finally:
            _current_message.reset(token)
        if failure is None:
            return result
        if message.attempt >= task.max_attempts:
            raise MaxRetryExceeded(task.name, message.attempt) from failure
        delay = task.retry_delay(message.attempt)
        if sleep_backoff:
            await trio.sleep(delay)
        else:
            await trio.lowlevel.checkpoint()
        data = reencode_for_retry(message, message.attempt + 1, _NO_LIMIT)
        message = decode_message(_eager_id(), [PAYLOAD_FIELD, data])


def _resolve(tasks: TaskRegistry | Task, task_name: str | None) -> Task:
    if isinstance(tasks, Task):
        return tasks
    if not isinstance(tasks, TaskRegistry):
        raise TypeError(f"call_task() takes a TaskRegistry or a Task, got {type(tasks).__name__}")
    if not isinstance(task_name, str):
        raise TypeError(f"task_name must be a str, got {type(task_name).__name__}")
    if not task_name:
        raise ValueError("task_name must not be empty")
    return tasks.get(task_name)
