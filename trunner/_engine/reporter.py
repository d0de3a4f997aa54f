"""A reporter is responsible for reporting this instance to the group once per
``report_interval``, in one round trip: the execution times it buffered, its membership,
and reading back the capacity the leader decided.

Every instance buffers the execution time of each task (and, as leader, of each scheduler
pass) in a :class:`MetricsBuffer`; a report adds the samples to the group's metrics hash
(per task a count, a sum and fixed histogram buckets) and refreshes the instance's entry
among the live ones. A report Redis did not take keeps its samples for the next one.
:class:`LocalTimings` keeps this instance's own histograms since its start, for exporters.
"""

from __future__ import annotations

import bisect
import json
import os
import time
from collections import defaultdict
from collections.abc import Callable, Sequence

import trio

from .._redis import Broker
from .._util import ErrorLog, LoopBackoff, logger, wall_ms
from .._wire.stats import BUCKETS
from ..config import RunnerConfig
from ..errors import BackendError
from .quarantine import Quarantine

__all__ = ["LocalTimings", "MetricsBuffer", "Reporter"]

#: Metrics-hash fields that hold a maximum (report.lua keeps the larger value).
MAX_SUFFIX = ":max"


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


class Reporter:
    """Reports this instance once per ``report_interval`` (metrics, membership, capacity),
    from before the runner is started until :meth:`stop`."""

    def __init__(
        self,
        broker: Broker,
        config: RunnerConfig,
        instance: str,
        host: str,
        buffer: MetricsBuffer,
        capacity: Callable[[], int],
        apply_capacity: Callable[[int], None],
        errors: ErrorLog,
        quarantine: Quarantine,
    ) -> None:
        self._broker = broker
        self._interval = config.report_interval
        self._instance = instance
        self._host = host
        self._buffer = buffer
        self._capacity = capacity
        self._apply = apply_capacity
        self._errors = errors
        self._quarantine = quarantine
        self._started_at = time.time()
        #: The lanes it reads, when they are more than the default one (the leader warns
        #: of a lane that holds messages no live instance reads).
        self._lanes = config.lane_names if len(config.lanes) > 1 else None
        self._version: int | None = None
        self._scope = trio.CancelScope()
        self.stopped = trio.Event()

    def _info(self) -> str:
        info: dict[str, object] = {
            "host": self._host,
            "pid": os.getpid(),
            "capacity": self._capacity(),
            "started_at": round(self._started_at, 3),
        }
        if self._lanes is not None:
            info["lanes"] = self._lanes
        return json.dumps(info)

    async def report(self) -> bool:
        """One report; False (samples kept for the next) when Redis did not take it."""
        items = self._buffer.take()
        try:
            value, version, bad = await self._broker.report(
                self._instance, wall_ms(), self._info(), items
            )
        except BackendError as exc:
            self._buffer.put_back(items)
            self._errors.capture(exc)
            logger.warning("reporting metrics and membership failed: %s", exc)
            await self._quarantine.after_error(exc)
            return False
        except BaseException:
            self._buffer.put_back(items)
            raise
        for item, stored, reason in bad:
            source = "capacity" if item == "capacity" else "metrics"
            action = "read as no decision" if source == "capacity" else "replaced"
            await self._quarantine.set_aside(source, item, reason, stored, action)
        if value is not None and version != self._version:
            self._version = version
            self._apply(value)
        return True

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Report now (so the instance is registered once started), then once per
        ``report_interval`` until :meth:`stop`."""
        try:
            with self._scope:
                await self.report()
                task_status.started()
                backoff = LoopBackoff()
                while True:
                    await trio.sleep(self._interval)
                    if not await self.report():
                        await trio.sleep(backoff.next_delay())
                    else:
                        backoff.reset()
        finally:
            self.stopped.set()

    def stop(self) -> None:
        """Stop reporting (a report in progress is cancelled: its samples are kept)."""
        self._scope.cancel()

    async def deregister(self) -> None:
        """Leave the group's live instances at once (graceful shutdown)."""
        await self._broker.deregister(self._instance)
