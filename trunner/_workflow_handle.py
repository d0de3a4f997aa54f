"""A dispatched workflow: its id, its status, its result, its cancellation (public as
``trunner.WorkflowHandle``). Waiting never polls: the script that settles a workflow
announces its id on the group's channel of finished tasks, as a task's end does."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from ._redis import WorkflowLook
from ._waiting.calls import Calls, counting
from ._waiting.protocol import deadline, decode_result
from ._wire.codec import TypeCodec, untyped
from .errors import (
    BackendError,
    BadData,
    RemoteFailure,
    ResultNotFound,
    ResultTimeout,
    StepFailed,
    WorkflowCancelled,
    WorkflowFailed,
)
from .handles import HandleSource, TaskHandle
from .status import WorkflowState, WorkflowStatus

__all__ = ["WorkflowHandle", "workflow_outcome"]

R = TypeVar("R")


@counting
class WorkflowHandle(str, Generic[R]):
    """A dispatched workflow: its id (this ``str``), its status, its result, its
    cancellation. ``dispatch(workflow)`` returns one, typed by the workflow's last steps
    (``dispatch(chain(step(fetch, url), step(parse)))`` is a ``WorkflowHandle[Page]``);
    ``Client.workflow(workflow_id)`` makes one for a workflow dispatched elsewhere."""

    _producer: HandleSource
    _codecs: Mapping[int, TypeCodec]

    def __new__(
        cls, workflow_id: str, producer: HandleSource, codecs: Mapping[int, TypeCodec] | None = None
    ) -> WorkflowHandle[R]:
        handle = super().__new__(cls, workflow_id)
        handle._producer = producer
        handle._codecs = codecs or {}
        return handle

    def __repr__(self) -> str:
        return f"<WorkflowHandle {str(self)!r}>"

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        return str, (str(self),)  # copies and pickles are the plain id

    def _calls(self) -> Calls:
        return self._producer._calls()

    @property
    def id(self) -> str:
        """The workflow's id."""
        return str(self)

    def step_handle(self, node: int) -> TaskHandle[Any]:
        """A handle on step ``node`` (its index, from 0, in the order the workflow was
        built): its task id is ``<workflow id>.<node>``."""
        return TaskHandle(f"{self.id}.{int(node)}", self._producer)

    async def status(self) -> WorkflowStatus:
        """Where the workflow is now, and how far it went (one round trip, its state's
        fields only: not its results)."""
        (fields,) = await self._producer._open_broker().workflow_fields([self.id])
        if isinstance(fields, str):
            raise BadData("workflow", self.id, fields)
        return _status_of(self.id, WorkflowLook(fields, {}, {}))

    async def cancel(self) -> WorkflowState:
        """Cancel the workflow: after this call returns, no step that was not already
        running starts. Steps queued, in a retry's backoff or waiting for a limit are taken
        out (they end cancelled); running ones are cancelled where they run, and one a
        runner fetched but did not start is dropped; no retry of a step is scheduled. It
        settles (``result()`` raises ``WorkflowCancelled``, or ``WorkflowFailed`` if a step
        had failed) once every step it started has ended: within this call when none was
        running. Returns its state after the call (``CANCELLED`` when it settled,
        ``CANCELLING`` while steps still run, ``FAILING`` while a failing one's steps
        still run, ``FAILED`` when a failing one settled: its failures win, or the outcome
        it had already; ``UNKNOWN`` for no such workflow). If Redis fails mid-way, the
        steps not yet taken out are dropped when fetched (the workflow's cancel mark
        holds)."""
        broker = self._producer._open_broker()
        reply = await broker.cancel_workflow(self.id)
        if reply in ("cancelling", "failing"):
            reply = (await broker.sweep_workflow(self.id)).state
        return WorkflowState.UNKNOWN if reply == "gone" else WorkflowState(reply)

    async def result(self, timeout: float | None = None) -> R:  # noqa: ASYNC109 - the API
        """Wait until the workflow settled (every step it started has ended), and return
        its result: its last step's, or the list of its last group's.

        Args:
            timeout: Seconds to wait at most (``None``: for ever; ``0``: one look).

        Raises:
            WorkflowFailed: A step failed for good: an ``ExceptionGroup`` of one
                ``StepFailed`` per failure (at most 100 kept).
            WorkflowCancelled: It was cancelled, and no step had failed.
            ResultNotFound: Nothing is known of it: its outcome expired (after its
                ``keep_result``), or it was never dispatched to this group.
            ResultTimeout: ``timeout`` passed first.
            BadData: A stored result is not what its task's codec reads.
            RunnerNotRunning: The runner or client is not open.
        """
        runtime = self._producer._runtime()
        until = deadline(timeout, runtime.now())
        if until <= runtime.now():
            look = await self._look()
            if _settled(look):
                return self._outcome(look)
            raise self._too_slow(timeout, look)
        last: list[WorkflowLook] = []
        ended, result = await runtime.until(until, lambda: self._wait(last))
        if ended:
            return result  # type: ignore[return-value]
        raise self._too_slow(timeout, last[-1] if last else None)

    async def _wait(self, last: list[WorkflowLook]) -> R:
        producer = self._producer
        while True:
            waiters = producer._open_waiters()
            with waiters.register(self.id) as announced:
                await waiters.subscribed()
                try:
                    look = await self._look()
                except BackendError:
                    waiters.check_open()
                    raise
                if _settled(look):
                    return self._outcome(look)
                last[:] = [look]
                await announced.wait()

    async def _look(self) -> WorkflowLook:
        return await self._producer._open_broker().workflow_look(self.id)

    def _too_slow(self, timeout: float | None, look: WorkflowLook | None) -> ResultTimeout:
        state = _status_of(self.id, look).state if look is not None else None
        where = f"it was {state.value}" if state is not None else "no look ended in time"
        return ResultTimeout(
            f"no outcome of workflow {self.id} within {timeout:g} s: at the last look "
            f"{where} (the workflow goes on; only the wait ended)",
            self.id,
            None,
            timeout or 0.0,
            None,
        )

    def _outcome(self, look: WorkflowLook) -> R:
        if look.fields.get("state") is None:
            raise ResultNotFound(
                f"nothing is known of workflow {self.id} in group "
                f"{self._producer._group_name()!r}: its outcome expired (after its "
                "keep_result), or it was never dispatched there"
            )
        return workflow_outcome(self.id, look, self._codecs)  # type: ignore[no-any-return]


