"""One runner's state and its statistics: the immutable snapshot ``Runner.statistics()``
returns, and the per-task totals ``Runner.task_totals()`` returns.

Local and synchronous, like Trio's ``statistics()``; the group-wide figures are
:class:`~trunner.admin.GroupStats` (``group_stats.py``). The mutable counters they are read from
are the engine's (:mod:`trunner._engine.counters`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

__all__ = ["UNREGISTERED", "RunnerState", "RunnerStatistics", "TaskTotals"]

#: The name under which per-task figures count messages of no registered task (unknown
#: names, undecodable entries): names read from Redis are unbounded, so they never get
#: figures of their own (in ``task_totals()``, timings, or Prometheus metrics).
UNREGISTERED = "(unregistered)"


class RunnerState(enum.Enum):
    """Where a runner is in its life: ``INIT`` → ``STARTING`` → ``STARTED`` → ``STOPPING``
    → ``STOPPED``.

    A failed start goes from ``STARTING`` to ``STOPPED``. See
    [Runner states](concepts.md#runner-states).
    """

    INIT = "init"
    """Created, not started."""
    STARTING = "starting"
    """``run`` was called: connecting, loading the scripts, starting the components."""
    STARTED = "started"
    """Ready: fetching and running tasks."""
    STOPPING = "stopping"
    """Shutting down: nothing new is started, running tasks drain."""
    STOPPED = "stopped"
    """Done; a runner is not started again."""


@attrs.define
class TaskTotals:
    """Outcomes of one task's attempts on this instance, since it started."""

    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    deferred_rate: int = 0
    """Messages deferred by the task's rate limit (no attempt used)."""
    deferred_concurrency: int = 0
    """Messages deferred by the task's concurrency limit (no attempt used)."""


@attrs.frozen(kw_only=True)
class RunnerStatistics:
    """An immutable snapshot of one runner's activity since it started.

    [``Runner.statistics``][trunner.Runner.statistics] returns it. ``scheduler_passes``,
    ``scheduler_seconds``, ``delayed_moved``, ``cron_fired`` and ``unique_dropped`` count
    only while the instance leads; they stay 0 on an instance that never led.
    """

    state: RunnerState
    """The runner's state when the snapshot was taken."""
    capacity: int
    """Tasks this instance may run at once: ``num_workers``, or the capacity the leader
    decided."""
    in_flight: int
    """Tasks running now, including failed-task handlers running."""
    max_in_flight: int
    """The most tasks that ran at once."""
    fetched: int
    """Messages read from the stream (new deliveries)."""
    reclaimed: int
    """Messages claimed from dead instances, or released by stopping ones."""
    processed: int
    """Attempts that finished: ``succeeded + failed``."""
    succeeded: int
    """Attempts that returned."""
    failed: int
    """Attempts that raised (each attempt counts)."""
    retried: int
    """Failed attempts whose retry was scheduled."""
    dead_lettered: int
    """Messages given up on and copied to the dead-letter stream."""
    released: int
    """Messages handed back for immediate reclaim: at shutdown, deliveries the runner
    never saw (a read whose reply was lost), and messages fetched beyond a lowered
    capacity."""
    interrupted: int
    """Tasks cancelled because they outlived the drain timeout."""
    expired: int = 0
    """Tasks dropped because they were not started before their ``expires`` time."""
    cancelled: int = 0
    """Tasks cancelled while this instance held them (before they started, or running)."""
    skipped: int = 0
    """Messages of another group reading the same queue (its retries, replays and cron
    ticks), acknowledged without running (see [Queues and fan-out](queues.md))."""
    abandoned: int = 0
    """Tasks still running after the cancel grace (they ignore cancellation): left behind
    when the runner stopped, their messages released."""
    reservations_lost: int
    """Running tasks whose message another consumer claimed."""
    discarded: int = 0
    """Attempts that ended after their delivery was no longer theirs (another consumer
    claimed the message while they ran, or their heartbeat found it lost): their outcome,
    acknowledgement, retry or dead letter was discarded, never written (the delivery that
    owns the message decides its outcome)."""
    acked: int
    """Successful attempts acknowledged in Redis."""
    errors: int
    """Errors reported through [``Runner.errors``][trunner.Runner.errors], including the
    ones dropped from its buffer."""
    scheduler_passes: int
    """Passes of the delayed-task mover while this instance led (each looks for due
    tasks once)."""
    scheduler_seconds: float
    """Time those passes took, in total, in seconds. Divide by ``scheduler_passes`` for
    the average."""
    delayed_moved: int
    """Delayed tasks and retries this instance moved into the stream as leader."""
    cron_fired: int
    """Cron ticks this instance fired as leader."""
    unique_dropped: int
    """Due [unique delayed tasks](unique-tasks.md#delayed-unique-tasks) this instance
    dropped as leader, because their key was locked."""
    quarantined: int = 0
    """Bad items this instance set aside (see
    [Bad data in Redis](reliability.md#bad-data-in-redis))."""
    chores_restarted: int = 0
    """Leader chores that failed and were restarted after a backoff."""
    deferred_rate: int = 0
    """Messages this instance deferred because their task's [rate limit](limits.md) did
    not admit them yet (each comes back when it does; no attempt used)."""
    deferred_concurrency: int = 0
    """Messages this instance deferred to their [concurrency limit](limits.md)'s waiting
    list (each is granted a slot when one is released; no attempt used)."""
    slots_held: int = 0
    """Concurrency slots the messages this instance runs hold now (their sum over the
    group's instances is how many hold a slot, but for slots held by messages between
    instances: granted and not yet fetched, or abandoned by a dead instance)."""
    lanes: Mapping[str, int] = attrs.field(factory=dict)
    """Messages this instance fetched (read or reclaimed) per [priority lane](lanes.md),
    for each lane it reads: how its work divided among the lanes."""
    stalls: int = 0
    """Times the stall watchdog found the event loop blocked past ``stall_threshold`` (a
    sync call in an ``async def`` task, say); each is logged once with the stack that
    held the loop (see [Blocking and CPU-bound tasks](blocking-and-cpu-bound-tasks.md))."""
    threads_abandoned: int = 0
    """Attempts of ``def`` tasks that ended (timeout, cancellation) while their worker
    thread ran on: the thread was left to return by itself, and its result dropped."""
    processes_killed: int = 0
    """Attempts of ``run_in="process"`` tasks whose worker process was killed because
    their timeout passed or they were cancelled (see
    [Blocking and CPU-bound tasks](blocking-and-cpu-bound-tasks.md))."""
    processes_died: int = 0
    """Attempts of ``run_in="process"`` tasks whose worker process died under them (a
    segfault, an abort, an OOM kill): each failed with ``WorkerProcessDied``."""
    paused: bool = False
    """Whether the group is paused, as this instance last heard (see
    [Pausing a group](pause.md)): its fetch loops read and claim nothing; running tasks
    go on."""
