"""The one layout of the per-task record that holds a task's outcome, and how it reads
back as a :class:`~trunner.TaskStatus`.

The record, ``<prefix>:{<group>}:task:<task id>``, exists for a task that keeps its
result (``keep_result``), reports progress, or was cancelled or expired. It is written by
the scripts that end an attempt — the same script that acknowledges a message writes its
outcome — and expires ``keep_result`` seconds after the outcome (:data:`RUNNING_TTL` while
the task runs; :data:`UNASKED_KEEP` for a cancelled or expired task that keeps no result).
:func:`record_fields` writes its fields (the runner's ``Outcomes._record`` builds the same
fields without it, on its hot path) and :func:`read_record` reads them; nothing else does.
It is a hash of these fields (all text); or, for an outcome written with the
acknowledgement of a successful attempt (the hot path: one ``SET``), a string, one JSON
object of the same fields with ``state`` first (strings as JSON strings, numbers as JSON
numbers, ``result`` as the JSON value itself), which :func:`record_from_json` reads into the
hash's form. Fields:

====================  =======================================================
``state``             running, retrying, succeeded, failed, dead, cancelled, expired
``task``              the task's name
``attempt``           the attempt that ran last
``instance``          the consumer that ran it
``enqueued_at``       seconds since the epoch (dispatch)
``started_at``        seconds since the epoch (the last attempt's start)
``finished_at``       seconds since the epoch (the outcome)
``result``            the result, as JSON (succeeded)
``error_type``        the exception's class name (failed, dead, retrying: the last error)
``error``             its message
``traceback``         its traceback, as text (at most :data:`MAX_TRACEBACK` characters)
``progress``          the last progress reported, a fraction in [0, 1]
``progress_message``  its message
``keep``              ``keep_result`` in seconds
====================  =======================================================

A field that does not hold what :func:`record_fields` writes (written by something else:
not a number, NaN, infinite, a fraction outside [0, 1], a time a ``datetime`` cannot hold)
reads as unknown (None); a ``state`` that is not one of the record's reads as no record.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..status import RemoteError, TaskState, TaskStatus

__all__ = [
    "MAX_TRACEBACK",
    "MAX_TTL_MS",
    "RUNNING_TTL",
    "UNASKED_KEEP",
    "as_time",
    "read_record",
    "record_fields",
    "record_from_json",
    "ttl_ms",
]

#: How long a record lives while its task runs (a runner that dies leaves it to expire).
RUNNING_TTL = 24 * 3600.0
#: How long the outcome of a task that was cancelled, or expired, is kept when neither
#: its dispatch nor its task says (``keep_result``): whoever cancelled it, or awaits it,
#: learns what became of it.
UNASKED_KEEP = 3600.0
#: The most characters of a traceback an outcome keeps (the end is kept: the raise site).
MAX_TRACEBACK = 8000
#: The longest time-to-live of a record (ms, about 285 000 years): a longer
#: ``keep_result`` keeps it this long (Redis refuses a time-to-live it cannot count).
MAX_TTL_MS = 2**53
#: The largest attempt a record is believed to hold (a larger one reads as unknown).
MAX_ATTEMPT = 2**31 - 1
#: The latest time a record is believed to hold: the end of year 9999, the last second
#: a ``datetime`` holds (a later one, or one before 1970, reads as unknown).
MAX_TIME = 253402300799.0


#: One stored record: field -> text (bytes as Redis gives them).
Record = Mapping[bytes, bytes]


def record_from_json(data: bytes) -> dict[bytes, bytes]:
    """A record stored as one JSON object, in the form of a stored hash: each field's text
    (a JSON string's value; a number's JSON text; ``result``'s JSON text as it is). What is
    not a JSON object reads as no record (empty)."""
    import msgspec  # noqa: PLC0415 - loaded by who reads a result, not by every runner

    try:
        fields = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    except msgspec.DecodeError:
        return {}
    record: dict[bytes, bytes] = {}
    for name, raw in fields.items():
        value = bytes(raw)
        if name != "result" and value[:1] == b'"':
            value = msgspec.json.decode(value, type=str).encode("utf-8", "backslashreplace")
        record[name.encode("utf-8", "backslashreplace")] = value
    return record


def ttl_ms(seconds: float) -> int:
    """A record's time-to-live of ``seconds``, in ms as Redis takes it: at least 1, at most
    :data:`MAX_TTL_MS`."""
    if not seconds * 1000 < MAX_TTL_MS:
        return MAX_TTL_MS
    return max(1, math.ceil(seconds * 1000))


def record_fields(
    **fields: str | bytes | int | float | None,
) -> list[tuple[str, str | bytes | int | float]]:
    """Fields of the record, as the scripts store them (None: left out)."""
    return [(name, value) for name, value in fields.items() if value is not None]


def _text(record: Record, name: str) -> str | None:
    value = record.get(name.encode())
    return None if value is None else value.decode("utf-8", "replace")


def _number(record: Record, name: str) -> float | None:
    """A finite number, or None (missing, not a number, NaN or infinite)."""
    text = _text(record, name)
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def _attempt(record: Record) -> int | None:
    """An attempt: a whole number from 1 to :data:`MAX_ATTEMPT`, or None."""
    value = _number(record, "attempt")
    if value is None or not value.is_integer() or not 1 <= value <= MAX_ATTEMPT:
        return None
    return int(value)


def _fraction(record: Record, name: str) -> float | None:
    """A fraction from 0 to 1, or None."""
    value = _number(record, name)
    return value if value is not None and 0 <= value <= 1 else None


def as_time(value: float | None) -> float | None:
    """Seconds since the epoch that a ``datetime`` can hold (years 1970 to 9999), or
    None: a value out of that range was not written by trunner, and would break code that
    converts it."""
    if value is None or not (math.isfinite(value) and 0 <= value <= MAX_TIME):
        return None
    return value


def _time(record: Record, name: str) -> float | None:
    return as_time(_number(record, name))


def read_record(task_id: str, record: Record) -> TaskStatus | None:
    """A stored record as a status; None when there is none or its state is not one of
    the record's (a value written by something else reads as no record)."""
    try:
        state = TaskState(_text(record, "state"))
    except ValueError:
        return None
    error_type = _text(record, "error_type")
    error = None
    if error_type is not None and state in (TaskState.FAILED, TaskState.DEAD, TaskState.RETRYING):
        error = RemoteError(
            error_type, _text(record, "error") or "", _text(record, "traceback") or ""
        )
    return TaskStatus(
        id=task_id,
        state=state,
        task=_text(record, "task"),
        attempt=_attempt(record),
        instance=_text(record, "instance"),
        progress=_fraction(record, "progress"),
        progress_message=_text(record, "progress_message"),
        enqueued_at=_time(record, "enqueued_at"),
        started_at=_time(record, "started_at"),
        finished_at=_time(record, "finished_at"),
        error=error,
    )
