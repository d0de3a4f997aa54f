"""A history checker for at-least-once delivery, in the style of Jepsen's total-queue check.

A run of a reliability scenario records, per task id (the ``id`` in the task's payload):

- on the producer side (the test process): ``invoke`` before a dispatch call, then ``ok``
  when the call returned ("dispatch acknowledged") or ``fail`` when it raised (the outcome is
  then unknown: Redis may have run the command before the reply was lost);
- on the worker side (one JSON-lines file per worker process, see
  :mod:`tests.processes.reliability_worker`): ``started``, then ``finished``,
  ``interrupted`` (the run was cancelled: by a shutdown, or by its workflow) or ``failed``
  (it raised), each with the process id, the wall-clock time, the attempt, the stream
  entry id and a run id unique within the process;
- process crashes (``crashed(pid, t)``: the test SIGKILLed that worker at ``t``);
- at the end, the acknowledgement state inferred from Redis: which entries are still in the
  stream or pending (``leftover`` entry ids).

:meth:`History.check` reports:

- **lost**: acknowledged dispatches that never finished;
- **unexpected**: tasks that finished but whose dispatch was never even invoked;
- **recovered**: dispatches whose call failed (outcome unknown) that ran anyway (fine);
- **duplicates**: tasks started more than once, with their number of executions;
- **finished_twice**: tasks that ran to the end more than once;
- **unexplained**: duplicated tasks with an earlier run that neither was on a process killed
  while (or just after) running it, nor was interrupted by a shutdown: a live, healthy
  execution was run again;
- **multi_entry**: tasks that ran from more than one stream entry (a double enqueue; with
  no failing tasks there are no retries, so one task is one entry);
- **unacked**: finished tasks whose stream entry was left pending or in the stream;
- **latencies**: the redelivery latency of every redelivered task: from the end of its first
  run (the crash of its process, or its interruption; its start when neither is known) to
  the start of the first later run that finished, or, when the first run itself finished
  and the task still ran again, to the start of that second run.

``valid`` means nothing lost and nothing unexpected; duplicates are counted, and bounded by
each scenario.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

__all__ = ["Event", "History", "LogReader", "Report", "Run"]

#: Kinds of worker-side events.
STARTED, FINISHED, INTERRUPTED, FAILED = "started", "finished", "interrupted", "failed"
#: Kinds of producer-side events.
INVOKE, OK, FAIL = "invoke", "ok", "fail"


@attrs.frozen
class Event:
    """One entry of the history."""

    kind: str
    id: str
    t: float
    pid: int = 0
    run: str = ""
    attempt: int = 0
    message_id: str = ""
    value: str = ""
    """JSON text: a workflow step's input (``started``) or result (``finished``)."""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Event:
        return cls(
            kind=str(data["event"]),
            id=str(data["id"]),
            t=float(data["t"]),
            pid=int(data.get("pid", 0)),
            run=str(data.get("run", "")),
            attempt=int(data.get("attempt", 0)),
            message_id=str(data.get("message_id", "")),
            value=str(data.get("value", "")),
        )


@attrs.define
class Run:
    """One execution of a task, from its worker-side events."""

    id: str
    pid: int
    run: str
    start: float
    attempt: int
    message_id: str
    end: float | None = None
    finished: bool = False
    interrupted: bool = False
    input: str = ""
    """JSON text of a workflow step's input, and of its result when it finished."""
    result: str = ""


@attrs.frozen
class Report:
    acknowledged: int
    """Dispatches acknowledged (the call returned)."""
    indeterminate: int
    """Dispatches whose call raised: they may or may not have been enqueued."""
    executions: int
    """Runs started, over all tasks."""
    completed: int
    """Distinct tasks that finished."""
    lost: list[str]
    unexpected: list[str]
    recovered: list[str]
    duplicates: dict[str, int]
    finished_twice: dict[str, int]
    unexplained: list[str]
    multi_entry: dict[str, int]
    unacked: list[str]
    latencies: dict[str, float]
    crashes: int

    @property
    def valid(self) -> bool:
        return not self.lost and not self.unexpected

    @property
    def latency_median(self) -> float | None:
        return statistics.median(self.latencies.values()) if self.latencies else None

    @property
    def latency_max(self) -> float | None:
        return max(self.latencies.values()) if self.latencies else None

    def summary(self) -> str:
        """One paragraph with the figures every scenario prints."""

        def seconds(value: float | None) -> str:
            return "-" if value is None else f"{value:.3f} s"

        most = max(self.duplicates.values(), default=1)
        return (
            f"dispatched {self.acknowledged} (+{self.indeterminate} indeterminate, "
            f"{len(self.recovered)} of them ran); executions {self.executions}; "
            f"completed {self.completed}; lost {len(self.lost)}; "
            f"unexpected {len(self.unexpected)}; duplicated {len(self.duplicates)} "
            f"(at most {most} runs of one task; {len(self.finished_twice)} finished twice, "
            f"{len(self.unexplained)} unexplained); multi-entry {len(self.multi_entry)}; "
            f"unacked {len(self.unacked)}; crashes {self.crashes}; redelivered "
            f"{len(self.latencies)}: latency median {seconds(self.latency_median)}, "
            f"max {seconds(self.latency_max)}; valid {self.valid}"
        )


