"""Dispatching a workflow: its plan compiled, every step checked and encoded as a dispatch
of its task would be (the first steps as messages, the others as templates their inputs
fill in), then written in one script call per 1000 (design/workflows.md §2, §3.4). A bound
step of a unique task carries its lock as a unique dispatch's message does, and its plan
field ``u:<i>`` says which lock its start takes (design/workflows.md §3.7)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs

from .._task import Task, dispatch_options
from .._wire.codec import TypeCodec
from .._wire.envelope import encode_message, message_template, payload_json
from .._wire.headers import check_headers
from .._wire.message import MessageOptions
from .._wire.record import UNASKED_KEEP, ttl_ms
from .._wire.workflow import Literal, Part, StepRef, workflow_id_error
from .._workflow_handle import WorkflowHandle
from .._workflows import Plan, PlanNode, Step, TaskStep, compile_plan, exit_parts
from ..errors import PayloadTooLarge
from ..middleware import WorkflowInfo
from .build import Unique, lane_of, payload_of, resolve, unique_of

if TYPE_CHECKING:
    from .._wire.keys import Keys
    from ..registry import TaskRegistry
    from .dispatch import Producer

__all__ = ["WORKFLOW_MAX_LIFE", "dispatch_workflow", "step_task"]

#: How long a workflow may run at most (seconds, from its dispatch): its keys expire then.
WORKFLOW_MAX_LIFE: Final = 30 * 24 * 3600.0


@attrs.define
class _Encoded:
    """A workflow's steps as they are written: the plan's fields, the first steps'
    messages, the lanes they use, the codecs of the results that make its own."""

    fields: list[tuple[str, bytes | int]]
    roots: list[tuple[int, bytes]]
    lanes: set[str]
    codecs: dict[int, TypeCodec]


async def dispatch_workflow(
    producer: Producer,
    workflow: Step[Any, Any],
    *,
    keep_result: float | None = None,
    fail_fast: bool = True,
    workflow_id: str | None = None,
    name: str = "",
    headers: Mapping[str, str] | None = None,
) -> WorkflowHandle[Any]:
    """Dispatch ``workflow`` (see ``Client.dispatch``): every step is checked before
    anything is written, and before the dispatch hooks run. ``headers`` go to every step
    (a step's own win). A ``workflow_id`` taken already dispatches nothing and returns a
    handle on the workflow of that id."""
    broker = producer._open_broker()
    if not isinstance(workflow, Step):
        raise TypeError(f"dispatch takes a task or a workflow, not {workflow!r:.60}")
    if type(fail_fast) is not bool:
        raise TypeError(f"fail_fast must be a bool, got {fail_fast!r}")
    wid = workflow_id if workflow_id is not None else f"w{secrets.token_hex(12)}"
    if (why := workflow_id_error(wid)) is not None:
        raise ValueError(why)
    plan = compile_plan(workflow)
    given = check_headers(headers, f"workflow:{name}")
    info = WorkflowInfo(wid, name, len(plan.nodes))
    encoded = await _encode(producer, plan, info, given)
    keep = keep_result
    if keep is None:
        keep = _output_keep(producer, plan) or UNASKED_KEEP
    dispatch_options(keep, None, None)  # checked as a dispatch's keep_result is
    for lane in sorted(encoded.lanes):
        await producer.lanes.declare(broker, lane)
    await broker.start_workflow(
        wid,
        len(plan.nodes),
        encoded.fields,
        encoded.roots,
        fail_fast=fail_fast,
        keep_ms=ttl_ms(keep),
        max_life_ms=ttl_ms(WORKFLOW_MAX_LIFE),
        name=name,
        out=plan.output_spec(),
    )
    return WorkflowHandle(wid, producer, encoded.codecs)


@attrs.frozen
class _Checked:
    """One step, checked as a dispatch of its task is: its task, lane, payload and, for a
    bound step of a unique task, its lock."""

    task_name: str
    task: Task | None
    lane: str
    payload: Any
    unique: Unique | None


async def _encode(
    producer: Producer, plan: Plan, workflow: WorkflowInfo, given: Mapping[str, str] | None
) -> _Encoded:
    broker = producer._open_broker()
    group = broker.keys.group
    checked = []
    hooked = producer._dispatch_hooks is not None
    for index, node in enumerate(plan.nodes):  # all checked before any hook sees them
        step = node.step
        task_name, task = step_task(producer.registry, index, step)
        lane = lane_of(task, step.priority)
        await producer.lanes.check(broker, lane, task)
        unique = unique_of(task, step.payload) if step.bound else None
        payload = payload_of(task, step.payload) if step.bound else None
        if step.bound and (hooked or node.waits_for):  # a root's message is sized anyway,
            _fits(index, task_name, payload, producer.max_payload_bytes)  # before a write
        checked.append(_Checked(task_name, task, lane, payload, unique))
    now, limit = time.time(), producer.max_payload_bytes
    encoded = _Encoded([], [], set(), {})
    outputs = set(plan.output_nodes())
    # The dispatch hooks see the workflow once: what they leave, every step carries (a
    # trace context: one trace for the whole workflow, whose steps make no span here).
    name, wid = f"workflow:{workflow.name}", workflow.id
    shared = await producer._headers(name, None, given, wid, workflow=workflow)
    for index, (node, one) in enumerate(zip(plan.nodes, checked, strict=True)):
        step, task_name, task, payload = node.step, one.task_name, one.task, one.payload
        lane, unique = one.lane, one.unique
        encoded.lanes.add(lane)
        ref = StepRef(wid, index, plan.next_of(index), plan.readers[index] > 0)
        options = _options(step.keep_result, step.timeout, ref)
        task_id = f"{wid}.{index}"
        mine = {**shared, **(step.headers or {})} if shared else step.headers
        info = attrs.evolve(workflow, node=index, waits_for=node.waits_for) if hooked else None
        headers = await producer._headers(task_name, payload, mine, task_id, workflow=info)
        lock = (unique.key, unique.token, unique.seconds) if unique is not None else None
        if not node.waits_for:
            data = encode_message(
                task_name, payload, enqueued_at=now, task_id=task_id, options=options,
                headers=headers, group=group, max_bytes=limit, lane=lane,
                unique_key=unique.key if unique else None,
                unique_token=unique.token if unique else None,
                unique_for=unique.seconds if unique else None,
            )  # fmt: skip
            encoded.roots.append((index, data))
        else:
            parts = _payload_parts(task_name, payload, node)
            template = message_template(
                task_name, parts, task_id=task_id, options=options, group=group,
                headers=headers, lane=lane, unique=lock,
            )  # fmt: skip
            encoded.fields += [(f"t:{index}", template), (f"w:{index}", len(node.waits_for))]
        if unique is not None:
            encoded.fields.append(_lock_field(broker.keys, index, unique))
        if plan.readers[index] > 1:
            encoded.fields.append((f"r:{index}", plan.readers[index]))
        if index in outputs and task is not None:
            encoded.codecs[index] = task.result_codec
    return encoded


def _fits(index: int, task_name: str, payload: Any, limit: int) -> None:
    """Refuse a bound payload no message can hold, whether its step starts at once or
    later (a message is its payload and more)."""
    size = len(payload_json(task_name, payload))
    if size > limit:
        raise PayloadTooLarge(
            f"step {index} ({task_name!r}): its payload is {size} bytes encoded, more than "
            f"max_payload_bytes={limit}"
        )


def step_task(registry: TaskRegistry | None, index: int, step: TaskStep) -> tuple[str, Task | None]:
    """The name of step ``index``'s task and the task when known (``resolve``); an open
    step of a unique task is refused: its key would be computed in Python from a payload
    that only exists in Redis when the step starts."""
    task_name, task = resolve(registry, step.task)
    if task is not None and task.unique and not step.bound:
        raise ValueError(
            f"step {index} ({task_name!r}) is an open step of a unique task: its unique key "
            "is computed in Python from its payload, which only exists in Redis when the "
            "step starts; give it its payload (a bound step, step(task, payload)), or "
            "dispatch the unique task from inside the step before it"
        )
    return task_name, task


def _lock_field(keys: Keys, index: int, unique: Unique) -> tuple[str, bytes]:
    """The plan field of a unique step ``index``: ``u:<i>`` = ``<ttl ms> <token> <lock
    key>``, the lock its start takes (``wf_take_lock`` in ``workflows.lua``). The lock key
    is named here, as a dispatch names it, in the group's hash slot."""
    spec = f"{unique.ttl_ms} {unique.token} {keys.unique(unique.key)}"
    return f"u:{index}", spec.encode("utf-8")


def _options(keep: float | None, timeout: float | None, ref: StepRef) -> MessageOptions:
    options = dispatch_options(keep, timeout, None)
    return attrs.evolve(options, workflow=ref) if options else MessageOptions(workflow=ref)


def _payload_parts(task_name: str, payload: Any, node: PlanNode) -> list[Part]:
    if node.reads is None:  # bound: its own payload, after the steps it waits for
        return [Literal(payload_json(task_name, payload))]
    return exit_parts(node.reads)


def _output_keep(producer: Producer, plan: Plan) -> float | None:
    """The longest ``keep_result`` of the tasks whose results make the workflow's."""
    keeps = []
    for node in plan.output_nodes():
        step = plan.nodes[node].step
        task: Task | None = resolve(producer.registry, step.task)[1]
        keep = step.keep_result or (task.keep_result if task is not None else None)
        if keep is not None:
            keeps.append(keep)
    return max(keeps) if keeps else None
