"""The statistics of a runner: the immutable snapshot ``Runner.statistics()`` returns, read
off its counters and the figures its components keep."""

from __future__ import annotations

from .._engine.counters import Counters
from .._executors.processes import ProcessExecutor
from .._util import ErrorLog
from ..config import RunnerConfig
from ..statistics import RunnerState, RunnerStatistics
from .assembly import Components

__all__ = ["snapshot"]


def snapshot(
    state: RunnerState,
    c: Counters,
    errors: ErrorLog,
    config: RunnerConfig,
    parts: Components | None,
) -> RunnerStatistics:
    """The statistics of a runner (``Runner.statistics()``): its counters, and the figures
    its components keep, when it has them (``parts``, from its start on)."""
    mover = parts.mover if parts else None
    processes = parts.pool.executors.get("process") if parts else None
    if not isinstance(processes, ProcessExecutor):
        processes = None
    return RunnerStatistics(
        state=state,
        capacity=parts.pool.capacity if parts else config.num_workers,
        in_flight=parts.pool.in_flight if parts else 0,
        max_in_flight=c.max_in_flight,
        fetched=c.fetched,
        reclaimed=c.reclaimed,
        processed=c.succeeded + c.failed,
        succeeded=c.succeeded,
        failed=c.failed,
        retried=c.retried,
        dead_lettered=c.dead_lettered,
        released=c.released,
        interrupted=c.interrupted,
        abandoned=c.abandoned,
        expired=c.expired,
        cancelled=c.cancelled,
        skipped=c.skipped,
        reservations_lost=c.reservations_lost,
        discarded=c.discarded,
        acked=c.acked,
        errors=errors.captured,
        scheduler_passes=mover.passes if mover else 0,
        scheduler_seconds=mover.pass_seconds if mover else 0.0,
        delayed_moved=mover.moved if mover else 0,
        cron_fired=parts.cron.fired if parts else 0,
        unique_dropped=mover.unique_dropped if mover else 0,
        quarantined=c.quarantined,
        chores_restarted=c.chores_restarted,
        deferred_rate=c.deferred_rate,
        deferred_concurrency=c.deferred_concurrency,
        slots_held=parts.holdings.slots_held() if parts else 0,
        lanes=_lane_counts(c, config),
        stalls=c.stalls,
        threads_abandoned=parts.pool.threads_abandoned if parts else 0,
        processes_killed=processes.killed if processes else 0,
        processes_died=processes.died if processes else 0,
        paused=parts.gate.paused if parts else False,
    )


def _lane_counts(c: Counters, config: RunnerConfig) -> dict[str, int]:
    """Messages fetched per lane this runner reads (counted by the fetch loops with
    more than one lane; with one, all of them)."""
    lanes = config.lane_names
    if len(lanes) == 1:
        return {lanes[0]: c.fetched + c.reclaimed}
    return {lane: c.lanes.get(lane, 0) for lane in lanes}
