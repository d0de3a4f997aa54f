"""Membership and metrics: what instances report, the leader's window of metrics and
capacity, who is live, and the deletion of the group."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ...errors import BackendError
from ..lease import LeaseStore
from ..scripts import SCRIPTS
from ..transports.base import Arg
from ..transports.resp import as_str
from ._base import MAX_AHEAD_MS, MAX_IDS_PER_CALL, BadValue, Leader, int_or_none
from .inspect import Inspection

__all__ = ["Members"]


def _metric_fields(flat: Any) -> tuple[dict[str, float], list[BadValue]]:
    """A metrics hash as numbers; fields whose value is not a finite number >= 0 apart."""
    fields: dict[str, float] = {}
    bad: list[BadValue] = []
    for i in range(0, len(flat or ()), 2):
        name, raw = as_str(flat[i]), flat[i + 1]
        try:
            value = float(raw)
        except (TypeError, ValueError):
            bad.append((name, raw, "not a number"))
            continue
        if not math.isfinite(value) or value < 0:
            bad.append((name, raw, "not a finite number >= 0"))
            continue
        fields[name] = value
    return fields, bad


class Members(Inspection):
    """The group's members, their metrics and its capacity decision."""

    async def report(
        self,
        instance: str,
        now_ms: int,
        info: str,
        increments: Sequence[tuple[str, float]],
    ) -> tuple[int | None, int | None, list[BadValue]]:
        """Add metrics, refresh membership; return the published (capacity, version) and
        what was bad: metrics fields that held no number (replaced by the increment) and a
        capacity decision that is not numbers (read as none)."""
        keys = self.keys
        flat: list[Arg] = [x for pair in increments for x in pair]
        reply = await self._script(
            "report",
            [keys.metrics, keys.instances, keys.instances_info, keys.capacity],
            [instance, now_ms, info, *flat],
        )
        value, version, replaced = reply[0], reply[1], reply[2] if len(reply) > 2 else []
        bad: list[BadValue] = [
            (as_str(replaced[i]), replaced[i + 1], "not a number: replaced by an increment")
            for i in range(0, len(replaced), 2)
        ]
        capacity, capacity_version = int_or_none(value), int_or_none(version)
        if value is not None and (capacity is None or capacity_version is None):
            bad.append(("capacity", f"{value!r} {version!r}".encode(), "not numbers"))
            capacity = capacity_version = None
        return capacity, capacity_version, bad

    async def deregister(self, instance: str) -> bool:
        keys = self.keys
        reply = await self._script("deregister", [keys.instances, keys.instances_info], [instance])
        return bool(reply)

    async def read_metrics(self) -> dict[str, float]:
        """The metrics of the current window (fields that are not numbers left out)."""
        reply = await self.transport.execute("HGETALL", self.keys.metrics)
        return _metric_fields(reply)[0]

    async def take_metrics(
        self, leader: Leader, dead_before_ms: int, now_ms: int
    ) -> tuple[dict[str, float], list[BadValue], list[tuple[str, bytes]]]:
        """The window's metrics, reset (leader only); drops instances not seen since
        ``dead_before_ms``, and those whose last-seen time is further ahead of ``now_ms``
        than a running instance writes (:data:`MAX_AHEAD_MS`). Returns (the metrics, the
        fields whose value is not a number — reset too —, (instance, its time) of each
        dropped for being ahead)."""
        keys = self.keys
        reply = await leader.run_fenced(
            SCRIPTS.metrics_take,
            [keys.metrics, keys.instances, keys.instances_info],
            [dead_before_ms, MAX_IDS_PER_CALL, now_ms + MAX_AHEAD_MS],
        )
        fields, bad = _metric_fields(reply[0])
        ahead = reply[1]
        return fields, bad, [(as_str(ahead[i]), ahead[i + 1]) for i in range(0, len(ahead), 2)]

    async def publish(self, leader: Leader, capacity: int | None, fence: int, stats: str) -> int:
        """Publish the capacity decision (None: unchanged) and the window's statistics."""
        keys = self.keys
        reply = await leader.run_fenced(
            SCRIPTS.publish_capacity,
            [keys.capacity, keys.stats],
            ["" if capacity is None else capacity, fence, stats],
        )
        return int(reply or 0)

    async def live_instances(
        self, seen_since_ms: int, now_ms: int
    ) -> list[tuple[str, float, str | None]]:
        """(id, last seen ms, details JSON) of instances seen since ``seen_since_ms``; not
        those seen more than :data:`MAX_AHEAD_MS` after ``now_ms``, which no running
        instance writes."""
        keys = self.keys
        reply = await self.transport.execute(
            "ZRANGEBYSCORE", keys.instances, seen_since_ms, now_ms + MAX_AHEAD_MS, "WITHSCORES"
        )
        ids = [as_str(reply[i]) for i in range(0, len(reply), 2)]
        seen = [float(reply[i]) for i in range(1, len(reply), 2)]
        if not ids:
            return []
        infos = await self.transport.execute("HMGET", keys.instances_info, *ids)
        return [
            (i, t, as_str(info) if info is not None else None)
            for i, t, info in zip(ids, seen, infos, strict=True)
        ]

    async def latest_stats(self) -> str | None:
        reply = await self.transport.execute("GET", self.keys.stats)
        return None if reply is None else as_str(reply)

    async def leader_id(self) -> str | None:
        """The id of the group's leader according to Redis, or None."""
        return await LeaseStore(self.transport, self.keys.leader).holder()

    async def eviction_policy(self) -> tuple[str, int] | None:
        """(maxmemory-policy, maxmemory) of the server; None if CONFIG GET is not allowed."""
        try:
            replies = [
                await self.transport.execute("CONFIG", "GET", "maxmemory-policy"),
                await self.transport.execute("CONFIG", "GET", "maxmemory"),
            ]
        except BackendError:
            return None
        if any(len(r) < 2 for r in replies):
            return None
        return as_str(replies[0][1]), int(replies[1][1])

    async def delete_group(self) -> int:
        """Delete every fixed key of the group (its stream, delayed tasks, lease ...), and
        the streams and floors of the lanes it reads or the queue's registry names."""
        keys = self.keys
        lanes = await self.known_lanes()
        lane_keys = [
            k for lane in sorted(lanes) for k in (keys.lane_stream(lane), keys.lane_floor(lane))
        ]
        return int(await self.transport.execute("DEL", *dict.fromkeys(keys.fixed() + lane_keys)))
