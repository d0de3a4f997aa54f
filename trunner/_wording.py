"""The wording of trunner's longer error messages, built from the fields of the exception
that says it: the names closest to a misspelt one ("did you mean"), why a task was given
up, how a worker process died. A leaf: ``errors`` imports it."""

from __future__ import annotations

import difflib
import signal
from collections.abc import Iterable

__all__ = ["LISTED_NAMES", "closest_names", "death", "given_up"]

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


def given_up(task_name: str, attempts: int, redelivered: bool, deliveries: int) -> str:
    """Why a task was given up (``MaxRetryExceeded``): its runs kept being lost, it came
    back after its last attempt, or its attempts failed."""
    if deliveries:
        return (
            f"task {task_name!r} (attempt {attempts}) was delivered {deliveries} times "
            "without a recorded outcome (each time its worker crashed, was killed, or "
            "stalled past reclaim_delay): its max_redeliveries are used up"
        )
    if redelivered:
        return (
            f"task {task_name!r} was delivered again after its last allowed attempt "
            f"({attempts}) without a recorded outcome (its failed-task handler raised, "
            "or was cut off by a shutdown)"
        )
    return f"task {task_name!r} failed after {attempts} attempt(s)"


def death(exitcode: int | None) -> str:
    """How a worker process died (``WorkerProcessDied``), from its exit code."""
    if exitcode is None:
        return "with no exit status"
    if exitcode >= 0:
        return f"with exit code {exitcode}"
    try:
        return f"killed by signal {signal.Signals(-exitcode).name} ({-exitcode})"
    except ValueError:
        return f"killed by signal {-exitcode}"