class History:
    """Events of one run, from the producer (recorded here) and the workers (added)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.crashes: dict[int, float] = {}

    # -- recording --------------------------------------------------------------------------

    def invoke(self, ids: Iterable[str], t: float | None = None) -> None:
        self._add(INVOKE, ids, t)

    def ok(self, ids: Iterable[str], t: float | None = None) -> None:
        self._add(OK, ids, t)

    def fail(self, ids: Iterable[str], t: float | None = None) -> None:
        self._add(FAIL, ids, t)

    def _add(self, kind: str, ids: Iterable[str], t: float | None) -> None:
        at = time.time() if t is None else t
        self.events.extend(Event(kind, i, at) for i in ids)

    def crashed(self, pid: int, t: float | None = None) -> None:
        """The worker process ``pid`` was killed at ``t``."""
        self.crashes[pid] = time.time() if t is None else t

    def extend(self, events: Iterable[Event]) -> None:
        self.events.extend(events)

    # -- reading ----------------------------------------------------------------------------

    def acknowledged(self) -> set[str]:
        return {e.id for e in self.events if e.kind == OK}

    def runs(self) -> dict[str, list[Run]]:
        """Every task's runs, in start order."""
        by_key: dict[tuple[int, str], Run] = {}
        for event in sorted(self.events, key=lambda e: e.t):
            key = (event.pid, event.run)
            if event.kind == STARTED:
                by_key[key] = Run(
                    event.id,
                    event.pid,
                    event.run,
                    event.t,
                    event.attempt,
                    event.message_id,
                    input=event.value,
                )
            elif event.kind in (FINISHED, INTERRUPTED, FAILED):
                run = by_key.get(key)
                if run is None:  # an end without its start: keep it as a zero-length run
                    run = by_key[key] = Run(
                        event.id, event.pid, event.run, event.t, event.attempt, event.message_id
                    )
                run.end = event.t
                run.finished = event.kind == FINISHED
                run.interrupted = event.kind == INTERRUPTED
                run.result = event.value
        runs: dict[str, list[Run]] = {}
        for run in sorted(by_key.values(), key=lambda r: r.start):
            runs.setdefault(run.id, []).append(run)
        return runs

    def finished_ids(self) -> set[str]:
        return {e.id for e in self.events if e.kind == FINISHED}

    def abandoned(self, run: Run, ack_window: float) -> bool:
        """Whether running ``run`` again is explained: its process was killed while it ran,
        or soon after it finished (before its acknowledgement could be written), or a
        shutdown interrupted it."""
        if run.interrupted:
            return True
        crash = self.crashes.get(run.pid)
        if crash is None or crash < run.start:
            return False
        return not run.finished or (run.end is not None and crash - run.end <= ack_window)

    def _origin(self, run: Run) -> float:
        """When the first run of a redelivered task ended: crash, interruption, or start."""
        crash = self.crashes.get(run.pid)
        if crash is not None and crash >= run.start:
            return crash
        if run.interrupted and run.end is not None:
            return run.end
        return run.start

    def check(self, *, leftover: Iterable[str] = (), ack_window: float = 1.0) -> Report:
        """Check the history; ``leftover``: entry ids still in the stream or pending at the
        end; ``ack_window``: how long after finishing a task its acknowledgement may still
        be unwritten when its process is killed."""
        invoked = {e.id for e in self.events if e.kind == INVOKE}
        acknowledged = self.acknowledged()
        failed = {e.id for e in self.events if e.kind == FAIL} - acknowledged
        runs = self.runs()
        finished = self.finished_ids()
        leftover_ids = set(leftover)
        duplicates: dict[str, int] = {}
        finished_twice: dict[str, int] = {}
        unexplained: list[str] = []
        multi_entry: dict[str, int] = {}
        latencies: dict[str, float] = {}
        unacked: list[str] = []
        for task_id, task_runs in runs.items():
            entries = {r.message_id for r in task_runs}
            if len(entries) > 1:
                multi_entry[task_id] = len(entries)
            done = [r for r in task_runs if r.finished]
            if len(done) > 1:
                finished_twice[task_id] = len(done)
            if any(r.message_id in leftover_ids for r in done):
                unacked.append(task_id)
            if len(task_runs) < 2:
                continue
            duplicates[task_id] = len(task_runs)
            if not all(self.abandoned(r, ack_window) for r in task_runs[:-1]):
                unexplained.append(task_id)
            first = task_runs[0]
            later = task_runs[1] if first.finished else next(iter(done), None)
            if later is not None:
                latencies[task_id] = later.start - self._origin(first)
        return Report(
            acknowledged=len(acknowledged),
            indeterminate=len(failed),
            executions=sum(len(r) for r in runs.values()),
            completed=len(finished),
            lost=sorted(acknowledged - finished),
            unexpected=sorted(finished - invoked),
            recovered=sorted(failed & finished),
            duplicates=duplicates,
            finished_twice=finished_twice,
            unexplained=sorted(unexplained),
            multi_entry=multi_entry,
            unacked=sorted(unacked),
            latencies=latencies,
            crashes=len(self.crashes),
        )


class LogReader:
    """Reads the workers' JSON-lines event files incrementally (complete lines only)."""

    def __init__(self, directory: Path, pattern: str = "events-*.jsonl") -> None:
        self.directory = directory
        self.pattern = pattern
        self._offsets: dict[Path, int] = {}
        self.events: list[Event] = []

    def poll(self) -> list[Event]:
        """Read what was appended since the last call; return the new events."""
        new: list[Event] = []
        for path in sorted(self.directory.glob(self.pattern)):
            offset = self._offsets.get(path, 0)
            with path.open("rb") as f:
                f.seek(offset)
                data = f.read()
            end = data.rfind(b"\n") + 1
            for line in data[:end].splitlines():
                new.append(Event.from_json(json.loads(line)))
            self._offsets[path] = offset + end
        self.events.extend(new)
        return new
