"""The waiting protocol of a task handle, without I/O: what one look at a task says of it
(its status, its message), what the handle learns from it, and the outcome or the error
a wait ends with.

``TaskHandle`` (``trunner.handles``) drives it: it reads the looks (``Broker.task_look``)
and waits for the announcements (``trunner._waiting.waiters``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

from .._redis import TaskLook
from .._wire.codec import TypeCodec
from .._wire.decode import MessageDecodeError, decode_message
from .._wire.marks import split_deliveries
from .._wire.record import UNASKED_KEEP, as_time, read_record
from ..errors import (
    BadData,
    InvalidPayload,
    ResultExpired,
    ResultNotFound,
    ResultNotKept,
    ResultTimeout,
    TaskCancelled,
    TaskExpired,
    TaskFailed,
    TrunnerError,
)
from ..errors import RemoteFailure as _RemoteFailure
from ..status import TaskState, TaskStatus

__all__ = [
    "NOTHING_KNOWN",
    "Known",
    "deadline",
    "decode_result",
    "failure_of",
    "learned",
    "message_found",
    "not_found",
    "status_of",
    "too_slow",
]


@attrs.frozen
class Known:
    """What a handle knows of its task beyond its id: what its producer knew when it made
    the handle, and what its waits saw since. It tells, when no outcome is stored, whether
    the task ended without keeping one, or its outcome expired, or nothing is known of it
    (nothing is stored for a task that keeps no result: the acknowledgement stays cheap)."""

    task_name: str | None = None
    """The task's name."""
    keep: float | None = None
    """Its ``keep_result`` (None: none), when ``keep_from`` says where it comes from."""
    keep_from: str | None = None
    """``"dispatch"`` (the message says), ``"task"`` (the task's declaration, as the
    producer or the caller gave it), or None: not known."""
    dispatched: bool = False
    """Whether the task certainly was dispatched to the group (the handle was made by a
    dispatch, or a look saw the task's message)."""


#: A handle made by ``handle(task_id)``: nothing is known of its task.
NOTHING_KNOWN = Known()


def learned(known: Known, message: Any, declared: Callable[[str], Known | None]) -> Known:
    """What ``known`` becomes with the task's ``message`` (found by a look: delayed, queued,
    running, or acknowledged and left in the stream; None when none was found): it was
    dispatched, under its name, with the ``keep_result`` its dispatch or its task sets
    (``declared(name)``: what the producer's registry declares of the task, or None).
    A handle keeps what it learnt: one that saw its task queued knows, once it is gone,
    that it ended."""
    if message is None:
        return known
    name: str = message.task_name
    keep: float | None = message.options.keep_result
    if keep is not None:
        return Known(name, keep, "dispatch", dispatched=True)
    if known.keep_from is not None and known.task_name == name:
        return attrs.evolve(known, dispatched=True)
    return declared(name) or Known(name, dispatched=True)


def too_slow(
    task_id: str, timeout: float | None, status: TaskStatus | None, known: Known, now: float
) -> ResultTimeout:
    """The error of a wait that ran out of time, naming the task and where it was (``now``:
    the wall clock, for how far away a due time is)."""
    name = (status.task if status is not None else None) or known.task_name
    if status is None:
        where = "no look at it ended in time"
    else:
        where = f"at the last look it was {status.state.value}"
        if status.attempt is not None and status.attempt > 1:
            where += f" (attempt {status.attempt})"
        if status.instance is not None:
            where += f" on {status.instance}"
        if status.due_at is not None:
            where += f", due in {max(status.due_at - now, 0.0):.3g} s"
    return ResultTimeout(
        f"no outcome of task {task_id}{_named(name)} within {timeout:g} s: {where} "
        "(the task goes on; only the wait ended)",
        task_id,
        name,
        timeout or 0.0,
        status.state if status is not None else None,
    )


def failure_of(task_id: str, status: TaskStatus, look: TaskLook) -> TrunnerError:
    """The error ``result()`` raises for a task that finished otherwise than succeeded."""
    if status.state is TaskState.CANCELLED:
        return TaskCancelled(f"task {task_id} ({status.task}) was cancelled")
    if status.state is TaskState.EXPIRED:
        return TaskExpired(f"task {task_id} ({status.task}) expired before it started")
    error = status.error
    failure = _RemoteFailure(
        error.type if error else "Error",
        error.message if error else "",
        error.traceback if error else "",
    )
    message_id = look.record.get(b"message_id", b"").decode("utf-8", "replace")
    return TaskFailed(status.task or "", message_id, status.attempt or 0, failure)


def not_found(task_id: str, group: str, known: Known) -> ResultNotFound:
    """Why no outcome of ``task_id`` is stored in ``group``, as far as ``known`` tells (see
    :class:`Known`)."""
    name = known.task_name
    task = _named(name)
    keep_it = (
        "to await its result, keep it: @tasks.task(keep_result=SECONDS) on the task, or "
        "dispatch(..., keep_result=SECONDS)"
    )
    if not known.dispatched:
        return ResultNotFound(
            f"nothing is known of task {task_id}{task} in group {group!r}: no task of "
            "that id was dispatched to this group (look at the id, and the group), or "
            "it ended without keeping its result (keep_result), or its result expired",
            task_id,
            name,
        )
    if known.keep_from is None:
        return ResultNotFound(
            f"task {task_id}{task} was dispatched to group {group!r}, and no outcome "
            f"of it is stored: it keeps no result (keep_result: this producer's "
            f"registry does not know the task {name!r}, so cannot tell), its result "
            "expired, or the runners do not know the task either and dead-lettered it "
            f"(look at its dead letters); {keep_it}",
            task_id,
            name,
        )
    if known.keep is None:
        return ResultNotKept(
            f"task {task_id}{task} ended, and keeps no result: keep_result is set "
            "neither on the task nor on its dispatch, so its outcome was not stored "
            f"(that of a cancelled or expired one is kept {UNASKED_KEEP:g} s); {keep_it}",
            task_id,
            name,
        )
    said, unless = "its dispatch", ""
    if known.keep_from == "task":
        said = "the task as declared here"
        unless = " (or the runners declare the task without keep_result)"
    return ResultExpired(
        f"task {task_id}{task} kept its outcome {known.keep:g} s (keep_result, set by "
        f"{said}) and it is gone: it expired, or was deleted{unless}; await the result "
        "sooner, or keep it longer",
        task_id,
        name,
        known.keep,
    )


