"""The workflows' history check (tests/support/workflow_history.py) on synthetic
histories: each guarantee it checks is broken once, and said."""

from __future__ import annotations

import json
from typing import Any

from ..support.history import Event, History
from ..support.workflow_history import chain_shape, chord_shape, workflow_check

CHAIN = chain_shape("c", 3, 10)  # 10 -> 11 -> 12 -> 13
CHORD = chord_shape("h", [1, 2])  # squares 1, 4; total 5


def run(
    h: History,
    step: str,
    pid: int,
    start: float,
    end: float | None,
    value: Any,
    result: Any = None,
    *,
    entry: str = "",
    kind: str = "finished",
) -> None:
    """One run of ``step``: started at ``start`` with input ``value``, ended at ``end``."""
    name = f"{step}@{start}"
    entry = entry or f"{step}-entry"
    h.extend([Event("started", step, start, pid, name, 1, entry, json.dumps(value))])
    if end is not None:
        h.extend([Event(kind, step, end, pid, name, 1, entry, json.dumps(result))])


def clean_chain(h: History) -> None:
    run(h, "c.0", 1, 1.0, 1.1, 10, 11)
    run(h, "c.1", 2, 1.2, 1.3, 11, 12)
    run(h, "c.2", 1, 1.4, 1.5, 12, 13)


def clean_chord(h: History) -> None:
    run(h, "h.0", 1, 1.0, 1.1, 1, 1)
    run(h, "h.1", 2, 1.0, 1.2, 2, 4)
    run(h, "h.2", 1, 1.3, 1.4, [1, 4], 5)


def test_clean_workflows_have_no_problem() -> None:
    h = History()
    clean_chain(h)
    clean_chord(h)
    report = workflow_check(h, [CHAIN, CHORD])
    assert report.problems() == {}
    assert (report.workflows, report.nodes, report.executions) == (2, 6, 6)
    assert "problems none" in report.summary()


def test_a_rerun_on_a_killed_worker_is_explained_and_any_other_is_not() -> None:
    h = History()
    run(h, "c.0", 1, 1.0, None, 10)  # its worker died while running it
    run(h, "c.0", 2, 2.0, 2.1, 10, 11)
    run(h, "c.1", 2, 2.2, 2.3, 11, 12)
    run(h, "c.1", 3, 2.4, 2.5, 11, 12)  # ran again, nobody died
    run(h, "c.2", 3, 2.6, 2.7, 12, 13)
    h.crashed(1, 1.05)
    report = workflow_check(h, [CHAIN])
    assert report.duplicates == {"c.0": 2, "c.1": 2}
    assert report.problems() == {"unexplained": ["c.1"]}


def test_a_node_enqueued_twice_or_started_early_or_fed_wrong_is_said() -> None:
    h = History()
    run(h, "h.0", 1, 1.0, 1.1, 1, 1)
    run(h, "h.1", 2, 1.0, 1.5, 2, 4)
    run(h, "h.2", 1, 1.3, 1.4, [1], 1)  # before h.1 finished, and without its result
    run(h, "h.2", 2, 1.6, 1.7, [1, 4], 5, entry="again")  # from a second entry
    h.crashed(1, 1.45)
    problems = workflow_check(h, [CHORD]).problems()
    assert problems == {
        "multi_entry": {"h.2": 2},
        "early": ["h.2"],
        "wrong_input": {"h.2": ([1], [1, 4])},
        "inconsistent": ["h.2"],
    }


def test_a_lost_node_and_a_stranger_are_said() -> None:
    h = History()
    run(h, "c.0", 1, 1.0, 1.1, 10, 11)
    run(h, "c.1", 1, 1.2, None, 11)  # never finished
    run(h, "c.7", 1, 1.2, 1.3, 0, 1)  # no such node
    run(h, "x.0", 1, 1.2, 1.3, 0, 1)  # no such workflow
    report = workflow_check(h, [CHAIN])
    assert report.problems() == {
        "lost": ["c.1", "c.2"],
        "unexpected": ["c.7", "x.0"],
    }
