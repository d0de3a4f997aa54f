"""What in a payload cannot be sent as JSON, where it is, and what to send instead.

A task payload travels as JSON: dicts, lists (tuples arrive as lists), strings, numbers,
booleans and ``None``. trunner converts nothing else silently: a ``datetime``, ``date``,
``UUID``, ``Decimal``, an ``Enum`` member (an ``IntEnum`` or ``StrEnum`` one too, which the
JSON encoder would quietly turn into its value), a ``set``, ``bytes`` or any other object
is refused at dispatch with its place in the payload (``payload["items"][3]``) and what to
send instead.

:func:`is_plain` is the cheap check every encoding runs (exact JSON types only);
:func:`find_problem` looks closer only when it fails, or when the encoder refused the
payload.
"""

from __future__ import annotations

import enum
import json
import math
import sys
from typing import Any

__all__ = ["Problem", "find_problem", "is_plain"]

_SCALARS = frozenset({str, int, float, bool, type(None)})
#: Key types the JSON encoder takes (and turns into strings).
_KEY_TYPES = (str, int, float, bool, type(None))


def is_plain(value: Any) -> bool:
    """Whether ``value`` holds only exact JSON types (no subclass, no Enum member): then
    only a NaN or an infinity can still stop the encoder. False says "look closer" (a
    cycle, or a nesting too deep to walk, too)."""
    try:
        return _plain(value)
    except RecursionError:
        return False


def _plain(value: Any) -> bool:
    kind = type(value)
    if kind in _SCALARS:
        return True
    if kind is dict:
        return all(type(k) in _SCALARS and _plain(v) for k, v in value.items())
    if kind is list or kind is tuple:
        return all(_plain(v) for v in value)
    return False


class Problem:
    """A value that cannot be sent: where (``payload["a"][0]``), what, and what to do."""

    __slots__ = ("hint", "path", "what")

    def __init__(self, path: str, what: str, hint: str) -> None:
        self.path = path
        self.what = what
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.path} is {self.what}: {self.hint}"


def _a(name: str) -> str:
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def _types(module: str, *names: str) -> tuple[type, ...]:
    """Classes of ``module`` if it is loaded: a value of one of them cannot exist
    otherwise, and a worker that never needs ``datetime`` or ``uuid`` does not load them."""
    loaded = sys.modules.get(module)
    return tuple(getattr(loaded, name) for name in names) if loaded is not None else ()


def _hint(value: Any) -> tuple[str, str]:
    """(what the value is, what to send instead)."""
    name = type(value).__qualname__
    if isinstance(value, enum.Enum):
        return f"an Enum member ({name}.{value.name})", "send value.value (or value.name)"
    if isinstance(value, _types("datetime", "datetime", "date", "time")):
        return _a(name), "send value.isoformat(), and parse it in the task"
    if isinstance(value, _types("uuid", "UUID")):
        return "a UUID", "send str(value)"
    if isinstance(value, _types("decimal", "Decimal")):
        return "a Decimal", "send str(value) (exact), and Decimal(...) it in the task"
    if isinstance(value, set | frozenset):
        return _a(name), "send a list, e.g. sorted(value)"
    if isinstance(value, bytes | bytearray | memoryview):
        return f"{name}", "send text: value.decode(), or base64 for binary data"
    if isinstance(value, float):
        return f"{value!r}", "JSON has no NaN or Infinity: send None or a string"
    return (
        _a(name),
        "send its data as JSON values (dicts, lists, strings, numbers, booleans, None)",
    )


def _key(key: Any) -> str:
    return json.dumps(key) if isinstance(key, str) else repr(key)


def find_problem(value: Any, path: str = "payload") -> Problem | None:
    """The first value of ``value`` (depth first) that cannot be sent as JSON; None when
    there is none."""
    try:
        return _find(value, path, set())
    except RecursionError:
        return Problem(path, "nested too deeply", "send a flatter structure")


def _find(value: Any, path: str, open_containers: set[int]) -> Problem | None:
    if isinstance(value, enum.Enum):
        return Problem(path, *_hint(value))
    if value is None or isinstance(value, str | int):  # bool is an int
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else Problem(path, *_hint(value))
    if not isinstance(value, dict | list | tuple):  # a Mapping that is no dict too
        return Problem(path, *_hint(value))
    if id(value) in open_containers:
        return Problem(path, "a reference back to a container it is in (a cycle)", "send a copy")
    open_containers.add(id(value))
    try:
        return _find_inside(value, path, open_containers)
    finally:
        open_containers.discard(id(value))


def _find_inside(
    value: dict[Any, Any] | list[Any] | tuple[Any, ...], path: str, open_containers: set[int]
) -> Problem | None:
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, enum.Enum) or not isinstance(key, _KEY_TYPES):
                what, hint = _hint(key)
                return Problem(f"a key of {path}", f"{what}, {key!r}", hint)
            if (problem := _find(item, f"{path}[{_key(key)}]", open_containers)) is not None:
                return problem
        return None
    for index, item in enumerate(value):
        if (problem := _find(item, f"{path}[{index}]", open_containers)) is not None:
            return problem
    return None
