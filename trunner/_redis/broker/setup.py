"""Setting a group up: its scripts, the stream and consumer group of each lane, the floors
they start from, and the queue's registry of groups."""

from __future__ import annotations

import time

from ..._wire.names import DEFAULT_LANE, is_stream_id
from ...errors import RedisCommandError
from ..scripts import SCRIPTS
from ..transports.resp import as_str
from .produce import Produce

__all__ = ["Setup"]


class Setup(Produce):
    """A group's set-up (setting it up declares its lanes, as producing into one does)."""

    async def load_scripts(self) -> None:
        for script in SCRIPTS.all():  # one by one: on Cluster each goes to every primary
            await self.transport.execute("SCRIPT", "LOAD", script.source)

    async def ensure_group(self) -> str | None:
        """Create the stream of each lane and the consumer group on it if missing: from
        the lane's recorded floor (see :meth:`record_floor`), else from the stream's
        start; record the group in the queue's registry (``ensure_group.lua``) and the
        lanes in the queue's registry of lanes. Returns the id a lane's group was created
        from (the first such lane's), or None when each existed."""
        created: str | None = None
        for lane in self.lanes:
            start = await self._ensure_lane(lane)
            created = created or start
        if self._multi:
            await self.declare_lanes([lane for lane in self.lanes if lane != DEFAULT_LANE])
        return created

    async def _ensure_lane(self, lane: str) -> str | None:
        stream = self.keys.lane_stream(lane)
        floor = await self.transport.execute("GET", self.keys.lane_floor(lane))
        start = as_str(floor) if floor is not None and is_stream_id(as_str(floor)) else "0"
        if int(start.partition("-")[0]) > (time.time() + 3600) * 1000:
            # A floor ahead of the clock (an hour of skew allowed) is not one recorded
            # here: the group would skip every message added until then.
            start = "0"
        try:
            created = await self._script(
                "ensure_group", [stream, self.keys.groups], [self.group, start]
            )
        except RedisCommandError as exc:
            if "BUSYGROUP" in str(exc) or await self._group_exists(stream):
                return None  # e.g. refused because Redis is out of memory, but it is there
            raise
        return start if created else None

    async def record_floor(self) -> str | None:
        """Record, for each lane, the id below which every message is finished for the
        group (the oldest pending one, or the next to deliver); returns the default
        lane's, None when there is no group."""
        recorded: str | None = None
        for lane in self.lanes:
            keys = [self.keys.lane_stream(lane), self.keys.lane_floor(lane)]
            reply = await self._script("group_floor", keys, [self.group])
            if lane == DEFAULT_LANE:
                recorded = as_str(reply) if reply else None
        return recorded

    async def shared(self) -> bool:
        """Whether more than one group reads the queue (its registry of groups says so; a
        registry of another type reads as shared, as the scripts read it)."""
        try:
            return int(await self.transport.execute("SCARD", self.keys.groups)) > 1
        except RedisCommandError:
            return True

    async def forget_gone_groups(self) -> list[str]:
        """Remove from the queue's registry the groups no longer on its stream
        (``forget_groups.lua``); returns their names."""
        reply = await self._script("forget_groups", [self.keys.stream, self.keys.groups], [])
        return [as_str(name) for name in reply]

    async def _group_exists(self, stream: str) -> bool:
        try:
            groups = await self.transport.execute("XINFO", "GROUPS", stream)
        except RedisCommandError:
            return False  # no such stream
        return any(
            as_str(info[i + 1]) == self.group
            for info in groups
            for i in range(0, len(info) - 1, 2)
            if as_str(info[i]) == "name"
        )
