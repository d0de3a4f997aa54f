"""The end of an attempt that is a workflow's step, as the script ending the attempt
records it with the same call (design/workflows.md §3.6): how it ended, its result when a
successor or the workflow reads it, and its failure."""

from __future__ import annotations

from typing import Any

import msgspec

from .._redis import StepEnd, StepKind
from .holdings import Job
from .records import error_fields

__all__ = ["step_end", "step_failure", "wants_result"]

_encode = msgspec.json.Encoder().encode


def wants_result(job: Job) -> bool:
    """Whether ``job`` is a step whose result must be stored (a successor reads it, or it
    is one of its workflow's outputs)."""
    options = job.fields[8]
    return options is not None and options.workflow is not None and options.workflow.keep


def step_end(job: Job, kind: StepKind, error: BaseException | None = None) -> StepEnd | None:
    """The end of ``job``'s step (None when ``job`` is no workflow's step): ``kind``, with
    its result for an ``ok`` end that keeps it, and ``error`` for the others."""
    options = job.fields[8]
    if options is None or options.workflow is None:
        return None
    ref = options.workflow
    result = b""
    if kind == "ok" and ref.keep:
        result = job.result if job.result is not None else b"null"
    failure = (
        ""
        if kind == "ok"
        else step_failure(kind, job.fields[0], job.fields[2], job.message_id, error)
    )
    return StepEnd(ref.workflow, ref.node, kind, ref.next, result, failure)


def step_failure(
    kind: StepKind, task_name: str, attempt: int, message_id: str, error: BaseException | None
) -> str:
    """A step's failure as JSON: what a workflow's error reports of it (the error as the
    task's record tells it: ``records.error_fields``)."""
    fields: dict[str, Any] = {
        "type": {"expired": "TaskExpired", "cancelled": "StepCancelled"}.get(kind, "Error"),
        "message": "",
        "task": task_name,
        "attempt": attempt,
        "message_id": message_id,
    }
    if error is not None:
        told = dict(error_fields(error))
        fields["type"], fields["message"] = told["error_type"], told["error"]
        fields["traceback"] = told["traceback"]
    return _encode(fields).decode("utf-8", "backslashreplace")
