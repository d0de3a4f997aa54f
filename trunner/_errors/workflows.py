"""How a workflow ends otherwise than succeeded: a nursery's errors, spread over machines
(re-exported by ``trunner.errors``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .calls import TrunnerError
from .outcomes import RemoteFailure, TaskCancelled

__all__ = ["StepFailed", "WorkflowCancelled", "WorkflowFailed"]


class StepFailed(TrunnerError):
    """One step of a workflow failed for good (its last attempt raised, it was given up,
    it expired, it was cancelled on its own, or it could not start): one of the
    exceptions of a [``WorkflowFailed``][trunner.errors.WorkflowFailed]."""

    def __init__(
        self,
        workflow: str,
        node: int,
        task_name: str,
        attempt: int,
        error: RemoteFailure,
    ) -> None:
        super().__init__(
            f"step {node} ({task_name!r}, attempt {attempt}) of workflow {workflow} failed: {error}"
        )
        self.workflow = workflow
        """The workflow's id."""
        self.node = node
        """The step's index in its workflow."""
        self.task_name = task_name
        """Its task's name."""
        self.attempt = attempt
        """Its last attempt."""
        self.error = error
        """What it failed with (class name, message, traceback), as its instance saw it."""

    @property
    def step_id(self) -> str:
        """The step's task id, ``<workflow>.<node>``: a ``TaskHandle`` of it works."""
        return f"{self.workflow}.{self.node}"


class WorkflowFailed(ExceptionGroup[StepFailed], TrunnerError):
    """A workflow failed: an exception group of its [``StepFailed``][trunner.errors.StepFailed],
    as a nursery raises one of its children's exceptions, once every step it started has
    ended. ``except* StepFailed`` works on it. The steps its failure cancelled are not in
    it (as a nursery leaves out ``trio.Cancelled``); at most 100 failures are kept, and
    ``failed_count`` says how many there were."""

    workflow: str
    failed_count: int
    cancelled: bool

    def __new__(
        cls,
        message: str,
        failures: Sequence[StepFailed],
        workflow: str = "",
        failed_count: int | None = None,
        cancelled: bool = False,
    ) -> WorkflowFailed:
        self = super().__new__(cls, message, failures)
        self.workflow = workflow
        """The workflow's id."""
        self.failed_count = len(failures) if failed_count is None else failed_count
        """How many steps failed (the group holds at most 100)."""
        self.cancelled = cancelled
        """Whether the workflow was also cancelled (its failures win: an error is never
        lost)."""
        return self

    def __init__(self, message: str, failures: Sequence[StepFailed], *_: Any, **__: Any) -> None:
        super().__init__(message, failures)

    @property
    def failures(self) -> list[StepFailed]:
        """Its failures, one per step (``exceptions``, typed as such)."""
        return [e for e in self.exceptions if isinstance(e, StepFailed)]

    def derive(self, excs: Sequence[StepFailed]) -> WorkflowFailed:  # type: ignore[override]
        """The same failure with ``excs`` only (what ``split`` and ``except*`` make):
        still a ``WorkflowFailed`` of the same workflow."""
        return WorkflowFailed(self.message, excs, self.workflow, self.failed_count, self.cancelled)


class WorkflowCancelled(TaskCancelled):
    """The workflow was cancelled (``WorkflowHandle.cancel``) and none of its steps had
    failed: what awaiting its result raises."""
