"""Strict JSON, as trunner reads stored messages with Python's json: the decoder (no NaN,
no Infinity: the encoder refuses them too), where each member's value is in a stored object
that msgspec does not read (a lone surrogate escape), and a number of seconds.

The envelope (``envelope``) and its decoding (``decode``) read with msgspec first, and come
here for what msgspec refuses.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

__all__ = ["loads", "member_spans", "seconds"]


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (the standard has no NaN or Infinity)")


#: Strict JSON: NaN and Infinity, which the encoder refuses, are refused here too.
_decoder = json.JSONDecoder(parse_constant=_no_constant)
loads = _decoder.decode

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_scan_string: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
#: One JSON value at an index: ``(value, end)`` (no whitespace skipped; StopIteration when
#: there is no value there).
_scan_once: Callable[[str, int], tuple[Any, int]] = _decoder.scan_once  # type: ignore[attr-defined]


def _skip(text: str, index: int) -> int:
    """The index of the first character at or after ``index`` that is not JSON whitespace."""
    match = _WHITESPACE.match(text, index)
    return match.end() if match else index


def member_spans(text: str) -> dict[str, tuple[int, int]] | None:
    """Where the value of each member of the JSON object ``text`` is: ``{key: (start, end)}``
    (the last of duplicate keys, as the decoder keeps); None if ``text`` is not an object."""
    spans: dict[str, tuple[int, int]] = {}
    try:
        i = _skip(text, 0)
        if text[i : i + 1] != "{":
            return None
        i = _skip(text, i + 1)
        if text[i : i + 1] == "}":
            return spans
        while True:
            if text[i : i + 1] != '"':
                return None
            key, i = _scan_string(text, i + 1)
            i = _skip(text, i)
            if text[i : i + 1] != ":":
                return None
            start = _skip(text, i + 1)
            _, end = _scan_once(text, start)
            spans[key] = (start, end)
            i = _skip(text, end)
            if text[i : i + 1] == "}":
                return spans
            if text[i : i + 1] != ",":
                return None
            i = _skip(text, i + 1)
    except (ValueError, RecursionError, StopIteration):
        return None


def seconds(value: Any) -> float | None:
    """``value`` as a finite float, or None."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        as_float = float(value)
    except OverflowError:
        return None
    return as_float if math.isfinite(as_float) else None
