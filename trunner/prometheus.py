"""Prometheus metrics of a runner (optional: ``pip install 'trunner[prometheus]'``).

The ``trunner worker`` command serves them with ``--metrics-port`` (see
:mod:`trunner.serve`); in your own process, :func:`collect` gives the text to serve from
any HTTP handler, or register a :class:`RunnerCollector` with your own registry. The
counters and gauges are the table of ``_instruments.py``, which the OpenTelemetry
instruments (:mod:`trunner.otel`) read too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

try:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError(
        "Prometheus metrics need the prometheus extra: pip install 'trunner[prometheus]'"
    ) from exc

from ._engine.instruments import GAUGES, LANE_COUNTERS, TASK_COUNTERS
from ._wire.stats import BUCKETS

if TYPE_CHECKING:
    from .runner import Runner

__all__ = ["RunnerCollector", "collect"]


class RunnerCollector:
    """Reads a runner's figures at scrape time (queue length and live workflows: the last
    values refreshed)."""

    def __init__(self, runner: Runner) -> None:
        self._runner = runner
        self.queue_length = 0
        self.lane_lengths: dict[str, int] = {}
        self.workflows_live = 0

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        runner = self._runner
        stats = runner.statistics()
        group = runner.config.consumer_group
        labels = ["group", "task"]
        totals = runner.task_totals()
        for counter in TASK_COUNTERS:
            family = CounterMetricFamily(
                f"trunner_tasks_{counter.key}", counter.description, labels=labels
            )
            for task, counts in sorted(totals.items()):
                family.add_metric([group, task], counter.read(counts))
            yield family
        histogram = HistogramMetricFamily(
            "trunner_task_duration_seconds", "Execution time of task attempts", labels=labels
        )
        bounds = [*(str(b) for b in BUCKETS), "+Inf"]
        for task, (buckets, total) in sorted(runner.timings.tasks.items()):
            cumulative: list[tuple[str, float]] = []
            running = 0
            for bound, samples in zip(bounds, buckets, strict=True):
                running += samples
                cumulative.append((bound, running))
            histogram.add_metric([group, task], cumulative, total[0])
        yield histogram
        for lane_counter in LANE_COUNTERS:
            lanes = CounterMetricFamily(
                f"trunner_lane_{lane_counter.key}",
                lane_counter.description,
                labels=["group", "lane"],
            )
            for lane, count in lane_counter.read(stats).items():
                lanes.add_metric([group, lane], count)
            yield lanes
        if self.lane_lengths:
            lengths = GaugeMetricFamily(
                "trunner_lane_length",
                "Entries in the stream of each lane",
                labels=["group", "lane"],
            )
            for lane, length in self.lane_lengths.items():
                lengths.add_metric([group, lane], length)
            yield lengths
        levels = [(gauge.key, gauge.description, gauge.read(runner, stats)) for gauge in GAUGES]
        # The last length serve.py refreshed: a group-wide figure read from Redis.
        levels.insert(2, ("queue_length", "Entries in the group's stream", self.queue_length))
        levels.insert(
            3, ("workflows_live", "Workflows dispatched, not settled", self.workflows_live)
        )
        for key, text, level in levels:
            gauge = GaugeMetricFamily(f"trunner_{key}", text, labels=["group"])
            gauge.add_metric([group], level)
            yield gauge


def collect(runner: Runner, collector: RunnerCollector | None = None) -> bytes:
    """The runner's metrics in the Prometheus text format."""
    registry = CollectorRegistry()
    registry.register(collector or RunnerCollector(runner))
    data: bytes = generate_latest(registry)
    return data
