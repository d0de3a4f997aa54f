"""Where a dispatched task is, and how it ended: the values task handles return.

The per-task record they are read from is laid out in :mod:`trunner._wire.record`.
"""

from __future__ import annotations

import enum

import attrs

__all__ = [
    "CancelOutcome",
    "RemoteError",
    "TaskState",
    "TaskStatus",
    "WorkflowState",
    "WorkflowStatus",
]


class TaskState(enum.Enum):
    """Where a task is, as [`TaskHandle.status`][trunner.TaskHandle.status] says.

    `finished` tells the outcomes (succeeded, failed, dead, cancelled, expired) from the
    states a task passes through."""

    SCHEDULED = "scheduled"
    """Delayed: in the delayed set until it is due."""
    QUEUED = "queued"
    """In the stream, not delivered to any instance yet."""
    RUNNING = "running"
    """Delivered to an instance (running, or about to run)."""
    RETRYING = "retrying"
    """An attempt failed; the next one waits in the delayed set for its backoff."""
    SUCCEEDED = "succeeded"
    """It returned: its result is kept if the task keeps results (``keep_result``)."""
    FAILED = "failed"
    """Its last allowed attempt raised: given up on (and dead-lettered)."""
    DEAD = "dead"
    """Given up on without a last attempt: its payload did not validate, its task is
    unknown, or it was delivered again past its last attempt (dead-lettered)."""
    CANCELLED = "cancelled"
    """Cancelled before it started, or while it ran (it did not complete)."""
    EXPIRED = "expired"
    """Not started before its ``expires`` time: dropped."""
    UNKNOWN = "unknown"
    """Nowhere: finished without keeping its result, its outcome expired, or never
    dispatched to this group."""

    @property
    def finished(self) -> bool:
        """Whether this is an outcome (nothing more happens to the task)."""
        return self in _FINISHED


_FINISHED = frozenset(
    {
        TaskState.SUCCEEDED,
        TaskState.FAILED,
        TaskState.DEAD,
        TaskState.CANCELLED,
        TaskState.EXPIRED,
    }
)


class CancelOutcome(enum.Enum):
    """What [`TaskHandle.cancel`][trunner.TaskHandle.cancel] did."""

    REMOVED = "removed"
    """It was delayed or queued: it is gone, and never starts (guaranteed once ``cancel``
    returned)."""
    CANCELLING = "cancelling"
    """It was running: the instance running it cancels it now (or, if that instance died,
    whichever one reclaims it drops it before it starts)."""
    FINISHED = "finished"
    """It had finished already: nothing was done."""
    UNKNOWN = "unknown"
    """It is nowhere in the group: finished without keeping its result, or never
    dispatched to it. Nothing was done."""


@attrs.frozen
class RemoteError:
    """An exception a task raised on some instance: its class name, message and traceback."""

    type: str
    """The exception's class name, e.g. ``"ValueError"``."""
    message: str
    """Its message (``str(exception)``)."""
    traceback: str = attrs.field(default="", repr=False)
    """Its traceback as the instance formatted it (the end of it, at most 8000
    characters)."""

    def __str__(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type


@attrs.frozen(kw_only=True)
class TaskStatus:
    """Where a task is, and what is known of it (fields not known are None)."""

    id: str
    """The task's id."""
    state: TaskState
    """Where it is, or how it ended."""
    task: str | None = None
    """The task's name."""
    attempt: int | None = None
    """The attempt running, or that ran last (1 for the first)."""
    instance: str | None = None
    """The instance (consumer) running it, or that ran it last."""
    progress: float | None = None
    """The last progress the task reported (0 to 1)."""
    progress_message: str | None = None
    """The message reported with that progress."""
    enqueued_at: float | None = None
    """When it was dispatched (seconds since the epoch)."""
    started_at: float | None = None
    """When its last attempt started."""
    finished_at: float | None = None
    """When it finished (an outcome)."""
    due_at: float | None = None
    """When a scheduled task or a retry is due."""
    error: RemoteError | None = None
    """Why it failed (failed, dead), or why its last attempt failed (retrying)."""


class WorkflowState(enum.Enum):
    """Where a workflow is, as [`WorkflowHandle.status`][trunner.WorkflowHandle.status]
    says; ``finished`` tells its outcomes."""

    RUNNING = "running"
    """Its steps run; none failed for good (or, without fail-fast, the others go on)."""
    FAILING = "failing"
    """A step failed for good: its running steps are being cancelled; it fails once
    every step it started has ended."""
    CANCELLING = "cancelling"
    """Cancelled: its running steps are being cancelled."""
    SUCCEEDED = "succeeded"
    """Every step succeeded: its result is kept ``keep_result`` seconds."""
    FAILED = "failed"
    """A step failed for good (its failures are kept ``keep_result`` seconds)."""
    CANCELLED = "cancelled"
    """Cancelled, and none of its steps had failed."""
    UNKNOWN = "unknown"
    """Nowhere: its outcome expired, or it was never dispatched to this group."""

    @property
    def finished(self) -> bool:
        """Whether this is an outcome (nothing more happens to the workflow)."""
        return self in (WorkflowState.SUCCEEDED, WorkflowState.FAILED, WorkflowState.CANCELLED)


@attrs.frozen
class WorkflowStatus:
    """Where a workflow is, and how far it went."""

    id: str
    state: WorkflowState
    steps: int = 0
    """How many steps it has."""
    succeeded: int = 0
    """How many steps succeeded."""
    failed: int = 0
    """How many failed for good (expired, cancelled on their own, or could not start)."""
    cancelled: int = 0
    """How many its failure or its cancellation cancelled."""
    live: int = 0
    """How many are queued, running or waiting for a retry now."""
    created_at: float | None = None
    """When it was dispatched (seconds since the epoch)."""
    finished_at: float | None = None
    """When it ended."""
    name: str = ""
    """The name it was dispatched with."""
