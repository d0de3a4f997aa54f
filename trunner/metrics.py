"""Timing metrics, the group's statistics, membership reports and the long-queue hook.

Every instance buffers the execution time of each task (and, as leader, of each scheduler
pass) and reports once a second in one round trip (:class:`Reporter`): the samples are
added to the group's metrics hash — per task a count, a sum and fixed histogram buckets —
its membership is refreshed, and the capacity the leader decided is read back. The leader
(:class:`Aggregator`) takes and resets the metrics every ``stats_interval`` with a fenced
script, computes :class:`Stats`, calls ``long_queue_hook`` when the predicted wait exceeds
``long_queue_threshold``, and publishes the statistics and its capacity decision.
"""

from __future__ import annotations

import bisect
import json
import os
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs
import trio

from ._redis import Broker
from ._util import ErrorLog, LoopBackoff, logger, wall_ms
from .capacity import decide_capacity
from .config import RunnerConfig
from .election import Elector
from .errors import BackendError

__all__ = [
    "BUCKETS",
    "Aggregator",
    "InstanceInfo",
    "MetricsBuffer",
    "Reporter",
    "Stats",
    "TaskTiming",
    "compute_stats",
    "read_instances",
    "read_stats",
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
    """Execution times of one task over a window (seconds)."""

    count: int
    average: float
    p50: float
    p95: float
    p99: float


@attrs.frozen
class InstanceInfo:
    """One live instance of the group."""

    id: str
    host: str
    pid: int
    capacity: int
    started_at: float
    last_seen: float
    leader: bool


@attrs.frozen(kw_only=True)
class Stats:
    """The group's statistics over a window (since the leader last reset the metrics)."""

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
    """average x queue_length / total_capacity: how long a task dispatched now may wait."""
    throughput: float
    """Tasks finished per second over the window."""

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Stats:
        data = json.loads(text)
        data["tasks"] = {k: TaskTiming(**v) for k, v in data["tasks"].items()}
        return cls(**data)


#: Metrics-hash fields that hold a maximum (report.lua keeps the larger value).
MAX_SUFFIX = ":max"


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
) -> Stats:
    """Stats from a metrics hash (see :class:`MetricsBuffer` for its fields).

    A window in which no task finished predicts the wait with ``previous_average`` (the
    last window's): a stuck queue must not look like an empty one.
    """
    tasks: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"n": 0.0, "s": 0.0, "max": 0.0, "b": [0.0] * (len(BUCKETS) + 1)}
    )
    for field, value in fields.items():
        parts = field.split(":")
        if parts[0] != "t" or len(parts) < 3:
            continue
        if parts[-2] == "b" and len(parts) >= 4:
            name = ":".join(parts[1:-2])
            index = int(parts[-1])
            if 0 <= index <= len(BUCKETS):
                tasks[name]["b"][index] += value
        elif parts[-1] in ("n", "s"):
            tasks[":".join(parts[1:-1])][parts[-1]] += value
        elif parts[-1] == "max":
            entry = tasks[":".join(parts[1:-1])]
            entry["max"] = max(entry["max"], value)
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
    return Stats(
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
    )


class _Samples:
    """One task's samples since the last report, and (optionally) since the start."""

    __slots__ = ("buckets", "count", "longest", "since_start", "total")

    def __init__(self, since_start: tuple[list[int], list[float]] | None) -> None:
        self.count = 0
        self.total = 0.0
        self.longest = 0.0
        self.buckets = [0] * (len(BUCKETS) + 1)
        self.since_start = since_start


