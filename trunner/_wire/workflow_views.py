"""What an inspection of a group's workflows returns (public through ``trunner.admin``):
the live workflows, and one workflow's steps as its marks tell them."""

from __future__ import annotations

import enum

import attrs

from ..errors import StepFailed
from ..status import WorkflowStatus

__all__ = ["LiveWorkflow", "StepState", "WorkflowSteps"]


class StepState(enum.Enum):
    """Where one step of a workflow is, as
    [``workflow_steps``][trunner.admin.Admin.workflow_steps] can say it exactly from the
    workflow's marks (two bits per step: started, ended), its counts and the failures it
    keeps."""

    WAITING = "waiting"
    """Not started: it waits for the steps before it."""
    LIVE = "live"
    """Started and not ended: queued, running, or waiting for a retry."""
    SUCCEEDED = "succeeded"
    """Ended: it succeeded."""
    FAILED = "failed"
    """Ended: it failed for good (failed, expired, cancelled on its own, or could not
    start)."""
    CANCELLED = "cancelled"
    """Ended: the workflow's failure or cancellation cancelled it."""
    ENDED = "ended"
    """Ended, without a kept failure, while the workflow's steps ended more than one way
    (some succeeded, some were cancelled): which way is not kept per step."""
    NEVER = "never"
    """Not started, and it never will: the workflow failed or was cancelled first."""

    @property
    def ended(self) -> bool:
        """Whether the step ended (its outcome is recorded)."""
        return self not in (StepState.WAITING, StepState.LIVE, StepState.NEVER)


@attrs.frozen
class LiveWorkflow:
    """A workflow of the group's index of live ones (dispatched, not settled), as
    [``workflows``][trunner.admin.Admin.workflows] lists them."""

    id: str
    """The workflow's id (``client.workflow(id)`` gives its handle)."""
    dispatched_at: float | None
    """When it was dispatched (seconds since the epoch), as the index holds it; None when
    that is not a time."""
    status: WorkflowStatus | None
    """Its status; None when it cannot be read (see :attr:`problem`)."""
    problem: str = ""
    """Why its status cannot be read (bad data in Redis); ``""`` when it can."""


@attrs.frozen
class WorkflowSteps:
    """A page of a workflow's steps, as
    [``workflow_steps``][trunner.admin.Admin.workflow_steps] reads it: its status, the
    states of its steps ``start``, ``start + 1``, ..., and the failures it keeps."""

    status: WorkflowStatus
    """The workflow's status (its state ``UNKNOWN`` and no step when it is gone)."""
    start: int
    """The index of the first step of :attr:`states`."""
    states: tuple[StepState, ...] = ()
    """The state of each step of the page, from step :attr:`start` on."""
    failures: tuple[StepFailed, ...] = ()
    """The failures it keeps (the first 100 of :attr:`WorkflowStatus.failed
    <trunner.status.WorkflowStatus.failed>`), by step."""

    def counts(self) -> dict[StepState, int]:
        """How many steps of the page are in each state (only the states found)."""
        found: dict[StepState, int] = {}
        for state in self.states:
            found[state] = found.get(state, 0) + 1
        return found
