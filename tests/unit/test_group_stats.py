"""The group's statistics as values (trunner/_wire/stats.py), computed from what the
reporter's MetricsBuffer (trunner/_engine/reporter.py) puts in the metrics hash."""

from __future__ import annotations

import itertools

import pytest

import trunner
from trunner._engine.reporter import MetricsBuffer
from trunner._wire.stats import BUCKETS, compute_stats


def fields_of(buffer: MetricsBuffer) -> dict[str, float]:
    return dict(buffer.take())


def test_stats_from_the_metrics_hash() -> None:
    buffer = MetricsBuffer()
    for _ in range(90):
        buffer.task_time("fast", 0.004)  # bucket (0.003, 0.005]
    for _ in range(10):
        buffer.task_time("fast", 1.2)  # bucket (1, 1.5]
    buffer.task_time("slow", 30.0)
    buffer.schedule_pass(0.002)
    buffer.schedule_pass(0.004)
    fields = fields_of(buffer)
    fields["since"] = 1_000_000.0  # ms: the window started 10 s before "now"
    instance = trunner.admin.InstanceInfo(
        id="a", host="h", pid=1, capacity=4, started_at=0.0, last_seen=0.0, leader=True
    )
    stats = compute_stats(fields, queue_length=20, instances=[instance], now=1010.0)
    fast = stats.tasks["fast"]
    assert fast.count == 100
    assert fast.average == pytest.approx((90 * 0.004 + 10 * 1.2) / 100)
    assert 0.003 <= fast.p50 <= 0.005
    assert 1.0 <= fast.p95 <= 1.5
    assert 1.0 <= fast.p99 <= 1.5
    assert 20.0 <= stats.tasks["slow"].p50 <= 30.0
    assert stats.average == pytest.approx((90 * 0.004 + 10 * 1.2 + 30) / 101)
    assert stats.schedule_average == pytest.approx(0.003)
    assert stats.window == pytest.approx(10.0)
    assert stats.throughput == pytest.approx(10.1)
    assert stats.predicted_wait == pytest.approx(stats.average * 20 / 4)
    assert trunner.admin.GroupStats.from_json(stats.to_json()) == stats
    assert all(b / a <= 2.0 for a, b in itertools.pairwise(BUCKETS))


def test_percentiles_never_exceed_the_longest_sample() -> None:
    """A 3.01 s run lands in the 3-5 s bucket; interpolation alone reads p99 as 4.98 s."""
    buffer = MetricsBuffer()
    buffer.task_time("once", 3.01)
    for seconds in (0.011, 0.012, 0.0125):
        buffer.task_time("few", seconds)  # bucket (0.01, 0.015]
    fields = fields_of(buffer)
    assert fields["t:once:max"] == 3.01
    stats = compute_stats(fields, queue_length=0, instances=[], now=0.0)
    once, few = stats.tasks["once"], stats.tasks["few"]
    assert (once.p50, once.p95, once.p99) == (3.01, 3.01, 3.01)
    assert 0.01 < few.p50 <= few.p95 <= few.p99 <= 0.0125
    # A report that failed is put back: the maximum stays a maximum, counts add up.
    again = MetricsBuffer()
    again.task_time("once", 1.0)
    again.put_back(list(fields.items()))
    merged = fields_of(again)
    assert (merged["t:once:max"], merged["t:once:n"]) == (3.01, 2.0)