class MetricsBuffer:
    """Samples of this instance not yet reported, as increments of the metrics hash.

    Fields: ``t:<task>:n`` (count), ``t:<task>:s`` (sum of seconds), ``t:<task>:b:<i>``
    (samples in histogram bucket i, see :data:`BUCKETS`), ``t:<task>:max`` (the longest
    sample: kept as a maximum, not added up), ``sched:n`` / ``sched:s`` (the leader's
    scheduler passes), ``since`` (set by Redis: the window's start, ms).

    With ``cumulative``, every task sample also goes into its histograms since the start.
    """

    def __init__(self, cumulative: LocalTimings | None = None) -> None:
        self._fields: defaultdict[str, float] = defaultdict(float)  # passes, put back
        self._samples: dict[str, _Samples] = {}
        self._cumulative = cumulative

    def task_time(self, task: str, seconds: float) -> None:
        samples = self._samples.get(task)
        if samples is None:
            since_start = None if self._cumulative is None else self._cumulative.entry(task)
            samples = self._samples[task] = _Samples(since_start)
        bucket = bisect.bisect_left(BUCKETS, seconds)
        samples.count += 1
        samples.total += seconds
        samples.longest = max(samples.longest, seconds)
        samples.buckets[bucket] += 1
        if samples.since_start is not None:
            samples.since_start[0][bucket] += 1
            samples.since_start[1][0] += seconds

    def schedule_pass(self, seconds: float) -> None:
        self._fields["sched:n"] += 1
        self._fields["sched:s"] += seconds

    def take(self) -> list[tuple[str, float]]:
        fields, self._fields = self._fields, defaultdict(float)
        for task, samples in self._samples.items():
            if not samples.count:
                continue
            fields[f"t:{task}:n"] += samples.count
            fields[f"t:{task}:s"] += samples.total
            longest = f"t:{task}{MAX_SUFFIX}"
            fields[longest] = max(fields[longest], samples.longest)
            for i, n in enumerate(samples.buckets):
                if n:
                    fields[f"t:{task}:b:{i}"] += n
            samples.count, samples.total, samples.longest = 0, 0.0, 0.0
            samples.buckets = [0] * (len(BUCKETS) + 1)
        return list(fields.items())

    def put_back(self, items: Sequence[tuple[str, float]]) -> None:
        fields = self._fields
        for field, value in items:
            if field.endswith(MAX_SUFFIX):
                fields[field] = max(fields[field], value)
            else:
                fields[field] += value


class LocalTimings:
    """Cumulative execution-time histograms of this instance, per task (for Prometheus):
    per task, the count in each bucket of :data:`BUCKETS` and ``[sum of seconds]``."""

    def __init__(self) -> None:
        self.tasks: dict[str, tuple[list[int], list[float]]] = {}

    def entry(self, task: str) -> tuple[list[int], list[float]]:
        entry = self.tasks.get(task)
        if entry is None:
            entry = self.tasks[task] = ([0] * (len(BUCKETS) + 1), [0.0])
        return entry


def _instances(
    rows: Sequence[tuple[str, float, str | None]], leader: str | None
) -> list[InstanceInfo]:
    out = []
    for instance, seen, info in rows:
        details = json.loads(info) if info else {}
        out.append(
            InstanceInfo(
                id=instance,
                host=str(details.get("host", "")),
                pid=int(details.get("pid", 0)),
                capacity=int(details.get("capacity", 0)),
                started_at=float(details.get("started_at", 0.0)),
                last_seen=seen / 1000,
                leader=instance == leader,
            )
        )
    return out


async def read_instances(broker: Broker, ttl: float) -> list[InstanceInfo]:
    rows = await broker.live_instances(wall_ms() - int(ttl * 1000))
    return sorted(_instances(rows, await broker.leader_id()), key=lambda i: i.id)


async def read_stats(broker: Broker, ttl: float) -> Stats:
    """The group's statistics now, over the current window, from any instance."""
    fields = await broker.read_metrics()
    queue_length = await broker.queue_length()
    instances = await read_instances(broker, ttl)
    previous = stats_or_none(await broker.latest_stats())
    return compute_stats(
        fields, queue_length, instances, time.time(), previous.average if previous else 0.0
    )


