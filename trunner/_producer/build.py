"""The pure half of a dispatch: the task resolved, the payload checked and encoded, the
lane and the unique lock chosen, the message built. No I/O: a producer core can drive it.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from .._task import TASK_ATTRIBUTE, Task, checked_task_name
from .._waiting.protocol import Known
from .._wire.envelope import encode_message
from .._wire.message import MessageOptions
from .._wire.names import DEFAULT_LANE, check_lane
from ..errors import InvalidPayload
from ..registry import TaskRegistry

if TYPE_CHECKING:
    import datetime

__all__ = [
    "TaskRef",
    "Unique",
    "delay_seconds",
    "encode",
    "known_of",
    "lane_of",
    "payload_of",
    "resolve",
    "timestamp_of",
    "unique_of",
]

#: What ``dispatch`` takes as the task: a registered task function, a ``Task``, or a name.
TaskRef = str | Task | Callable[..., Any]


@attrs.frozen
class Unique:
    """The lock a unique task takes: its key, a token of this dispatch, and its ttl."""

    key: str
    token: str
    ttl_ms: int
    seconds: float
    """``unique_for``, as the message carries it."""


def resolve(registry: TaskRegistry | None, task: TaskRef) -> tuple[str, Task | None]:
    """The name of the task to dispatch, and the registered task when known (checked
    against ``registry`` if there is one)."""
    if isinstance(task, str):
        checked_task_name(task)
        return task, registry.get(task) if registry is not None else None
    found = task if isinstance(task, Task) else getattr(task, TASK_ATTRIBUTE, None)
    if not isinstance(found, Task):
        raise TypeError(
            f"dispatch takes a task name, a Task, or a function registered with "
            f"@tasks.task; got {task!r}"
        )
    if registry is not None:
        return found.name, registry.get(found.name)
    return found.name, found


def encode(
    task_name: str,
    payload: Any,
    now: float,
    max_bytes: int,
    task_id: str | None = None,
    unique: Unique | None = None,
    options: MessageOptions | None = None,
    headers: Mapping[str, str] | None = None,
    lane: str = DEFAULT_LANE,
) -> bytes:
    """The message of one task, as the stream (or the delayed set) stores it."""
    return encode_message(
        task_name,
        payload,
        enqueued_at=now,
        task_id=task_id,
        unique_key=unique.key if unique else None,
        unique_token=unique.token if unique else None,
        unique_for=unique.seconds if unique else None,
        options=options,
        headers=headers,
        max_bytes=max_bytes,
        lane=lane,
    )


def payload_of(task: Task | None, payload: Any) -> Any:
    """The payload as JSON values: a typed task's (see ``trunner._wire.codec``) is encoded,
    and checked against its type as a runner will check it (so a payload that would be
    given up on is refused here, before anything is sent)."""
    if task is None or task.decode_payload is None:
        return payload
    codec = task.payload_codec
    encoded = codec.encode(payload) if codec.typed else payload
    try:
        task.decode_payload(encoded)
    except InvalidPayload as exc:
        raise InvalidPayload(f"payload of task {task.name!r} {exc}") from None
    return encoded


def lane_of(task: Task | None, priority: str | None) -> str:
    """The lane of a dispatch: its ``priority``, else the task's, else the default."""
    if priority is not None:
        return check_lane(priority)
    return task.priority if task is not None else DEFAULT_LANE


def unique_of(task: Task | None, payload: Any) -> Unique | None:
    """The lock a dispatch of a unique task takes (a fresh token); None for another task."""
    if task is None or not task.unique:
        return None
    key = task.key_for(payload)
    return Unique(key, secrets.token_hex(16), task.unique_for_ms, task.unique_for or 0.0)


def known_of(name: str, task: Task | None, options: MessageOptions | None) -> Known:
    """What the handles of a dispatch know: the task's name, and the ``keep_result`` its
    dispatch or its task (when known here) sets."""
    if options is not None and options.keep_result is not None:
        return Known(name, options.keep_result, "dispatch", dispatched=True)
    if task is not None:
        return Known(name, task.keep_result, "task", dispatched=True)
    return Known(name, dispatched=True)


def delay_seconds(delay: float | datetime.timedelta) -> float:
    """``dispatch_delayed``'s ``delay`` in seconds, checked."""
    seconds: Any = delay
    if not isinstance(delay, int | float):
        import datetime  # noqa: PLC0415 - only for a timedelta; workers never need it

        if isinstance(delay, datetime.timedelta):
            seconds = delay.total_seconds()
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        raise TypeError(f"delay must be seconds or a timedelta, got {type(delay).__name__}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"delay must be a finite number of seconds >= 0, got {delay!r}")
    return float(seconds)


def timestamp_of(when: datetime.datetime) -> float:
    """``schedule_for``'s ``when`` in seconds since the epoch, checked."""
    import datetime  # noqa: PLC0415 - not loaded by workers that never need it

    if not isinstance(when, datetime.datetime):
        raise TypeError(f"when must be a datetime, got {type(when).__name__}")
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError("when must be an aware datetime (with a time zone), got a naive one")
    return when.timestamp()
