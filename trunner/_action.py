"""What a task's action may be, and where its body runs (``Task.action``, ``Task.run_in``):
an ``async def`` on the event loop, a plain ``def`` in a worker thread, or, with
``run_in="process"``, a plain ``def`` in a worker process (which imports it by its module
path, so it must be defined at a module's top level)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Literal

import attrs

from . import _validate as v

__all__ = ["Action", "RunIn", "check_action", "check_importable", "place_of"]

#: A task's action: an ``async def`` (run on the event loop) or a plain ``def`` (run in a
#: worker thread, or a worker process with ``run_in="process"``), taking the payload.
Action = Callable[[Any], Any]
#: Where a task's body runs (see ``Task.run_in``).
RunIn = Literal["loop", "thread", "process"]


def check_action(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    """``Task.action``'s validator: a callable taking the payload, not a generator."""
    if (
        not callable(value)
        or inspect.isasyncgenfunction(value)
        or inspect.isgeneratorfunction(value)
    ):
        raise TypeError(
            f"{attr.name} must be a function taking the payload (an 'async def' runs on the "
            f"event loop, a plain 'def' in a worker thread), got {value!r}"
        )
    try:
        inspect.signature(value).bind(None)
    except TypeError:
        raise TypeError(
            f"{attr.name} {value!r} must accept the payload as its one positional argument"
        ) from None
    except ValueError:  # no signature to inspect (some builtins): accept it
        pass


def place_of(name: str, action: object, run_in: object) -> RunIn:
    """Where the body of the task ``name`` runs: ``run_in`` (``Task.run_in``) checked
    against its action; ``None`` is the place the action's kind runs in."""
    is_async = v.is_async_callable(action)
    place = run_in
    if place is None:
        return "loop" if is_async else "thread"
    if place not in ("loop", "thread", "process"):
        raise ValueError(
            f"task {name!r}: run_in must be 'loop', 'thread' or 'process', got {place!r}"
        )
    if (place == "loop") != is_async:
        kind = "an 'async def'" if place == "loop" else "a plain 'def'"
        raise TypeError(f"task {name!r}: run_in={place!r} needs {kind} action")
    if place == "process":
        check_importable(name, action)
    return place


def check_importable(name: str, action: object) -> None:
    """A worker process finds the action of a ``run_in="process"`` task by its module
    path (``__module__`` and ``__qualname__``): nothing else of it crosses. Refuse, with
    the reason, an action that has none (a lambda, a function defined in a function, an
    object with ``__call__``, a ``functools.partial``)."""
    module = getattr(action, "__module__", None)
    qualname = getattr(action, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        why = "it has no module path (__module__ and __qualname__)"
    elif "<" in qualname:  # <lambda>, <locals>
        why = f"{qualname!r} is not at a module's top level (a lambda or a nested function)"
    else:
        return
    raise TypeError(
        f"task {name!r}: run_in='process' runs the action in a worker process, which imports "
        f"it by its module path, but {why}: define it with 'def' at the top level of a module"
    )
