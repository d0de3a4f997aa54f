"""An aggregator is responsible for the leader's view of the group: every
``stats_interval`` it takes and resets the group's metrics with a fenced script, computes
the group's statistics, decides the capacity of the pools, publishes both, and calls
``long_queue_hook`` when the predicted wait exceeds ``long_queue_threshold``.

It is a leader chore, like the janitor: it runs only while this instance leads.

Each round it also looks for lanes of the queue (its registry of lanes) that hold
messages while no live instance of the group reads them (a misspelt lane a task declared,
a lane its runners are not configured for yet): it warns once per lane, when the lane
becomes so, and notes when it is read again or empty (:attr:`Aggregator.unread_lanes`).

Capacity: the worker-pool capacity the leader decides and every instance applies
(:func:`decide_capacity`).

With ``min_workers == max_workers`` (the default: both ``num_workers``) capacity is fixed.
Otherwise, each aggregation round, the leader asks for enough workers in total for the
predicted wait to meet ``long_queue_threshold``, spread over the live instances::

    per_instance = clamp(ceil(ceil(average * queue_length / threshold) / instances),
                         min_workers, max_workers)

(the average of the window, or of the last window in which tasks finished). An empty
queue gives ``min_workers``; a queue with no finished task to size it by gives
``max_workers``. Every instance applies the published value to its
pool's worker slots within a second; lowering it never cancels running tasks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable

import trio

from .._engine.quarantine import Quarantine
from .._redis import Broker
from .._util import ErrorLog, LoopBackoff, logger, wall_ms
from .._wire.inspection import instances_of, unread_lanes
from .._wire.stats import GroupStats, compute_stats
from ..config import RunnerConfig
from ..errors import BackendError
from .election import Elector

__all__ = ["Aggregator", "decide_capacity"]


def decide_capacity(stats: GroupStats, config: RunnerConfig) -> int | None:
    """Workers per instance for the next round; None when capacity is fixed."""
    low, high = config.worker_bounds
    threshold = config.long_queue_threshold
    if low == high or threshold is None:
        return None
    if stats.queue_length == 0:
        return low
    if not math.isfinite(stats.predicted_wait):
        return high  # timings too large to add up (written by something else, or absurd)
    if stats.predicted_wait <= 0:
        return high  # a queue, and no finished task yet to size it by
    total = stats.predicted_wait * stats.total_capacity  # = average x queue_length
    needed = math.ceil(total / threshold)
    per_instance = math.ceil(needed / max(stats.instances, 1))
    return max(low, min(high, per_instance))


class Aggregator:
    """The leader's periodic statistics, long-queue hook and capacity decision."""

    def __init__(
        self,
        broker: Broker,
        config: RunnerConfig,
        errors: ErrorLog,
        quarantine: Quarantine,
        on_stats: Callable[[GroupStats], Awaitable[None]] | None = None,
    ) -> None:
        self._broker = broker
        self._config = config
        self._errors = errors
        self._quarantine = quarantine
        self._on_stats = on_stats
        threshold = config.long_queue_threshold
        self.interval = config.stats_interval or (threshold / 2 if threshold else 60.0)
        self.rounds = 0
        self._last_average = 0.0
        self.unread_lanes: dict[str, int] = {}
        """The lanes that held messages no live instance of the group reads, at the last
        round -> their queue length (each warned about once, when it became so)."""
        self.unread_warnings = 0
        """How many such warnings were logged (one per lane each time it becomes so)."""

    async def run(self, elector: Elector) -> None:
        backoff = LoopBackoff()
        while True:
            await trio.sleep(self.interval)
            try:
                await self._round(elector)
            except BackendError as exc:
                self._errors.capture(exc)
                logger.warning("aggregating the group's metrics failed: %s", exc)
                await self._quarantine.after_error(exc)
                await trio.sleep(backoff.next_delay())
            else:
                backoff.reset()

    async def _round(self, elector: Elector) -> None:
        config = self._config
        ttl_ms = int(config.instance_ttl * 1000)
        now_ms = wall_ms()
        fields, bad_fields, ahead = await self._broker.take_metrics(
            elector, now_ms - ttl_ms, now_ms
        )
        lengths = await self._broker.lane_lengths()
        queue_length = sum(lengths.values())
        rows = await self._broker.live_instances(now_ms - ttl_ms, now_ms)
        instances, bad_instances = instances_of(rows, await self._broker.leader_id())
        read = {*config.lane_names, *(lane for i in instances for lane in i.lanes)}
        self._check_lanes(unread_lanes(lengths, read), read)
        quarantine = self._quarantine
        for instance, seen in ahead:
            reason = "last seen more than an hour ahead of the leader's clock"
            await quarantine.set_aside("instances", instance, reason, seen, "dropped")
        for field, stored, reason in bad_fields:
            await quarantine.set_aside("metrics", field, reason, stored, "left out of the window")
        for instance, stored, reason in bad_instances:
            action = "listed without its details"
            await quarantine.set_aside("instances:info", instance, reason, stored, action)
        paused = await self._broker.paused_since() is not None
        stats = compute_stats(
            fields, queue_length, instances, time.time(), self._last_average, paused=paused
        )
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

    def _check_lanes(self, unread: dict[str, int], read: set[str]) -> None:
        """Warn of each lane of ``unread`` (lane -> messages) that became so: none of the
        lanes ``read`` by the live instances; note each that is no longer so (read by a
        live instance again, or empty)."""
        keys = self._broker.keys
        for lane, length in unread.items():
            if lane in self.unread_lanes:
                continue
            self.unread_warnings += 1
            logger.warning(
                "lane %r of queue %r holds %d message(s) that no live runner of group %r "
                "reads (they read %s): they wait until one does. If the lane is meant, add "
                "it to RunnerConfig.lanes of the group's runners; if it is a mistake (a "
                "misspelt priority), fix the dispatches or the task's priority, and once "
                "nothing in it is to run, DEL %s and SREM %s %s",
                lane,
                keys.queue,
                length,
                keys.group,
                ", ".join(sorted(read)),
                keys.lane_stream(lane),
                keys.lanes,
                lane,
            )
        for lane in self.unread_lanes.keys() - unread.keys():
            logger.info("lane %r of queue %r is read again, or empty", lane, keys.queue)
        self.unread_lanes = unread
