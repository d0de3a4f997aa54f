"""Graphs: steps wired as a DAG, where a node feeds several later ones and a node joins
several others (design/workflows.md §1.1). Built with :class:`Graph` (typed) or
:func:`graph` (a dict of names); compiled with the other steps by
:mod:`trunner._workflows._plan`."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Generic, TypeAlias, TypeVar, overload

import attrs

from .._task import Task
from ._steps import Chain, Group, Step, TaskStep

__all__ = ["Graph", "GraphNode", "GraphStep", "Node", "graph"]

R_co = TypeVar("R_co", covariant=True)
A = TypeVar("A")
B = TypeVar("B")
C = TypeVar("C")
D = TypeVar("D")
E = TypeVar("E")
F = TypeVar("F")
Out = TypeVar("Out")


@attrs.frozen(eq=False)
class Node(Generic[R_co]):
    """One node of a [`Graph`][trunner.Graph], as its methods
    [`add`][trunner.Graph.add], [`then`][trunner.Graph.then] and
    [`join`][trunner.Graph.join] give it: a ``Node[R]`` gives ``R`` (its step's result) to
    the nodes that read it. It belongs to the graph that made it."""

    index: int
    """Its place in its graph (the order the nodes were added)."""
    name: str
    """Its name in error messages: the one given, else ``#<index> (<task>)``."""
    _graph: Graph = attrs.field(repr=False, alias="graph")


@attrs.frozen
class GraphNode:
    """A node as a graph stores it: its step, its parents (indices of earlier nodes), and
    whether its payload is the list of their results (a join) or its one parent's."""

    step: Step[Any, Any]
    parents: tuple[int, ...]
    join: bool
    name: str


@attrs.frozen(eq=False)
class GraphStep(Step[Any, Any]):
    """A graph as a step: its nodes, each after its parents, and the nodes whose results
    make its own (one: that result; several: the list of theirs)."""

    nodes: tuple[GraphNode, ...]
    output: tuple[int, ...]
    several: bool


class Graph:
    """A DAG of steps, built node by node; [`returning`][trunner.Graph.returning] makes it
    a step (a whole workflow, or a piece of a chain, a group or another graph).

    ```python
    g = Graph()
    page = g.add(step(fetch, url))  # Node[Page]
    words = g.then(page, step(count_words))  # Node[int]
    links = g.then(page, step(find_links))  # Node[list[str]]
    report = g.join(step(summarize), words, links)  # summarize(pair: tuple[int, list[str]])
    handle = await client.dispatch(g.returning(report))
    ```

    A node starts once every parent succeeded. Every node runs, whether or not the
    returned node reads it; a graph takes no input: in a chain it waits for the steps
    before it, and ignores their results, as a bound step does.
    """

    def __init__(self) -> None:
        self._nodes: list[GraphNode] = []
        self._names: set[str] = set()
        self._steps: dict[int, str] = {}  # id of a step added -> its node's name

    def add(self, step: Step[object, A], /, *, name: str | None = None) -> Node[A]:
        """A node without parents: ``step`` needs no input (a bound step, or a composite
        whose first steps are bound). ValueError for an open step: it has no payload.
        ``name`` (here and in [`then`][trunner.Graph.then] and
        [`join`][trunner.Graph.join]) names the node in error messages; one name per
        graph."""
        return self._node(step, (), False, name)

    def then(self, parent: Node[A], step: Step[A, B], /, *, name: str | None = None) -> Node[B]:
        """A node after ``parent``, given its result (a bound ``step`` waits for it and
        ignores it)."""
        return self._node(step, (parent,), False, name)

    @overload
    def join(
        self, step: Step[tuple[A], Out], a: Node[A], /, *, name: str | None = None
    ) -> Node[Out]: ...
    @overload
    def join(
        self, step: Step[tuple[A, B], Out], a: Node[A], b: Node[B], /, *, name: str | None = None
    ) -> Node[Out]: ...
    @overload
    def join(
        self,
        step: Step[tuple[A, B, C], Out],
        a: Node[A],
        b: Node[B],
        c: Node[C],
        /,
        *,
        name: str | None = None,
    ) -> Node[Out]: ...
    @overload
    def join(
        self,
        step: Step[tuple[A, B, C, D], Out],
        a: Node[A],
        b: Node[B],
        c: Node[C],
        d: Node[D],
        /,
        *,
        name: str | None = None,
    ) -> Node[Out]: ...
    @overload
    def join(
        self,
        step: Step[tuple[A, B, C, D, E], Out],
        a: Node[A],
        b: Node[B],
        c: Node[C],
        d: Node[D],
        e: Node[E],
        /,
        *,
        name: str | None = None,
    ) -> Node[Out]: ...
    @overload
    def join(
        self,
        step: Step[tuple[A, B, C, D, E, F], Out],
        a: Node[A],
        b: Node[B],
        c: Node[C],
        d: Node[D],
        e: Node[E],
        f: Node[F],
        /,
        *,
        name: str | None = None,
    ) -> Node[Out]: ...
    @overload
    def join(
        self, step: Step[list[A], Out], /, *parents: Node[A], name: str | None = None
    ) -> Node[Out]: ...
    def join(self, step: Step[Any, Any], /, *parents: Node[Any], name: str | None = None) -> Any:
        """A node after every one of ``parents``, given the list of their results in this
        order: its task reads a JSON array, as a tuple (``tuple[A, B]`` for parents
        ``Node[A]``, ``Node[B]``: typed for up to six parents) or as a list (``list[A]``
        for parents that all give ``A``, any number of them). A bound ``step`` waits for
        them and ignores their results."""
        if not parents:
            raise ValueError("a join needs at least one parent node")
        return self._node(step, parents, True, name)

    @overload
    def returning(self, node: Node[A], /) -> Step[object, A]: ...
    @overload
    def returning(
        self, node: Node[Any], other: Node[Any], /, *more: Node[Any]
    ) -> Step[object, list[Any]]: ...
    def returning(self, *nodes: Node[Any]) -> Step[object, Any]:
        """The graph as a step, whose result is ``node``'s (several nodes: the list of
        their results, in this order). The graph's nodes as they are now: nodes added
        later are not in it."""
        if not nodes:
            raise ValueError("returning() names the node (or nodes) whose result is the graph's")
        indices = tuple(self._index_of(node, "returning()") for node in nodes)
        return GraphStep(tuple(self._nodes), indices, len(indices) > 1)

    def _node(
        self, step: Step[Any, Any], parents: tuple[Node[Any], ...], join: bool, name: str | None
    ) -> Node[Any]:
        index = len(self._nodes)
        if not isinstance(step, Step):
            raise TypeError(f"a graph's node runs a step (step(task, ...)), not {step!r:.60}")
        label = _label(index, step, name)
        if name is not None and not isinstance(name, str):
            raise TypeError(f"a graph node's name is a str, not {name!r:.60}")
        if name is not None and name in self._names:
            raise ValueError(f"graph node {name!r}: a node of this graph has that name already")
        if id(step) in self._steps:
            raise ValueError(
                f"graph node {label}: its step is node {self._steps[id(step)]} already (a step "
                "is one node: read its result through that node, or build another step)"
            )
        indices = tuple(self._index_of(parent, f"node {label}") for parent in parents)
        if not parents and needs_input(step):
            raise ValueError(
                f"graph node {label} has no parents and no payload: give it one "
                "(step(task, payload)) or parents (then() or join(); in graph(), "
                "(step, 'parent'))"
            )
        self._nodes.append(GraphNode(step, indices, join, label))
        self._steps[id(step)] = label
        if name is not None:
            self._names.add(name)
        return Node(index, label, graph=self)

    def _index_of(self, node: object, what: str) -> int:
        if not isinstance(node, Node):
            raise TypeError(f"{what} reads nodes of its graph, not {node!r:.60}")
        if node._graph is not self:
            raise ValueError(f"{what} reads node {node.name}, which is a node of another graph")
        return node.index


#: A node of :func:`graph`'s dict: a step without parents, or a step and its parents.
GraphSpec: TypeAlias = "Step[Any, Any] | tuple[Step[Any, Any], str | Sequence[str]]"


def graph(
    nodes: Mapping[str, GraphSpec], /, *, returning: str | Sequence[str] | None = None
) -> Step[object, Any]:
    """A DAG of steps by name, untyped ([`Graph`][trunner.Graph] is the typed builder).

    Each entry is a step without parents, or ``(step, "parent")`` (given that node's
    result, as [`Graph.then`][trunner.Graph.then]), or ``(step, ["a", "b"])`` (given the
    list ``[a's, b's]``, as [`Graph.join`][trunner.Graph.join]). Names may be used before
    their entry; the steps are numbered in an order where each comes after its parents,
    the dict's order otherwise. Its result is that of ``returning`` (a list of names: the
    list of their results), by default of its one node that no other reads; several such
    nodes need ``returning``. ValueError, naming the nodes, for a cycle, an unknown name,
    an empty graph, and what [`Graph`][trunner.Graph] refuses."""
    if not isinstance(nodes, Mapping):
        raise TypeError(f"a graph is a dict of its nodes by name, not {nodes!r:.60}")
    if not nodes:
        raise ValueError("a graph needs at least one node: {name: step, ...}")
    parsed = {name: _entry(name, spec) for name, spec in nodes.items()}
    builder, made = Graph(), dict[str, Node[Any]]()
    for name in _ordered(parsed):
        step, parents, join = parsed[name]
        reads = tuple(made[parent] for parent in parents)
        made[name] = builder._node(step, reads, join, name)
    return builder.returning(*(made[name] for name in _outputs(parsed, returning)))


def _entry(name: object, spec: object) -> tuple[Step[Any, Any], tuple[str, ...], bool]:
    if not isinstance(name, str) or not name:
        raise ValueError(f"a graph's nodes are named by non-empty strings, not {name!r:.60}")
    if isinstance(spec, Step):
        return spec, (), False
    if isinstance(spec, tuple) and len(spec) == 2:
        step, parents = spec
        if isinstance(parents, str):
            return step, (parents,), False
        parents = tuple(parents) if isinstance(parents, Iterable) else None
        if parents is not None and all(isinstance(p, str) for p in parents):
            if not parents:
                raise ValueError(f"graph node {name!r}: its list of parents is empty")
            return step, parents, True
    raise TypeError(
        f"graph node {name!r} is a step, (step, 'parent') or (step, ['a', 'b']), not {spec!r:.60}"
    )


def _ordered(parsed: Mapping[str, tuple[Any, tuple[str, ...], bool]]) -> list[str]:
    """The names, each after its parents, in the dict's order where it allows (a cycle or
    an unknown name: ValueError naming them)."""
    for name, (_, parents, _) in parsed.items():
        unknown = [parent for parent in parents if parent not in parsed]
        if unknown:
            raise ValueError(f"graph node {name!r} reads {unknown[0]!r}, which is not a node")
    position = {name: at for at, name in enumerate(parsed)}
    waiting = {name: len(set(parents)) for name, (_, parents, _) in parsed.items()}
    readers: dict[str, list[str]] = {name: [] for name in parsed}
    for name, (_, parents, _) in parsed.items():
        for parent in set(parents):
            readers[parent].append(name)
    ready = [position[name] for name, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order: list[str] = []
    names = list(parsed)
    while ready:
        name = names[heapq.heappop(ready)]
        order.append(name)
        for reader in readers[name]:
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(ready, position[reader])
    if len(order) < len(parsed):
        raise ValueError(f"graph nodes {_cycle(parsed, set(order))} make a cycle")
    return order


def _cycle(parsed: Mapping[str, tuple[Any, tuple[str, ...], bool]], placed: set[str]) -> str:
    """One cycle among the nodes not placed, as ``'a' -> 'b' -> 'a'``."""
    path = [next(name for name in parsed if name not in placed)]
    at = {path[0]: 0}
    while True:
        here = next(p for p in parsed[path[-1]][1] if p not in placed)
        if here in at:
            loop = [repr(name) for name in [*path[at[here] :], here][::-1]]
            if len(loop) <= 12:
                return " -> ".join(loop)
            return f"{' -> '.join([*loop[:10], '...', loop[-1]])} ({len(loop) - 1} nodes)"
        at[here] = len(path)
        path.append(here)


def _outputs(
    parsed: Mapping[str, tuple[Any, tuple[str, ...], bool]], returning: str | Sequence[str] | None
) -> list[str]:
    if returning is None:
        read = {parent for _, parents, _ in parsed.values() for parent in parents}
        sinks = [name for name in parsed if name not in read]
        if len(sinks) > 1:
            raise ValueError(
                f"graph nodes {', '.join(map(repr, sinks))} are read by no other: say which "
                "make its result with returning="
            )
        return sinks
    names = [returning] if isinstance(returning, str) else list(returning)
    unknown = [name for name in names if name not in parsed]
    if unknown or not names:
        raise ValueError(f"returning={returning!r} names no node of the graph")
    return names


def needs_input(step: Step[Any, Any]) -> bool:
    """Whether ``step`` reads what flows in: an open step, or a composite that starts with
    one (a graph takes no input)."""
    if isinstance(step, TaskStep):
        return not step.bound
    if isinstance(step, Chain):
        return needs_input(step.steps[0])
    if isinstance(step, Group):
        return any(needs_input(part) for part in step.steps)
    return False


def _label(index: int, step: Step[Any, Any], name: str | None) -> str:
    if name is not None:
        return repr(name)
    if isinstance(step, TaskStep):
        task = step.task
        what = task if isinstance(task, str) else task.name if isinstance(task, Task) else None
        what = what or getattr(task, "__name__", "a task")
    else:
        what = type(step).__name__.lower().removesuffix("step")
    return f"#{index} ({what})"
