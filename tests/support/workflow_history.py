"""The history check of workflows: what the runs of their steps must show, whatever worker
died when (design/workflows.md, section 6.5).

The steps of the reliability worker (:func:`tests.processes.reliability_worker.workflow_tasks`)
log under their task id, ``<workflow>.<node>``, with their input and result. Given the
shape of every workflow dispatched (:class:`Shape`: each node's inputs),
:func:`workflow_check` reports, per node:

- **lost**: a node of a workflow that succeeded which never finished;
- **unexpected**: runs of a node that no shape has;
- **multi_entry**: a node run from more than one stream entry (it was enqueued twice);
- **early**: a run that started before each of its inputs had finished a run;
- **wrong_input**: a run whose input is not its inputs' results (a callback or a join: the
  list of every input's result, in order; a chain's step: its one input's result; a root:
  its payload);
- **inconsistent**: a node whose finished runs gave different results;
- **unexplained**: a node run again though its earlier run was neither on a process killed
  while (or just after) running it, nor interrupted (:meth:`History.abandoned`);
- **duplicates**: nodes run more than once (explained or not), and how often.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from .history import History, Run

__all__ = ["Node", "Shape", "WorkflowReport", "chain_shape", "chord_shape", "workflow_check"]


@attrs.frozen
class Node:
    """A node of a workflow: its inputs (node indices), or its payload for a root."""

    parents: tuple[int, ...] = ()
    joined: bool = False
    """Its input is the list of its parents' results, in their order (a chord's callback);
    else the one parent's result."""
    payload: Any = None
    """A root's payload."""


@attrs.frozen
class Shape:
    """The nodes of one workflow, by index."""

    workflow: str
    nodes: tuple[Node, ...]
    succeeds: bool = True
    """Whether every node must have finished."""


def chain_shape(workflow: str, length: int, first: Any) -> Shape:
    """``chain(step(task, first), step(task), ...)`` of ``length`` steps."""
    return Shape(workflow, (Node(payload=first), *(Node((i,)) for i in range(length - 1))))


def chord_shape(workflow: str, payloads: Sequence[Any]) -> Shape:
    """``chord(group(step(task, p) for p in payloads), step(callback))``."""
    children = tuple(Node(payload=p) for p in payloads)
    return Shape(workflow, (*children, Node(tuple(range(len(payloads))), joined=True)))


@attrs.frozen
class WorkflowReport:
    workflows: int
    nodes: int
    executions: int
    lost: list[str]
    unexpected: list[str]
    multi_entry: dict[str, int]
    early: list[str]
    wrong_input: dict[str, tuple[Any, Any]]
    inconsistent: list[str]
    unexplained: list[str]
    duplicates: dict[str, int]

    def problems(self) -> dict[str, Any]:
        """Every finding that breaks a guarantee (duplicates explained by a kill do not)."""
        found = {
            "lost": self.lost,
            "unexpected": self.unexpected,
            "multi_entry": self.multi_entry,
            "early": self.early,
            "wrong_input": self.wrong_input,
            "inconsistent": self.inconsistent,
            "unexplained": self.unexplained,
        }
        return {name: value for name, value in found.items() if value}

    def summary(self) -> str:
        return (
            f"workflows {self.workflows}; nodes {self.nodes}; executions {self.executions}; "
            f"run again {len(self.duplicates)} (at most "
            f"{max(self.duplicates.values(), default=1)} runs of one); "
            f"problems {self.problems() or 'none'}"
        )


def workflow_check(
    history: History, shapes: Iterable[Shape], *, ack_window: float = 1.0
) -> WorkflowReport:
    """Check the runs of every step of ``shapes`` in ``history`` (see the module docs);
    ``ack_window``: how long after finishing a step its acknowledgement may still be
    unwritten when its process is killed."""
    by_id = {shape.workflow: shape for shape in shapes}
    runs = {
        task_id: node_runs
        for task_id, node_runs in history.runs().items()
        if "." in task_id  # a step's task id; plain tasks have none
    }
    report = WorkflowReport(
        workflows=len(by_id),
        nodes=sum(len(s.nodes) for s in by_id.values()),
        executions=sum(len(r) for r in runs.values()),
        lost=[],
        unexpected=[],
        multi_entry={},
        early=[],
        wrong_input={},
        inconsistent=[],
        unexplained=[],
        duplicates={},
    )
    for task_id, node_runs in runs.items():
        workflow, _, node = task_id.rpartition(".")
        shape = by_id.get(workflow)
        if shape is None or not node.isdigit() or int(node) >= len(shape.nodes):
            report.unexpected.append(task_id)
            continue
        _check_node(history, report, runs, shape, int(node), node_runs, ack_window)
    for shape in by_id.values():
        for index in range(len(shape.nodes) if shape.succeeds else 0):
            step_id = f"{shape.workflow}.{index}"
            if not any(r.finished for r in runs.get(step_id, ())):
                report.lost.append(step_id)
    return report


def _check_node(
    history: History,
    report: WorkflowReport,
    runs: dict[str, list[Run]],
    shape: Shape,
    index: int,
    node_runs: list[Run],
    ack_window: float,
) -> None:
    task_id = f"{shape.workflow}.{index}"
    node = shape.nodes[index]
    entries = {r.message_id for r in node_runs}
    if len(entries) > 1:
        report.multi_entry[task_id] = len(entries)
    if len({r.result for r in node_runs if r.finished}) > 1:
        report.inconsistent.append(task_id)
    if len(node_runs) > 1:
        report.duplicates[task_id] = len(node_runs)
        if not all(history.abandoned(r, ack_window) for r in node_runs[:-1]):
            report.unexplained.append(task_id)
    inputs = [
        [r for r in runs.get(f"{shape.workflow}.{p}", ()) if r.finished] for p in node.parents
    ]
    for run in node_runs:
        if any(not any(p.end is not None and p.end <= run.start for p in done) for done in inputs):
            report.early.append(task_id)
            break
    if node.parents and not all(inputs):
        return  # an input never finished: "early" says so
    if not node.parents:
        want = node.payload
    elif node.joined:
        want = [json.loads(done[0].result) for done in inputs]
    else:
        want = json.loads(inputs[0][0].result)
    for run in node_runs:
        got = json.loads(run.input) if run.input else None
        if got != want:
            report.wrong_input[task_id] = (got, want)
            break
