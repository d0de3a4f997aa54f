"""The group's statistics are values: what the leader computes from the execution times
every instance reports, and what is known of each live instance.

:func:`compute_stats` turns the group's metrics hash (its fields are described by
:class:`~trunner._engine.reporter.MetricsBuffer`) into :class:`GroupStats`. Nothing here does I/O or
imports the rest of trunner, so the configuration (``long_queue_hook``), the duties and
the inspection can all name these values.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

__all__ = [
    "BUCKETS",
    "GroupStats",
    "InstanceInfo",
    "TaskTiming",
    "compute_stats",
    "stats_or_none",
]

#: Upper bounds (seconds) of the histogram buckets (about x1.5 apart, so a percentile is
#: within about a third of its value); one more bucket holds longer times.
BUCKETS = (
    0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075,
    0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0,
    30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 450.0, 600.0, 900.0, 1200.0, 1800.0,
    2700.0, 3600.0,
)  # fmt: skip


@attrs.frozen
class TaskTiming:
    """Execution times of one task over a window, in seconds (see
    [``GroupStats.tasks``][trunner.admin.GroupStats.tasks]).

    Percentiles are estimated from a histogram; see
    [Metrics and capacity](metrics-and-capacity.md#groupstats) for their precision.
    """

    count: int
    """Attempts that finished in the window."""
    average: float
    """Their average execution time."""
    p50: float
    """The median execution time (estimated)."""
    p95: float
    """The 95th percentile (estimated)."""
    p99: float
    """The 99th percentile (estimated)."""


@attrs.frozen
class InstanceInfo:
    """One live instance of the group, as [``instances``][trunner.admin.Admin.instances] lists
    it."""

    id: str
    """The instance's id: its consumer name."""
    host: str
    """The host it runs on."""
    pid: int
    """Its process id."""
    capacity: int
    """The tasks it may run at once, as it last reported."""
    started_at: float
    """When it started, in seconds since the epoch."""
    last_seen: float
    """When it last reported, in seconds since the epoch."""
    leader: bool
    """Whether it holds the group's leadership lease."""
    lanes: tuple[str, ...] = ("default",)
    """The [priority lanes](lanes.md) it reads, highest priority first."""


@attrs.frozen(kw_only=True)
class GroupStats:
    """The group's statistics over a window (since the leader last reset the metrics).

    Group-wide, computed from what every instance reports (see
    [Metrics and capacity](metrics-and-capacity.md));
    [``RunnerStatistics``][trunner.RunnerStatistics] is one runner's own counters.
    Returned by [``Admin.group_stats``][trunner.admin.Admin.group_stats]
    (``await runner.admin.group_stats()``), and given to the ``long_queue_hook``. Formerly
    ``Stats``, a deprecated alias until the next release.
    """

    at: float
    """When they were computed (seconds since the epoch)."""
    window: float
    """The window's length in seconds."""
    tasks: Mapping[str, TaskTiming]
    """Execution times per task."""
    average: float
    """Average execution time over every task (seconds; 0 without samples)."""
    schedule_average: float
    """Average time of one pass of the leader's delayed-task mover (seconds)."""
    queue_length: int
    """Entries in the group's stream: waiting or running."""
    instances: int
    """Live instances."""
    total_capacity: int
    """Workers across the live instances."""
    predicted_wait: float
    """``average * queue_length / total_capacity``: how long a task dispatched now may
    wait. When no task finished in the window, the last window's average is used, so that
    a stuck queue does not look like an empty one."""
    throughput: float
    """Tasks finished per second over the window."""
    paused: bool = False
    """Whether the group was paused when they were computed: its runners fetch nothing,
    so its queue may grow (see [Pausing a group](pause.md))."""

    def to_json(self) -> str:
        """The statistics as compact JSON (what the leader publishes)."""
        return json.dumps(attrs.asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> GroupStats:
        """The statistics ``to_json`` wrote."""
        data = json.loads(text)
        data["tasks"] = {k: TaskTiming(**v) for k, v in data["tasks"].items()}
        return cls(**data)


def _percentile(
    buckets: Sequence[float], count: float, p: float, longest: float | None = None
) -> float:
    """Estimate from histogram counts: linear within the bucket holding the p-th sample,
    and never above the longest sample when it is known."""
    estimate = _interpolated(buckets, count, p)
    return min(estimate, longest) if longest else estimate


def _interpolated(buckets: Sequence[float], count: float, p: float) -> float:
    target = p * count
    seen = 0.0
    for i, n in enumerate(buckets):
        if n and seen + n >= target:
            lower = BUCKETS[i - 1] if i > 0 else 0.0
            upper = BUCKETS[i] if i < len(BUCKETS) else lower * 2
            return lower + (upper - lower) * (target - seen) / n
        seen += n
    return BUCKETS[-1]


def compute_stats(
    fields: Mapping[str, float],
    queue_length: int,
    instances: Sequence[InstanceInfo],
    now: float,
    previous_average: float = 0.0,
    *,
    paused: bool = False,
) -> GroupStats:
    """The group's statistics from a metrics hash (its fields: see
    :class:`~trunner._engine.reporter.MetricsBuffer`).

    A window in which no task finished predicts the wait with ``previous_average`` (the
    last window's): a stuck queue must not look like an empty one.
    """
    tasks: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"n": 0.0, "s": 0.0, "max": 0.0, "b": [0.0] * (len(BUCKETS) + 1)}
    )
    for field, value in fields.items():
        # t:<task>:n, t:<task>:s, t:<task>:max, t:<task>:b:<index>; a task's name may hold
        # ':' (and end in ':b'), so the last part decides; fields of another shape (a later
        # version's, or written by something else) are left out.
        parts = field.split(":")
        if parts[0] != "t" or len(parts) < 3:
            continue
        last = parts[-1]
        if last in ("n", "s"):
            tasks[":".join(parts[1:-1])][last] += value
        elif last == "max":
            entry = tasks[":".join(parts[1:-1])]
            entry["max"] = max(entry["max"], value)
        elif parts[-2] == "b" and len(parts) >= 4 and last.isascii() and last.isdigit():
            index = int(last)
            if index <= len(BUCKETS):
                tasks[":".join(parts[1:-2])]["b"][index] += value
    timings = {
        name: TaskTiming(
            count=int(t["n"]),
            average=t["s"] / t["n"],
            p50=_percentile(t["b"], t["n"], 0.50, t["max"]),
            p95=_percentile(t["b"], t["n"], 0.95, t["max"]),
            p99=_percentile(t["b"], t["n"], 0.99, t["max"]),
        )
        for name, t in sorted(tasks.items())
        if t["n"] > 0
    }
    count = sum(t["n"] for t in tasks.values())
    total = sum(t["s"] for t in tasks.values())
    average = total / count if count else 0.0
    passes = fields.get("sched:n", 0.0)
    capacity = sum(i.capacity for i in instances)
    since = fields.get("since")
    window = max(now - since / 1000, 0.001) if since else 0.0
    return GroupStats(
        at=now,
        window=window,
        tasks=timings,
        average=average,
        schedule_average=fields.get("sched:s", 0.0) / passes if passes else 0.0,
        queue_length=queue_length,
        instances=len(instances),
        total_capacity=capacity,
        predicted_wait=(average or previous_average) * queue_length / capacity if capacity else 0.0,
        throughput=count / window if window else 0.0,
        paused=paused,
    )


def stats_or_none(text: str | None) -> GroupStats | None:
    """The statistics a leader published, or None when there are none (or when what is
    stored is not what a leader writes: the next round replaces it)."""
    if not text:
        return None
    try:
        return GroupStats.from_json(text)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None