def decode_result(task_id: str, raw: bytes | None, codec: TypeCodec) -> Any:
    """The stored result, decoded into the declared type; ``BadData`` when it is not JSON,
    or does not fit the type (the task changed since it ran, or something else wrote the
    record)."""
    import msgspec  # noqa: PLC0415 - loaded by waiters of results only

    source = f"task:{task_id}"
    try:
        value: Any = msgspec.json.decode(raw) if raw is not None else None
    except msgspec.DecodeError as exc:
        raise BadData(source, "result", f"the stored result is not JSON: {exc}") from None
    try:
        return codec.decode(value)
    except InvalidPayload as exc:
        raise BadData(
            source,
            "result",
            f"the stored result {exc} (handle(task_id) without the task reads it as JSON)",
        ) from None


def _named(task_name: str | None) -> str:
    """`` ('name')`` after a task id, when the name is known."""
    return f" ({task_name!r})" if task_name is not None else ""


def deadline(timeout: float | None, now: float) -> float:
    """The deadline of a wait of ``timeout`` seconds from ``now`` (None: for ever)."""
    if timeout is None:
        return math.inf
    if (
        not isinstance(timeout, int | float)
        or isinstance(timeout, bool)
        or math.isnan(timeout)
        or timeout < 0
    ):
        raise ValueError(f"timeout must be None or a number of seconds >= 0, got {timeout!r}")
    return now + timeout


def status_of(task_id: str, look: TaskLook) -> TaskStatus:
    """The status of a task from one look at where it is: the live structures say where
    it is now, its record (for a task that keeps its result) what happened to it."""
    recorded = read_record(task_id, look.record)
    if recorded is not None and recorded.state.finished:
        return recorded
    if look.due_ms is not None:
        message = _message(task_id, look.delayed)
        retrying = message is not None and message.attempt > 1
        state = TaskState.RETRYING if retrying else TaskState.SCHEDULED
        return _merge(recorded, task_id, state, message, due_at=as_time(look.due_ms / 1000))
    if look.waiting is not None:  # deferred by its concurrency limit: it runs once granted
        return _merge(recorded, task_id, TaskState.QUEUED, _message(task_id, look.waiting))
    if look.entry_id is not None:
        deliveries = split_deliveries(look.deliveries or 1)[0]  # the given-up mark off
        message = _message(look.entry_id, look.entry, deliveries)
        if not _belongs(task_id, look.entry_id, message):  # a where-map entry gone stale
            return TaskStatus(id=task_id, state=TaskState.UNKNOWN)
        if look.consumer is not None:
            return _merge(recorded, task_id, TaskState.RUNNING, message, instance=look.consumer)
        if not look.delivered:
            return _merge(recorded, task_id, TaskState.QUEUED, message)
    # Nowhere now, with no outcome: it finished without keeping its result (a record
    # left by its progress reports says nothing more), or it never existed.
    return TaskStatus(id=task_id, state=TaskState.UNKNOWN)


def _belongs(task_id: str, entry_id: str, message: Any) -> bool:
    """Whether the stream entry ``entry_id`` (its ``message``, None when it does not
    decode) is the task ``task_id``'s: an entry found through the where-map, or by an id
    shaped like an entry id, may be another task's."""
    return bool(message.task_id == task_id) if message is not None else entry_id == task_id


def message_found(task_id: str, look: TaskLook) -> Any:
    """The message of task ``task_id`` that ``look`` found (delayed, waiting for a slot, or
    its stream entry), decoded; None when it found none, or none that decodes."""
    message = _message(task_id, look.delayed) if look.due_ms is not None else None
    if message is None and look.waiting is not None:
        message = _message(task_id, look.waiting)
    if message is None and look.entry_id is not None:
        entry = _message(look.entry_id, look.entry)
        message = entry if _belongs(task_id, look.entry_id, entry) else None
    return message


def _message(message_id: str, fields: Any, deliveries: int = 1) -> Any:
    if fields is None:
        return None
    entry = [b"payload", fields] if isinstance(fields, bytes) else fields
    try:
        return decode_message(message_id, entry, deliveries=deliveries)
    except MessageDecodeError:
        return None


def _merge(
    recorded: TaskStatus | None,
    task_id: str,
    state: TaskState,
    message: Any,
    *,
    due_at: float | None = None,
    instance: str | None = None,
) -> TaskStatus:
    """The live state, with what the record and the message know besides."""
    base = recorded or TaskStatus(id=task_id, state=state)
    return TaskStatus(
        id=task_id,
        state=state,
        task=message.task_name if message is not None else base.task,
        attempt=message.attempt if message is not None else base.attempt,
        instance=instance or (base.instance if state is TaskState.RUNNING else None),
        progress=base.progress if state is TaskState.RUNNING else None,
        progress_message=base.progress_message if state is TaskState.RUNNING else None,
        enqueued_at=message.enqueued_at if message is not None else base.enqueued_at,
        started_at=base.started_at if state is TaskState.RUNNING else None,
        due_at=due_at,
        error=base.error if state is TaskState.RETRYING else None,
    )
