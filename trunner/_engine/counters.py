"""The counters one runner keeps of its own activity, which its components bump as they
go and ``Runner.statistics()`` reads into a :class:`~trunner.RunnerStatistics` snapshot.
"""

from __future__ import annotations

import attrs

from ..statistics import TaskTotals

__all__ = ["Counters"]


@attrs.define
class Counters:
    """Mutable counters, owned by one runner.

    ``per_task`` is keyed by registered task names, and
    :data:`~trunner.statistics.UNREGISTERED` for the rest: its size is bounded by the
    registry.
    """

    per_task: dict[str, TaskTotals] = attrs.field(factory=dict)

    fetched: int = 0
    reclaimed: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    released: int = 0
    interrupted: int = 0
    abandoned: int = 0
    expired: int = 0
    cancelled: int = 0
    skipped: int = 0
    reservations_lost: int = 0
    discarded: int = 0
    acked: int = 0
    max_in_flight: int = 0
    quarantined: int = 0
    chores_restarted: int = 0
    deferred_rate: int = 0
    deferred_concurrency: int = 0
    #: Event-loop stalls the watchdog noticed (bumped from its thread).
    stalls: int = 0
    #: Messages fetched (read or reclaimed) per lane, with more than one lane.
    lanes: dict[str, int] = attrs.field(factory=dict)

    def task(self, name: str) -> TaskTotals:
        totals = self.per_task.get(name)
        if totals is None:
            totals = self.per_task[name] = TaskTotals()
        return totals
