"""Did you mean: the known names closest to a misspelt one, and the hint an error message
gives with them (a leaf: ``errors`` words ``TaskNotFound`` with it)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["LISTED_NAMES", "closest_names"]

#: Known names this few are listed whole when an unknown name resembles none of them.
LISTED_NAMES = 10


def closest_names(name: str, known: Iterable[str]) -> tuple[list[str], str]:
    """The ``known`` names closest to an unknown ``name`` (up to 3; may be empty), and the
    hint an error message gives with it: ``"; did you mean 'a' or 'b'?"``, else the known
    names when there are few (``" (registered: a, b)"``), else ``""``."""
    names = sorted(known)
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if close:
        return close, "; did you mean " + " or ".join(repr(n) for n in close) + "?"
    if names and len(names) <= LISTED_NAMES:
        return close, f" (registered: {', '.join(names)})"
    return close, ""
