"""The pieces of a workflow, as values: a task's step, a chain, a group (design/workflows.md
§1). Built by :func:`step`, :func:`chain`, :func:`group` and :func:`chord`; compiled to a
plan by :mod:`trunner.workflows._plan`; dispatched by a client."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Generic, TypedDict, TypeVar, Unpack, overload

import attrs

from .._task import Task

__all__ = [
    "OPEN",
    "Chain",
    "Group",
    "Step",
    "StepOptions",
    "TaskStep",
    "chain",
    "chord",
    "group",
    "step",
]

P_contra = TypeVar("P_contra", contravariant=True)
R_co = TypeVar("R_co", covariant=True)
In = TypeVar("In")
Out = TypeVar("Out")
X = TypeVar("X")
A = TypeVar("A")
B = TypeVar("B")
C = TypeVar("C")
D = TypeVar("D")
E = TypeVar("E")
F = TypeVar("F")


class _Open:
    """The payload of an open step: what flows in from the steps before it."""

    def __repr__(self) -> str:
        return "OPEN"


#: The payload of an open step (see :func:`step`).
OPEN: Any = _Open()


class Step(Generic[P_contra, R_co]):
    """A piece of a workflow that takes ``P`` from the steps before it and gives ``R`` to
    the steps after it. ``Step[object, R]`` needs nothing from before (its payload is bound,
    or it is a whole workflow): it is what a client dispatches."""

    __slots__ = ()


@attrs.frozen(eq=False)
class TaskStep(Step[Any, Any]):
    """One task's run: its task (a registered function, a :class:`~trunner.Task` or a
    name), its payload (:data:`OPEN`: what flows in), and its dispatch options."""

    task: str | Task | Callable[..., Any]
    payload: Any = OPEN
    priority: str | None = None
    timeout: float | None = None
    keep_result: float | None = None
    headers: Mapping[str, str] | None = None

    @property
    def bound(self) -> bool:
        """Whether its payload is fixed: it waits for the steps before it, and ignores
        their results."""
        return self.payload is not OPEN


@attrs.frozen(eq=False)
class Chain(Step[Any, Any]):
    """Steps one after the other: each gets the result of the one before it."""

    steps: tuple[Step[Any, Any], ...]


@attrs.frozen(eq=False)
class Group(Step[Any, Any]):
    """Steps side by side: each gets the same input; the result is the list of theirs, in
    the group's order."""

    steps: tuple[Step[Any, Any], ...]


def _options(
    priority: str | None, timeout: float | None, keep_result: float | None, headers: Any
) -> dict[str, Any]:
    if timeout is not None and (not isinstance(timeout, int | float) or not timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return {
        "priority": priority,
        "timeout": timeout,
        "keep_result": keep_result,
        "headers": headers,
    }


class StepOptions(TypedDict, total=False):
    """The options of a step, as :func:`step` takes them: a dispatch's."""

    priority: str | None
    timeout: float | None
    keep_result: float | None
    headers: Mapping[str, str] | None


@overload
def step(
    task: Callable[[In], Awaitable[Out]], /, **options: Unpack[StepOptions]
) -> Step[In, Out]: ...
@overload
def step(
    task: Callable[[In], Awaitable[Out]], payload: In, /, **options: Unpack[StepOptions]
) -> Step[object, Out]: ...
@overload
def step(task: Callable[[In], Out], /, **options: Unpack[StepOptions]) -> Step[In, Out]: ...
@overload
def step(
    task: Callable[[In], Out], payload: In, /, **options: Unpack[StepOptions]
) -> Step[object, Out]: ...
@overload
def step(
    task: str | Task, payload: Any = ..., /, **options: Unpack[StepOptions]
) -> Step[Any, Any]: ...
def step(
    task: Any,
    payload: Any = OPEN,
    /,
    *,
    priority: str | None = None,
    timeout: float | None = None,
    keep_result: float | None = None,
    headers: Mapping[str, str] | None = None,
) -> Step[Any, Any]:
    """A step that runs ``task``: with ``payload`` it is *bound* (it runs on that payload,
    after the steps before it, and ignores their results: celery's ``.si()``); without, it
    is *open*: its payload is what flows in (the result of the step before it, or the list
    of a group's). The options are a dispatch's: ``priority`` (its lane), ``timeout``,
    ``keep_result`` (its own outcome, kept as any task's), ``headers``. Retries, limits and
    where it runs are its task's."""
    if not (isinstance(task, str | Task) or callable(task)):
        raise TypeError(f"a step runs a task (a function, a Task or a name), not {task!r:.60}")
    return TaskStep(task, payload, **_options(priority, timeout, keep_result, headers))


@overload
def chain(a: Step[X, A], b: Step[A, B], /) -> Step[X, B]: ...
@overload
def chain(a: Step[X, A], b: Step[A, B], c: Step[B, C], /) -> Step[X, C]: ...
@overload
def chain(a: Step[X, A], b: Step[A, B], c: Step[B, C], d: Step[C, D], /) -> Step[X, D]: ...
@overload
def chain(
    a: Step[X, A], b: Step[A, B], c: Step[B, C], d: Step[C, D], e: Step[D, E], /
) -> Step[X, E]: ...
@overload
def chain(
    a: Step[X, A], b: Step[A, B], c: Step[B, C], d: Step[C, D], e: Step[D, E], f: Step[E, F], /
) -> Step[X, F]: ...
@overload
def chain(
    a: Step[Any, Any],
    b: Step[Any, Any],
    c: Step[Any, Any],
    d: Step[Any, Any],
    e: Step[Any, Any],
    f: Step[Any, Any],
    g: Step[Any, Any],
    /,
    *more: Step[Any, Any],
) -> Step[Any, Any]: ...
def chain(*steps: Step[Any, Any]) -> Step[Any, Any]:
    """``steps`` one after the other: each gets the result of the one before it (typed up
    to six steps, where mypy checks that each step takes what the one before gives; a
    longer chain is ``Step[Any, Any]``)."""
    return Chain(_steps(steps, "chain"))


def group(steps: Iterable[Step[X, A]], /) -> Step[X, list[A]]:
    """``steps`` side by side, each given the same input; its result is the list of
    theirs, in this order. With fail-fast (the default of a dispatch) a step that fails for
    good cancels the others, as a nursery does."""
    return Group(_steps(tuple(steps), "group"))


def chord(header: Step[X, list[A]], callback: Step[list[A], B], /) -> Step[X, B]:
    """``callback`` given the list of ``header``'s results (a group's), once every one of
    them succeeded: ``chain(header, callback)``."""
    return Chain(_steps((header, callback), "chord"))


def _steps(steps: tuple[Any, ...], what: str) -> tuple[Step[Any, Any], ...]:
    if not steps:
        raise ValueError(f"a {what} needs at least one step")
    for item in steps:
        if not isinstance(item, Step):
            raise TypeError(f"a {what} is made of steps (step(task, ...)), not {item!r:.60}")
    return steps
