"""A workflow compiled to its plan: its nodes in topological order (each after every node
it waits for), what each waits for and reads, who reads each result, and which results
make the workflow's (design/workflows.md §2). No I/O: the producer encodes the plan's
messages and templates, and the scripts run it."""

from __future__ import annotations

import json
from typing import Any, Final, TypeAlias

import attrs

from .._wire.workflow import Literal, Part, Results
from ._graph import GraphStep
from ._steps import Chain, Group, Step, TaskStep

__all__ = ["MAX_NODES", "Exit", "Plan", "PlanNode", "compile_plan", "exit_parts"]

#: The most steps one workflow may have.
MAX_NODES: Final = 100_000

#: What a piece of a workflow gives the steps after it: one node's result, or the list of
#: several pieces' (a group's), nested as the groups are.
Exit: TypeAlias = "int | tuple[Exit, ...]"


@attrs.frozen
class PlanNode:
    """One step of the plan: its task's step, the nodes it waits for (ascending), and what
    its payload is made of (None: its own, bound payload)."""

    step: TaskStep
    waits_for: tuple[int, ...]
    reads: Exit | None


@attrs.frozen
class Plan:
    """The plan of one workflow (see the module docs)."""

    nodes: tuple[PlanNode, ...]
    output: Exit
    successors: tuple[tuple[int, ...], ...]
    """Per node: the nodes that wait for it."""
    readers: tuple[int, ...]
    """Per node: how many read its result (the workflow's own result counts as one)."""

    def next_of(self, node: int) -> str:
        """Its successors as a step's message says them: indices and ranges (``"3,5-9"``)."""
        out: list[str] = []
        items = self.successors[node]
        start = 0
        while start < len(items):
            end = start
            while end + 1 < len(items) and items[end + 1] == items[end] + 1:
                end += 1
            first, last = items[start], items[end]
            out.append(str(first) if first == last else f"{first}-{last}")
            start = end + 1
        return ",".join(out)

    def output_nodes(self) -> list[int]:
        """The nodes whose results make the workflow's, in its result's order."""
        return _flat(self.output)

    def output_spec(self) -> str:
        """Which nodes' results make the workflow's, as JSON (``5``, ``[0,1,[2,3]]``)."""
        return json.dumps(_as_lists(self.output), separators=(",", ":"))


def compile_plan(workflow: Step[Any, Any], max_nodes: int = MAX_NODES) -> Plan:
    """The plan of ``workflow``; ValueError when it cannot run: an open step that nothing
    comes before (it has no payload), more than ``max_nodes`` steps."""
    nodes: list[PlanNode] = []
    output, _ = _compile(workflow, None, (), nodes, max_nodes)
    successors: list[list[int]] = [[] for _ in nodes]
    readers = [0] * len(nodes)
    for index, node in enumerate(nodes):
        for before in node.waits_for:
            successors[before].append(index)
        if node.reads is not None:
            for read in _flat(node.reads):  # each time: the script releases it each time
                readers[read] += 1
    for read in set(_flat(output)):  # kept until the workflow's outcome expires
        readers[read] += 1
    return Plan(tuple(nodes), output, tuple(tuple(s) for s in successors), tuple(readers))


#: What a piece gives the steps after it: the exit they read, and the nodes they wait for
#: besides (a graph's nodes that feed no other and are not in its result).
_Out: TypeAlias = "tuple[Exit, tuple[int, ...]]"


def _compile(
    piece: Step[Any, Any],
    given: Exit | None,
    after: tuple[int, ...],
    nodes: list[PlanNode],
    most: int,
) -> _Out:
    """Compile ``piece`` into ``nodes``: its first steps read ``given`` and wait for it
    and for ``after``."""
    if isinstance(piece, TaskStep):
        if given is None and not piece.bound:
            raise ValueError(
                "the first step of a workflow needs its payload: step(task, payload) (an "
                "open step, step(task), takes the result of the step before it)"
            )
        if len(nodes) >= most:
            raise ValueError(f"a workflow has at most {most} steps")
        read = _flat(given) if given is not None else []
        waits = tuple(sorted({*read, *after}))
        nodes.append(PlanNode(piece, waits, None if piece.bound else given))
        return len(nodes) - 1, ()
    if isinstance(piece, Chain):
        exit_, also = given, after
        for part in piece.steps:
            exit_, also = _compile(part, exit_, also, nodes, most)
        assert exit_ is not None
        return exit_, also
    if isinstance(piece, Group):
        outs = [_compile(part, given, after, nodes, most) for part in piece.steps]
        return tuple(exit_ for exit_, _ in outs), tuple(n for _, also in outs for n in also)
    if isinstance(piece, GraphStep):
        return _compile_graph(piece, given, after, nodes, most)
    raise TypeError(f"not a piece of a workflow: {piece!r:.60}")


def _compile_graph(
    piece: GraphStep, given: Exit | None, after: tuple[int, ...], nodes: list[PlanNode], most: int
) -> _Out:
    """Each node after its parents, given its parent's exit (or the tuple of its parents'
    for a join); the nodes without parents are bound, so they wait for ``given`` and do not
    read it. What follows the graph waits for every node of it that feeds no other, as a
    nursery's end waits for every child, and reads the nodes it returns."""
    outs: list[_Out] = []
    fed: set[int] = set()
    for node in piece.nodes:
        fed.update(node.parents)
        also = tuple(n for parent in node.parents for n in outs[parent][1])
        if not node.parents:
            reads, also = given, after
        elif node.join:
            reads = tuple(outs[parent][0] for parent in node.parents)
        else:
            reads = outs[node.parents[0]][0]
        outs.append(_compile(node.step, reads, also, nodes, most))
    exit_: Exit = (
        tuple(outs[index][0] for index in piece.output)
        if piece.several
        else outs[piece.output[0]][0]
    )
    read = set(_flat(exit_))
    tails = [i for i in range(len(piece.nodes)) if i not in fed or i in piece.output]
    waited = {n for i in tails for n in (*_flat(outs[i][0]), *outs[i][1])}
    return exit_, tuple(sorted(waited - read))


def _flat(exit_: Exit) -> list[int]:
    if isinstance(exit_, int):
        return [exit_]
    return [node for item in exit_ for node in _flat(item)]


def _as_lists(exit_: Exit) -> Any:
    return exit_ if isinstance(exit_, int) else [_as_lists(item) for item in exit_]


def exit_parts(exit_: Exit) -> list[Part]:
    """The template parts that write ``exit_``'s value: one result, or a JSON array of
    the pieces' (consecutive nodes as one range)."""
    if isinstance(exit_, int):
        return [Results(exit_, exit_)]
    parts: list[Part] = [Literal(b"[")]
    items = list(exit_)
    at = 0
    while at < len(items):
        if at:
            parts.append(Literal(b","))
        item = items[at]
        if isinstance(item, int):
            end = at
            while end + 1 < len(items) and items[end + 1] == _next_int(items[end]):
                end += 1
            last = items[end]
            assert isinstance(last, int)
            parts.append(Results(item, last, b","))
            at = end + 1
        else:
            parts += exit_parts(item)
            at += 1
    parts.append(Literal(b"]"))
    return parts


def _next_int(item: Exit) -> int | None:
    return item + 1 if isinstance(item, int) else None
