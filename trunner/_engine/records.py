"""The per-task record an attempt's end writes (see :mod:`trunner._wire.record`), built
from the job: as a hash's field/value pairs, or, written with the acknowledgement of a
successful attempt, as one JSON object; and how long it is kept.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import Any, overload

from .._redis import AckRecord, Arg, Record
from .._task import Task
from .._wire.keys import Keys
from .._wire.record import MAX_TRACEBACK, RUNNING_TTL, ttl_ms
from ..errors import MaxRetryExceeded
from .holdings import Job

__all__ = ["Records", "error_fields", "keep_of"]


class Records:
    """Builds the records of one group's tasks (see the module docs)."""

    def __init__(self, keys: Keys) -> None:
        self._keys = keys

    def _fields(self, job: Job, state: str, keep: float, *, finished: bool) -> dict[str, Any]:
        """The fields of ``job``'s record in ``state`` but its result and error (see
        ``trunner._wire.record``), ``state`` first. The fields
        :func:`~trunner._wire.record.record_fields` would give, built without it: this runs
        for every task that keeps its result."""
        task_name, _, attempt, enqueued_at, _ = job.fields[:5]
        fields: dict[str, Any] = {
            "state": state,  # first: the scripts recognise a JSON outcome by its start
            "task": task_name,
            "attempt": attempt,
            "instance": job.consumer,
            "message_id": job.message_id,
            "enqueued_at": enqueued_at,
        }
        if job.started_at:
            fields["started_at"] = job.started_at
        if finished:
            fields["finished_at"] = time.time()
        fields["keep"] = keep
        if job.progress is not None:
            fields["progress"] = job.progress
        if job.progress_message is not None:
            fields["progress_message"] = job.progress_message
        return fields

    def record(
        self,
        job: Job,
        state: str,
        keep: float,
        *,
        finished: bool = True,
        result: bytes | None = None,
        error: BaseException | None = None,
    ) -> Record:
        """The record of ``job``'s task in ``state``, as a hash's field/value pairs, kept
        ``keep`` seconds (:data:`RUNNING_TTL` while not finished)."""
        fields = self._fields(job, state, keep, finished=finished)
        if result is not None:
            fields["result"] = result
        pairs: list[tuple[str, Arg]] = list(fields.items())
        if error is not None:
            pairs += error_fields(error)
        ttl = keep if finished else max(keep, RUNNING_TTL)
        return self._keys.task(job.fields[4]), ttl_ms(ttl), pairs

    def outcome(self, job: Job, state: str, keep: float, result: bytes | None) -> AckRecord:
        """The record of a finished task written with its acknowledgement: the fields of
        :meth:`record`, as one JSON object, which Redis stores as a string with one
        ``SET`` (the hot path of a task that keeps its result: see ``trunner._wire.record``).
        The fields a JSON encoder refuses (a lone surrogate in a progress message) fall
        back to :meth:`record`."""
        body = self._fields(job, state, keep, finished=True)
        encode, raw, refused = _OUTCOME_CODEC or _outcome_codec()
        if result is not None:
            body["result"] = raw(result)
        try:
            data = encode(body)
        except refused:
            return self.record(job, state, keep, result=result)
        return self._keys.task(job.fields[4]), ttl_ms(keep), data

    def running(self, job: Job) -> Record:
        """The record of ``job``'s task while it runs (written as it starts)."""
        keep = job.keep_result if job.keep_result is not None else RUNNING_TTL
        return self.record(job, "running", keep, finished=False)


@overload
def keep_of(job: Job, task: Task | None) -> float | None: ...


@overload
def keep_of(job: Job, task: Task | None, unasked: float) -> float: ...


def keep_of(job: Job, task: Task | None, unasked: float | None = None) -> float | None:
    """How long the outcome of ``job`` is kept: its dispatch's ``keep_result``, else its
    task's, else ``unasked`` (None: not at all)."""
    if job.keep_result is not None:
        return job.keep_result
    options = job.fields[8]
    if options is not None and options.keep_result is not None:
        return options.keep_result
    if task is not None and task.keep_result is not None:
        return task.keep_result
    return unasked


#: What ``Records.outcome`` encodes with: the encoder, ``msgspec.Raw`` (a result's JSON
#: as it is), and the errors that make it fall back to a hash. msgspec is imported when
#: first needed: a runner whose tasks keep no result never loads it (nor what it imports).
_Codec = tuple[Callable[[Any], bytes], Callable[[bytes], Any], tuple[type[Exception], ...]]
_OUTCOME_CODEC: _Codec | None = None


def _outcome_codec() -> _Codec:
    global _OUTCOME_CODEC
    import msgspec  # noqa: PLC0415 - see above

    encode = msgspec.json.Encoder().encode
    _OUTCOME_CODEC = (encode, msgspec.Raw, (msgspec.EncodeError, UnicodeEncodeError))
    return _OUTCOME_CODEC


def error_fields(error: BaseException) -> list[tuple[str, Arg]]:
    """The record's fields of the exception a task ended with: the task's own error when
    trunner's wraps it (``MaxRetryExceeded`` from the last attempt's error)."""
    if isinstance(error, MaxRetryExceeded) and error.__cause__ is not None:
        error = error.__cause__
    text = "".join(traceback.format_exception(error))
    return [
        ("error_type", type(error).__name__),
        ("error", str(error)),
        ("traceback", text[-MAX_TRACEBACK:]),
    ]
