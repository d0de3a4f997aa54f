"""The metrics a runner publishes, once: what each one is called, says and reads.

Both exporters read this table: the Prometheus collector (:mod:`trunner.prometheus`) and
the OpenTelemetry instruments (:mod:`trunner.otel`). Each figure is read from the runner
when it is collected (``Runner.statistics()``, ``Runner.task_totals()``), so the two show
the same numbers from the same counters, and neither counts anything of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

import attrs

from ..statistics import RunnerStatistics, TaskTotals

__all__ = [
    "GAUGES",
    "LANE_COUNTERS",
    "TASK_COUNTERS",
    "Gauge",
    "LaneCounter",
    "Measured",
    "TaskCounter",
]


class Measured(Protocol):
    """What a gauge reads of the runner besides its statistics (a :class:`trunner.Runner`
    is one)."""

    @property
    def is_leader(self) -> bool: ...


@attrs.frozen
class TaskCounter:
    """A counter per task of the runner's group, cumulative since the runner started."""

    key: str
    """The Prometheus name is ``trunner_tasks_<key>``; the OpenTelemetry one
    ``trunner.tasks.<key>``."""
    description: str
    unit: str
    """The OpenTelemetry unit (UCUM, annotations in braces)."""
    read: Callable[[TaskTotals], int]


@attrs.frozen
class LaneCounter:
    """A counter per priority lane the runner reads, cumulative since it started."""

    key: str
    """The Prometheus name is ``trunner_lane_<key>``; the OpenTelemetry one
    ``trunner.lane.<key>``."""
    description: str
    unit: str
    read: Callable[[RunnerStatistics], Mapping[str, int]]


@attrs.frozen
class Gauge:
    """A level of the runner, one value per group."""

    key: str
    """The Prometheus name is ``trunner_<key>``; the OpenTelemetry one ``trunner.<key>``."""
    description: str
    unit: str
    read: Callable[[Measured, RunnerStatistics], int]


TASK_COUNTERS = (
    TaskCounter(
        "processed", "Task attempts finished", "{attempt}", lambda t: t.succeeded + t.failed
    ),
    TaskCounter("failed", "Task attempts that raised", "{attempt}", lambda t: t.failed),
    TaskCounter("retried", "Failed attempts scheduled again", "{attempt}", lambda t: t.retried),
    TaskCounter("dead_lettered", "Messages given up on", "{message}", lambda t: t.dead_lettered),
    TaskCounter(
        "deferred_rate",
        "Messages deferred by their task's rate limit (no attempt used)",
        "{message}",
        lambda t: t.deferred_rate,
    ),
    TaskCounter(
        "deferred_concurrency",
        "Messages deferred by their task's concurrency limit (no attempt used)",
        "{message}",
        lambda t: t.deferred_concurrency,
    ),
)

LANE_COUNTERS = (
    LaneCounter(
        "fetched",
        "Messages fetched (read or reclaimed) from the lane",
        "{message}",
        lambda s: s.lanes,
    ),
)

GAUGES = (
    Gauge("in_flight", "Tasks running now", "{task}", lambda r, s: s.in_flight),
    Gauge("capacity", "Tasks this instance may run at once", "{task}", lambda r, s: s.capacity),
    Gauge("leader", "1 if this instance leads the group", "1", lambda r, s: int(r.is_leader)),
    Gauge("errors", "Errors captured", "{error}", lambda r, s: s.errors),
    Gauge(
        "concurrency_slots_held",
        "Concurrency slots the messages this instance runs hold",
        "{slot}",
        lambda r, s: s.slots_held,
    ),
    Gauge(
        "stalls",
        "Event-loop stalls the watchdog noticed since the runner started",
        "{stall}",
        lambda r, s: s.stalls,
    ),
    Gauge(
        "threads_abandoned",
        "Attempts that ended while their worker thread ran on (abandoned)",
        "{thread}",
        lambda r, s: s.threads_abandoned,
    ),
    Gauge(
        "processes_killed",
        "Attempts whose worker process was killed (their timeout passed, or a cancel)",
        "{process}",
        lambda r, s: s.processes_killed,
    ),
    Gauge(
        "processes_died",
        "Attempts whose worker process died under them",
        "{process}",
        lambda r, s: s.processes_died,
    ),
    Gauge(
        "paused",
        "1 while the group is paused, as this instance last heard",
        "1",
        lambda r, s: int(s.paused),
    ),
)
