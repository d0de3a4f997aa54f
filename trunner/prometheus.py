"""Prometheus metrics of a runner (optional: ``pip install 'trunner[prometheus]'``).

The ``trunner worker`` command serves them with ``--metrics-port`` (see
:mod:`trunner.serve`); in your own process, :func:`collect` gives the text to serve from
any HTTP handler, or register a :class:`RunnerCollector` with your own registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
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

from .group_stats import BUCKETS
from .statistics import TaskTotals

if TYPE_CHECKING:
    from .runner import Runner

__all__ = ["RunnerCollector", "collect"]


class RunnerCollector:
    """Reads a runner's figures at scrape time (queue length: the last value refreshed)."""

    def __init__(self, runner: Runner) -> None:
        self._runner = runner
        self.queue_length = 0

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        runner = self._runner
        stats = runner.statistics()
        group = runner.config.consumer_group
        labels = ["group", "task"]
        outcomes: dict[str, tuple[str, Callable[[TaskTotals], int]]] = {
            "processed": ("Task attempts finished", lambda t: t.succeeded + t.failed),
            "failed": ("Task attempts that raised", lambda t: t.failed),
            "retried": ("Failed attempts scheduled again", lambda t: t.retried),
            "dead_lettered": ("Messages given up on", lambda t: t.dead_lettered),
        }
        totals = runner.task_totals()
        for name, (text, count) in outcomes.items():
            family = CounterMetricFamily(f"trunner_tasks_{name}", text, labels=labels)
            for task, counts in sorted(totals.items()):
                family.add_metric([group, task], count(counts))
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
        gauges = {
            "in_flight": ("Tasks running now", stats.in_flight),
            "capacity": ("Tasks this instance may run at once", stats.capacity),
            "queue_length": ("Entries in the group's stream", self.queue_length),
            "leader": ("1 if this instance leads the group", int(runner.is_leader)),
            "errors": ("Errors captured", stats.errors),
            "paused": (
                "1 while the group is paused, as this instance last heard",
                int(stats.paused),
            ),
        }
        for name, (text, level) in gauges.items():
            gauge = GaugeMetricFamily(f"trunner_{name}", text, labels=["group"])
            gauge.add_metric([group], level)
            yield gauge


def collect(runner: Runner, collector: RunnerCollector | None = None) -> bytes:
    """The runner's metrics in the Prometheus text format."""
    registry = CollectorRegistry()
    registry.register(collector or RunnerCollector(runner))
    data: bytes = generate_latest(registry)
    return data
