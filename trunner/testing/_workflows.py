"""Eager workflows for test suites: :func:`call_workflow` runs a workflow's plan (the one
``dispatch`` writes) in one Trio nursery, each step through :func:`call_task`, and reads
its outcome as a ``WorkflowHandle`` reads a settled workflow's."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

import attrs
import msgspec
import trio

from .._engine.steps import step_failure
from .._executors.eager import DEFAULT_MAX_PAYLOAD_BYTES
from .._producer.build import payload_of
from .._producer.workflows import step_task
from .._redis import WorkflowLook
from .._task import Task
from .._wire.codec import TypeCodec
from .._wire.envelope import payload_json
from .._workflow_handle import workflow_outcome
from .._workflows import Exit, Plan, Step, TaskStep, compile_plan
from ..errors import InvalidPayload, InvalidResult, MaxRetryExceeded
from ..middleware import Middleware
from ..registry import TaskRegistry
from ..runner import Runner
from ._eager import call_task

__all__ = ["call_workflow"]

R = TypeVar("R")

#: How a step's task is called: ``call_task`` with the run's options.
Call = Callable[[Task, Any, "Mapping[str, str] | None"], Awaitable[Any]]


async def call_workflow(
    tasks: TaskRegistry,
    workflow: Step[object, R],
    *,
    fail_fast: bool = True,
    sleep_backoff: bool = False,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    runner: Runner | None = None,
    middleware: Iterable[Middleware] = (),
) -> R:
    """Run a workflow now, in the calling Trio task, as runners would, without Redis.

    The workflow is compiled and checked as ``dispatch`` checks it (the same errors, before
    any step runs). Its steps then run in one Trio nursery, each as
    [``call_task``][trunner.testing.call_task] runs a task (retries, timeouts, the JSON
    round trip, ``middleware``, ``runner``; a step's own ``timeout`` and ``headers``): a
    step starts when every step it waits for has succeeded, with the payload a runner
    would give it (its inputs' results as JSON, in order); steps with nothing between
    them run side by side.

    It ends as a dispatched workflow's ``result()`` does: its result decoded by the output
    steps' tasks; ``WorkflowFailed`` with a ``StepFailed`` per step that failed for good.
    With ``fail_fast`` (the default), the first failure cancels the running steps and
    starts no other, as a nursery does; without it, a failure blocks only the steps after
    it, and the others run to their end.

    Args:
        tasks: The registry every step's task is in (eager calls need the functions).
        workflow: A step, chain, group or chord.
        fail_fast: As ``dispatch(workflow, fail_fast=...)``.
        sleep_backoff: Sleep the backoff between a step's attempts.
        max_payload_bytes: The largest message or result accepted.
        runner: A started runner for ``trunner.current_runner()`` in the steps.
        middleware: Run around each step's attempts, as ``call_task`` runs them.

    Returns:
        The workflow's result.

    Raises:
        WorkflowFailed: A step failed for good.
        ValueError: The workflow cannot run (as ``dispatch`` says).
        TaskNotFound: A step's task is not in ``tasks``.
    """
    if not isinstance(tasks, TaskRegistry):
        raise TypeError(f"call_workflow() takes a TaskRegistry, got {type(tasks).__name__}")
    if type(fail_fast) is not bool:
        raise TypeError(f"fail_fast must be a bool, got {fail_fast!r}")
    plan = compile_plan(workflow)
    found = [_task_of(tasks, i, node.step) for i, node in enumerate(plan.nodes)]
    for node, task in zip(plan.nodes, found, strict=True):
        if node.step.bound:  # as dispatch checks it: its type, its JSON form
            payload_json(task.name, payload_of(task, node.step.payload))
    run = _Run(plan, found, fail_fast, f"eager-{secrets.token_hex(6)}")

    async def call(task: Task, payload: Any, headers: Mapping[str, str] | None) -> Any:
        return await call_task(
            task,
            payload=payload,
            headers=headers,
            sleep_backoff=sleep_backoff,
            max_payload_bytes=max_payload_bytes,
            runner=runner,
            middleware=middleware,
        )

    async with trio.open_nursery() as nursery:
        run.start(nursery, call, max_payload_bytes)
    if run.error is not None:  # the test's set-up, not a step, is wrong: as call_task
        raise run.error
    codecs: dict[int, TypeCodec] = {i: found[i].result_codec for i in plan.output_nodes()}
    return workflow_outcome(run.id, run.look(), codecs)  # type: ignore[no-any-return]


def _task_of(tasks: TaskRegistry, index: int, step: TaskStep) -> Task:
    """Step ``index``'s task as it runs: the registry's, with the step's ``timeout`` and
    ``keep_result``."""
    task = tasks.get(step_task(tasks, index, step)[0])
    if step.timeout is not None:
        task = attrs.evolve(task, timeout=step.timeout)
    if step.keep_result is not None:
        task = attrs.evolve(task, keep_result=step.keep_result)
    return task


class _Run:
    """One eager run of a plan: what each step waits for, the results, the failures."""

    def __init__(self, plan: Plan, tasks: list[Task], fail_fast: bool, run_id: str) -> None:
        self.plan, self.tasks, self.fail_fast, self.id = plan, tasks, fail_fast, run_id
        self.waiting = [len(node.waits_for) for node in plan.nodes]
        self.results: dict[int, bytes] = {}
        self.failures: dict[int, str] = {}
        self.stopped = False
        """Set by a failure with fail-fast: no step starts after it."""
        self.error: Exception | None = None
        """What stopped the run that is no step's failure (a wrong set-up)."""

    def start(self, nursery: trio.Nursery, call: Call, max_bytes: int) -> None:
        for index, count in enumerate(self.waiting):
            if count == 0:
                nursery.start_soon(self._step, nursery, call, max_bytes, index)

    async def _step(self, nursery: trio.Nursery, call: Call, max_bytes: int, index: int) -> None:
        if self._halted():
            return
        node, task = self.plan.nodes[index], self.tasks[index]
        payload = node.step.payload
        if node.reads is not None:
            payload = msgspec.json.decode(self._assembled(node.reads))
        try:
            value = await call(task, payload, node.step.headers)
            if self.plan.readers[index]:  # encoded when read, as a runner does
                self.results[index] = task.result_codec.encode_json(value, max_bytes)
        except (MaxRetryExceeded, InvalidPayload, InvalidResult) as exc:  # failed for good
            attempt = exc.attempts if isinstance(exc, MaxRetryExceeded) else 1
            self.failures[index] = step_failure("failed", task.name, attempt, "", exc)
            self._stop(nursery, self.fail_fast)
            return
        except Exception as exc:  # noqa: BLE001 - raised bare after the nursery
            self.error = self.error or exc
            self._stop(nursery, True)
            return
        if self._halted():  # a failure while it ran, and it did not notice the cancel
            return
        for after in self.plan.successors[index]:
            self.waiting[after] -= 1
            if self.waiting[after] == 0:
                nursery.start_soon(self._step, nursery, call, max_bytes, after)

    def _halted(self) -> bool:
        return self.stopped

    def _stop(self, nursery: trio.Nursery, stop: bool) -> None:
        if stop:
            self.stopped = True
            nursery.cancel_scope.cancel()

    def _assembled(self, reads: Exit) -> bytes:
        """A payload made of results, as the scripts make it: their JSON, in lists."""
        if isinstance(reads, int):
            return self.results[reads]
        return b"[" + b",".join(self._assembled(part) for part in reads) + b"]"

    def look(self) -> WorkflowLook:
        """The run as the handle reads a settled workflow."""
        fields = {"out": self.plan.output_spec(), "failures": str(len(self.failures))}
        fields["state"] = "failed" if self.failures else "succeeded"
        return WorkflowLook(fields, self.results, self.failures)
