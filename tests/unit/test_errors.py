"""The tree of exceptions drawn in ``trunner.errors``'s docstring is the real one."""

from __future__ import annotations

import ast
import functools
import inspect
import pickle

import trio

import trunner.errors
from trunner._errors import calls, outcomes, runtime, workflows

#: The marker of a class at each depth of the drawn tree (as httpx/_exceptions.py draws it).
MARKERS = "*+-"
#: The modules that define the classes, in the order of the tree (``trunner.errors`` names
#: itself their module, so ``inspect`` does not find their source).
PARTS = (calls, outcomes, workflows, runtime)


@functools.cache
def _lines(index: int) -> dict[str, int]:
    """The line of each class defined in ``PARTS[index]``."""
    tree = ast.parse(inspect.getsource(PARTS[index]))
    return {node.name: node.lineno for node in tree.body if isinstance(node, ast.ClassDef)}


def _place(cls: type) -> tuple[int, int]:
    """Where ``cls`` is defined: its part, then its line."""
    for index, part in enumerate(PARTS):
        if vars(part).get(cls.__name__) is cls:
            return index, _lines(index)[cls.__name__]
    raise AssertionError(f"{cls.__name__} is defined in none of {PARTS}")


def _drawn(cls: type[BaseException], ours: set[type], depth: int) -> list[str]:
    """The lines of ``cls`` and the classes under it, in the order of the source."""
    others = [
        base.__qualname__ if base.__module__ == "builtins" else f"{base.__module__}.{base.__name__}"
        for base in cls.__bases__
        if base not in ours and base is not Exception
    ]
    line = f"{'  ' * depth}{MARKERS[depth]} {cls.__name__}"
    lines = [line + (f" ({', '.join(others)})" if others else "")]
    children = [c for c in ours if [b for b in c.__bases__ if b in ours][:1] == [cls]]
    for child in sorted(children, key=_place):
        lines += _drawn(child, ours, depth + 1)
    return lines


def _tree() -> list[str]:
    ours = {getattr(trunner.errors, name) for name in trunner.errors.__all__}
    roots = [c for c in ours if not any(b in ours for b in c.__bases__)]
    lines = []
    for root in sorted(roots, key=_place):
        lines += _drawn(root, ours, 0)
    return lines


def test_the_drawn_tree_is_the_class_hierarchy() -> None:
    doc = trunner.errors.__doc__ or ""
    drawn = [line for line in doc.splitlines() if line.lstrip()[:2] in {"* ", "+ ", "- "}]
    assert drawn == _tree()


def test_every_class_derives_from_one_of_ours_at_most() -> None:
    """The tree can show each class once: none derives from two of trunner's classes."""
    ours = {getattr(trunner.errors, name) for name in trunner.errors.__all__}
    assert [c for c in ours if sum(b in ours for b in c.__bases__) > 1] == []


def test_the_tree_names_trunner_error_as_the_root_of_all_but_remote_failure() -> None:
    roots = [line for line in _tree() if line.startswith("* ")]
    assert roots == ["* TrunnerError", "* RemoteFailure"]
    assert all(
        isinstance(c, type) for c in map(trunner.errors.__dict__.get, trunner.errors.__all__)
    )


def test_a_result_timeout_is_a_builtin_timeout_error_too() -> None:
    """asyncio code catches ``TimeoutError`` (what ``asyncio.timeout`` raises), Trio code
    ``trio.TooSlowError``: a ``ResultTimeout`` is both, and nothing else changes."""
    error = trunner.errors.ResultTimeout("waited 1.5 s", task_id="t1", timeout=1.5)
    assert isinstance(error, TimeoutError)
    assert isinstance(error, trio.TooSlowError)
    assert str(error) == "waited 1.5 s"
    assert error.args == ("waited 1.5 s",)
    assert (error.errno, error.strerror) == (None, None)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is trunner.errors.ResultTimeout
    assert (str(copy), copy.task_id, copy.timeout) == ("waited 1.5 s", "t1", 1.5)