class Reporter:
    """Reports this instance once per ``report_interval`` (metrics, membership, capacity)."""

    def __init__(
        self,
        broker: Broker,
        config: RunnerConfig,
        instance: str,
        host: str,
        buffer: MetricsBuffer,
        capacity: Callable[[], int],
        apply_capacity: Callable[[int], Awaitable[None]],
        errors: ErrorLog,
    ) -> None:
        self._broker = broker
        self._interval = config.report_interval
        self._instance = instance
        self._host = host
        self._buffer = buffer
        self._capacity = capacity
        self._apply = apply_capacity
        self._errors = errors
        self._started_at = time.time()
        self._version: int | None = None

    def _info(self) -> str:
        return json.dumps(
            {
                "host": self._host,
                "pid": os.getpid(),
                "capacity": self._capacity(),
                "started_at": round(self._started_at, 3),
            }
        )

    async def report(self) -> bool:
        """One report; False (samples kept for the next) when Redis did not take it."""
        items = self._buffer.take()
        try:
            value, version = await self._broker.report(
                self._instance, wall_ms(), self._info(), items
            )
        except BackendError as exc:
            self._buffer.put_back(items)
            self._errors.capture(exc)
            logger.warning("reporting metrics and membership failed: %s", exc)
            return False
        except BaseException:
            self._buffer.put_back(items)
            raise
        if value is not None and version != self._version:
            self._version = version
            await self._apply(value)
        return True

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.report()  # registered before the runner reports itself started
        task_status.started()
        backoff = LoopBackoff()
        while True:
            await trio.sleep(self._interval)
            if not await self.report():
                await trio.sleep(backoff.next_delay())
            else:
                backoff.reset()

    async def deregister(self) -> None:
        """Leave the group's live instances at once (graceful shutdown)."""
        await self._broker.deregister(self._instance)


class Aggregator:
    """The leader's periodic statistics, long-queue hook and capacity decision."""

    def __init__(
        self,
        broker: Broker,
        config: RunnerConfig,
        errors: ErrorLog,
        on_stats: Callable[[Stats], Awaitable[None]] | None = None,
    ) -> None:
        self._broker = broker
        self._config = config
        self._errors = errors
        self._on_stats = on_stats
        threshold = config.long_queue_threshold
        self.interval = config.stats_interval or (threshold / 2 if threshold else 60.0)
        self.rounds = 0
        self._last_average = 0.0

    async def run(self, elector: Elector) -> None:
        backoff = LoopBackoff()
        while True:
            await trio.sleep(self.interval)
            try:
                await self._round(elector)
            except BackendError as exc:
                self._errors.capture(exc)
                logger.warning("aggregating the group's metrics failed: %s", exc)
                await trio.sleep(backoff.next_delay())
            else:
                backoff.reset()

    async def _round(self, elector: Elector) -> None:
        config = self._config
        ttl_ms = int(config.instance_ttl * 1000)
        fields = await self._broker.take_metrics(elector, wall_ms() - ttl_ms)
        queue_length = await self._broker.queue_length()
        instances = await read_instances(self._broker, config.instance_ttl)
        stats = compute_stats(fields, queue_length, instances, time.time(), self._last_average)
        self._last_average = stats.average or self._last_average
        capacity = decide_capacity(stats, config)
        await self._broker.publish(elector, capacity, elector.fence or 0, stats.to_json())
        self.rounds += 1
        if capacity is not None:
            logger.debug("capacity decided: %d workers per instance", capacity)
        threshold = config.long_queue_threshold
        hook = config.long_queue_hook
        if threshold is not None and hook is not None and stats.predicted_wait > threshold:
            logger.warning(
                "long queue: predicted wait %.1f s > %.1f s (%d queued, %d workers)",
                stats.predicted_wait,
                threshold,
                stats.queue_length,
                stats.total_capacity,
            )
            try:
                await hook(stats)
            except Exception as exc:  # noqa: BLE001 - the user's hook must not stop the leader
                self._errors.capture(exc)
                logger.exception("long_queue_hook raised")
        if self._on_stats is not None:
            await self._on_stats(stats)


def stats_or_none(text: str | None) -> Stats | None:
    return Stats.from_json(text) if text else None
