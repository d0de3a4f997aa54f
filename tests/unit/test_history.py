"""The history checker of the reliability suite, on synthetic histories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..support.history import Event, History, LogReader


def run(
    h: History,
    task: str,
    pid: int,
    start: float,
    end: float | None = None,
    *,
    kind: str = "finished",
    entry: str = "1-0",
    attempt: int = 1,
) -> None:
    """Add one run of ``task`` on ``pid``: started at ``start``, ended at ``end``."""
    name = f"{task}@{start}"
    h.extend([Event("started", task, start, pid, name, attempt, entry)])
    if end is not None:
        h.extend([Event(kind, task, end, pid, name, attempt, entry)])


def dispatched(h: History, *tasks: str, t: float = 0.0) -> None:
    h.invoke(tasks, t)
    h.ok(tasks, t + 0.001)


def test_a_clean_history_is_valid() -> None:
    h = History()
    dispatched(h, "a", "b")
    run(h, "a", 1, 1.0, 1.1)
    run(h, "b", 2, 1.0, 1.2)
    report = h.check()
    assert report.valid
    assert (report.acknowledged, report.executions, report.completed) == (2, 2, 2)
    assert report.lost == report.unexpected == report.unexplained == []
    assert report.duplicates == report.latencies == {}
    assert report.latency_median is None
    assert "lost 0" in report.summary()


def test_an_acknowledged_dispatch_that_never_finished_is_lost() -> None:
    h = History()
    dispatched(h, "never-started", "killed", "ok")
    run(h, "killed", 1, 1.0)  # started, its process died, nobody ran it again
    run(h, "ok", 2, 1.0, 1.1)
    h.crashed(1, 1.05)
    report = h.check()
    assert report.lost == ["killed", "never-started"]
    assert not report.valid


def test_a_task_that_finished_without_being_dispatched_is_unexpected() -> None:
    h = History()
    dispatched(h, "a")
    run(h, "a", 1, 1.0, 1.1)
    run(h, "ghost", 1, 1.0, 1.1)
    report = h.check()
    assert report.unexpected == ["ghost"]
    assert not report.valid


def test_a_failed_dispatch_may_or_may_not_run() -> None:
    h = History()
    h.invoke(["ran", "did-not-run"], 0.0)
    h.fail(["ran", "did-not-run"], 0.1)
    run(h, "ran", 1, 1.0, 1.1)
    report = h.check()
    assert report.valid, "an indeterminate dispatch is neither lost nor unexpected"
    assert report.indeterminate == 2
    assert report.recovered == ["ran"]


def test_a_task_rerun_after_a_crash_is_an_explained_duplicate() -> None:
    h = History()
    dispatched(h, "a")
    run(h, "a", 1, 1.0)  # killed mid-run
    h.crashed(1, 1.5)
    run(h, "a", 2, 3.25, 3.5, attempt=2)
    report = h.check()
    assert report.valid
    assert report.duplicates == {"a": 2}
    assert report.finished_twice == {}
    assert report.unexplained == []
    assert report.latencies == {"a": pytest.approx(1.75)}, "measured from the crash"


def test_without_a_known_crash_latency_runs_from_the_first_start() -> None:
    h = History()
    dispatched(h, "a")
    run(h, "a", 1, 1.0)
    run(h, "a", 2, 2.5, 2.6)
    report = h.check()
    assert report.latencies == {"a": pytest.approx(1.5)}
    assert report.unexplained == ["a"], "no crash, no interruption: a live run was taken over"


def test_latency_runs_to_the_start_of_the_run_that_finished() -> None:
    h = History()
    dispatched(h, "a")
    run(h, "a", 1, 1.0)
    h.crashed(1, 1.2)
    run(h, "a", 2, 3.0)  # the redelivery is killed too
    h.crashed(2, 3.1)
    run(h, "a", 3, 5.0, 5.1, attempt=3)
    report = h.check()
    assert report.duplicates == {"a": 3}
    assert report.unexplained == []
    assert report.latencies == {"a": pytest.approx(3.8)}


def test_a_task_finished_twice_without_a_crash_is_unexplained() -> None:
    h = History()
    dispatched(h, "a", "b")
    run(h, "a", 1, 1.0, 1.1)
    run(h, "a", 2, 2.0, 2.1)
    run(h, "b", 1, 1.0, 1.1)
    report = h.check()
    assert report.valid, "duplicates do not make a history invalid"
    assert report.finished_twice == {"a": 2}
    assert report.unexplained == ["a"]
    assert report.latencies == {"a": pytest.approx(1.0)}, "to the start of the second run"


def test_a_finished_task_whose_ack_died_with_its_process_is_explained() -> None:
    h = History()
    dispatched(h, "recent", "old")
    run(h, "old", 1, 1.0, 1.1)
    run(h, "recent", 1, 4.5, 4.9)
    h.crashed(1, 5.0)  # 0.1 s after "recent" finished: its ack may not have been written
    run(h, "recent", 2, 6.0, 6.1, attempt=2)
    run(h, "old", 2, 6.0, 6.1, attempt=2)
    report = h.check(ack_window=1.0)
    assert report.finished_twice == {"old": 2, "recent": 2}
    assert report.unexplained == ["old"], "finished 3.9 s before the crash: acked long ago"
    assert report.latencies["recent"] == pytest.approx(1.0)


def test_a_run_interrupted_by_shutdown_explains_its_rerun() -> None:
    h = History()
    dispatched(h, "a")
    run(h, "a", 1, 1.0, 2.0, kind="interrupted")
    run(h, "a", 2, 2.4, 2.5)
    report = h.check()
    assert report.unexplained == []
    assert report.finished_twice == {}
    assert report.latencies == {"a": pytest.approx(0.4)}, "from the interruption"


def test_a_run_that_raised_ends_neither_finished_nor_interrupted() -> None:
    h = History()
    dispatched(h, "a")
    run(h, "a", 1, 1.0, 2.0, kind="failed")
    ((failed,),) = h.runs().values()
    assert (failed.end, failed.finished, failed.interrupted) == (2.0, False, False)
    assert h.check().lost == ["a"], "it never finished"


def test_a_task_run_from_two_stream_entries_is_reported() -> None:
    h = History()
    dispatched(h, "a")
    run(h, "a", 1, 1.0, 1.1, entry="1-0")
    run(h, "a", 2, 1.0, 1.1, entry="2-0")
    assert h.check().multi_entry == {"a": 2}


def test_a_finished_task_still_pending_is_unacked() -> None:
    h = History()
    dispatched(h, "a", "b")
    run(h, "a", 1, 1.0, 1.1, entry="1-0")
    run(h, "b", 1, 1.0, 1.1, entry="2-0")
    assert h.check(leftover={"2-0", "9-0"}).unacked == ["b"]


def test_events_merge_from_several_process_logs(tmp_path: Path) -> None:
    def line(event: str, task: str, pid: int, t: float) -> str:
        data = {"event": event, "id": task, "pid": pid, "t": t, "attempt": 1}
        return json.dumps({**data, "message_id": "1-0", "run": "1"}) + "\n"

    (tmp_path / "events-1.jsonl").write_text(line("started", "a", 1, 1.0))
    (tmp_path / "events-2.jsonl").write_text(line("started", "a", 2, 3.0) + '{"event": "fin')
    reader = LogReader(tmp_path)
    assert [(e.kind, e.pid) for e in reader.poll()] == [("started", 1), ("started", 2)]
    with (tmp_path / "events-2.jsonl").open("a") as f:
        f.write('ished", "id": "a", "pid": 2, "t": 3.5, "run": "1", "message_id": "1-0"}\n')
    assert [(e.kind, e.pid) for e in reader.poll()] == [("finished", 2)]
    assert reader.poll() == []
    h = History()
    dispatched(h, "a")
    h.extend(reader.events)
    h.crashed(1, 2.0)
    report = h.check()
    assert report.valid
    assert report.duplicates == {"a": 2}
    assert report.latencies == {"a": pytest.approx(1.0)}
