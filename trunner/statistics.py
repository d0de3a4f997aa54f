"""One runner's state and its statistics: the counters it keeps of its own activity, and
the immutable snapshot ``Runner.statistics()`` returns.

Local and synchronous, like Trio's ``statistics()``; the group-wide figures are
:class:`~trunner.GroupStats` (``group_stats.py``).
"""

from __future__ import annotations

import enum

import attrs

__all__ = ["UNREGISTERED", "Counters", "RunnerState", "RunnerStatistics", "TaskTotals"]

#: The name under which per-task figures count messages of no registered task (unknown
#: names, undecodable entries): names read from Redis are unbounded, so they never get
#: figures of their own (in ``task_totals()``, timings, or Prometheus metrics).
UNREGISTERED = "(unregistered)"


class RunnerState(enum.Enum):
    """Where a runner is in its life: INIT → STARTING → STARTED → STOPPING → STOPPED."""

    INIT = "init"
    STARTING = "starting"
    STARTED = "started"
    STOPPING = "stopping"
    STOPPED = "stopped"


@attrs.define
class TaskTotals:
    """Outcomes of one task's attempts on this instance, since it started."""

    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    dead_lettered: int = 0


@attrs.define
class Counters:
    """Mutable counters, owned by one runner.

    ``per_task`` is keyed by registered task names, and :data:`UNREGISTERED` for the
    rest: its size is bounded by the registry.
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
    reservations_lost: int = 0
    acked: int = 0
    max_in_flight: int = 0
    quarantined: int = 0
    chores_restarted: int = 0

    def task(self, name: str) -> TaskTotals:
        totals = self.per_task.get(name)
        if totals is None:
            totals = self.per_task[name] = TaskTotals()
        return totals


@attrs.frozen(kw_only=True)
class RunnerStatistics:
    """An immutable snapshot of one runner's activity since it started."""

    state: RunnerState
    capacity: int
    """Tasks this instance may run at once."""
    in_flight: int
    """Tasks running now."""
    max_in_flight: int
    """The most tasks that ran at once."""
    fetched: int
    """Messages read from the stream (new deliveries)."""
    reclaimed: int
    """Messages claimed from dead or releasing consumers."""
    processed: int
    """Attempts that finished, successfully or not."""
    succeeded: int
    failed: int
    """Attempts that raised (each retry counts)."""
    retried: int
    """Failed attempts scheduled to run again."""
    dead_lettered: int
    """Messages given up on and copied to the dead-letter stream."""
    released: int
    """Messages handed back for immediate reclaim (at shutdown)."""
    interrupted: int
    """Tasks cancelled because they outlived the drain timeout."""
    reservations_lost: int
    """Running tasks whose message another consumer claimed."""
    acked: int
    """Successful attempts acknowledged in Redis."""
    errors: int
    """Errors captured (see ``Runner.errors()``)."""
    scheduler_passes: int
    """Passes of the delayed-task mover while this instance led."""
    scheduler_seconds: float
    """Time those passes took, in total (average: divide by ``scheduler_passes``)."""
    delayed_moved: int
    """Delayed tasks and retries this instance moved into the stream as leader."""
    cron_fired: int
    """Cron ticks this instance fired as leader."""
    unique_dropped: int
    """Due unique delayed tasks this leader dropped because their key was locked."""
    quarantined: int = 0
    """Bad items this instance set aside (see :mod:`trunner.quarantine`)."""
    chores_restarted: int = 0
    """Leader chores that failed and were restarted after a backoff."""
