"""Reading what trunner wrote, for the test helpers' messages."""

from __future__ import annotations

import collections
import json
from collections.abc import Iterable
from typing import Any

__all__ = ["field", "tally", "task_name"]


def task_name(raw: Any) -> str:
    """The task name in a stream entry's payload field (a stand-in if it has none)."""
    try:
        name = json.loads(raw)["task"]
    except (ValueError, TypeError, KeyError):
        return "(undecodable)"
    return name if isinstance(name, str) and name else "(undecodable)"


def field(flat: Any, name: bytes) -> Any:
    for i in range(0, len(flat or ()) - 1, 2):
        if flat[i] == name:
            return flat[i + 1]
    return None


def tally(names: Iterable[str]) -> str:
    """``a: 2, b: 1`` (most frequent first)."""
    return ", ".join(f"{n}: {c}" for n, c in collections.Counter(names).most_common())