def workflow_outcome(workflow_id: str, look: WorkflowLook, codecs: Mapping[int, TypeCodec]) -> Any:
    """The result of a settled workflow, its outputs decoded by ``codecs`` (per node), or
    the error it ended with: ``WorkflowFailed``, ``WorkflowCancelled``, ``BadData``."""
    state = look.fields.get("state")
    if state == "succeeded":
        try:
            spec = json.loads(look.fields.get("out", ""))
        except ValueError:
            raise BadData("workflow", workflow_id, "its outputs are not readable") from None
        return _value(workflow_id, spec, look, codecs)
    failures = _failures(workflow_id, look)
    if failures:
        count = int(look.fields.get("failures", len(failures)))
        cancelled = look.fields.get("cancel") == "1"
        raise WorkflowFailed(
            f"workflow {workflow_id} failed: {count} step(s) failed", failures, workflow_id,
            count, cancelled,
        )  # fmt: skip
    if state == "cancelled":
        raise WorkflowCancelled(f"workflow {workflow_id} was cancelled")
    raise BadData("workflow", workflow_id, f"settled {state!r} with no failure kept")


def _value(workflow_id: str, spec: Any, look: WorkflowLook, codecs: Mapping[int, TypeCodec]) -> Any:
    if isinstance(spec, list):
        return [_value(workflow_id, item, look, codecs) for item in spec]
    if not isinstance(spec, int) or spec not in look.results:
        raise BadData("workflow", workflow_id, f"the result of its step {spec!r} is missing")
    codec = codecs.get(spec, untyped)
    return decode_result(f"{workflow_id}.{spec}", look.results[spec], codec)


def _settled(look: WorkflowLook) -> bool:
    state = look.fields.get("state")
    return state is None or WorkflowState(state).finished


def _failures(workflow_id: str, look: WorkflowLook) -> list[StepFailed]:
    found = []
    for node, text in sorted(look.failures.items()):
        try:
            failure = json.loads(text)
        except ValueError:
            failure = None
        if not isinstance(failure, dict):
            failure = {"type": "BadData", "message": f"an unreadable failure: {text[:80]!r}"}
        error = RemoteFailure(
            str(failure.get("type", "Error")),
            str(failure.get("message", "")),
            str(failure.get("traceback", "")),
        )
        attempt = failure.get("attempt")
        task = str(failure.get("task", "?"))
        found.append(
            StepFailed(workflow_id, node, task, attempt if type(attempt) is int else 0, error)
        )
    return found


_STATES = frozenset(state.value for state in WorkflowState)


def _status_of(workflow_id: str, look: WorkflowLook) -> WorkflowStatus:
    fields = look.fields
    state = fields.get("state")
    if state is None:
        return WorkflowStatus(workflow_id, WorkflowState.UNKNOWN)
    if state not in _STATES:
        raise BadData("workflow", workflow_id, f"its state {state[:40]!r} is not a workflow state")

    def number(name: str) -> int:  # as the scripts write it: ASCII digits, an int64's
        value = fields.get(name, "0")
        return int(value) if value.isascii() and value.isdigit() and len(value) <= 18 else 0

    return WorkflowStatus(
        workflow_id,
        WorkflowState(state),
        steps=number("n"),
        succeeded=number("ok"),
        failed=number("failures"),
        cancelled=number("cancelled"),
        live=number("live"),
        created_at=number("created") / 1000 or None,
        finished_at=number("finished") / 1000 or None,
        name=fields.get("name", ""),
    )
