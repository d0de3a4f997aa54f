"""How a fetch loop's reads divide among the group's priority lanes: which lanes a read
asks first and for how many entries (strictly by priority, or drawn by weight), and which
entries are kept when Redis returned more than the loop holds slots for.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from .._redis import Broker, RawEntry
from .._wire.names import split_entry_id
from ..config import RunnerConfig
from ..errors import BackendError
from .counters import Counters

__all__ = ["Lanes", "lane_plan", "split_excess"]


def lane_plan(
    order: Sequence[int], weights: Sequence[int], slots: int, *, strict: bool
) -> list[tuple[int, int]]:
    """How one read of several lanes fills ``slots``: (lane index, the most to read from
    it), in reading order (``order``: the indices of the lanes, in priority order when
    strict, else drawn by weight).

    Strict: each lane in turn, for all that is left. By weight: each lane in turn for its
    share of the slots (``weights``), rounded up, so that each lane is looked at on every
    read that has as many slots as lanes; the last one for all that is left. (The fetch
    loop then reads again, in priority order, the lanes that gave all they were asked.)
    """
    if strict:
        return [(index, slots) for index in order]
    total = sum(weights)
    plan = [(index, -(-slots * weights[index] // total)) for index in order]
    plan[-1] = (plan[-1][0], slots)
    return plan


def split_excess(
    entries: Sequence[RawEntry], slots: int, rank: Mapping[str, int]
) -> tuple[list[RawEntry], list[RawEntry]]:
    """``entries`` read from several lanes at once, split into the ``slots`` to keep (the
    upper lanes' first: ``rank`` gives each lane's place) and the rest, each lane's in the
    order it gave them."""
    ordered = sorted(entries, key=lambda e: rank.get(split_entry_id(e.message_id)[0], 0))
    return ordered[:slots], ordered[slots:]


class Lanes:
    """The lanes one fetch loop reads, and how it reads them (see the module docs)."""

    def __init__(self, broker: Broker, config: RunnerConfig) -> None:
        self._broker = broker
        lanes = broker.lanes
        self.count = len(lanes)
        #: Each lane's place in priority order (0 first).
        self.rank = {lane: rank for rank, lane in enumerate(lanes)}
        self._weights = [weight for _, weight in config.lanes]
        self._strict = config.strict_lanes
        self._random = random.Random()

    def counted(self, counters: Counters, entries: list[RawEntry]) -> None:
        """Count ``entries`` fetched, per lane."""
        counts = counters.lanes
        for entry in entries:
            lane = split_entry_id(entry.message_id)[0]
            counts[lane] = counts.get(lane, 0) + 1

    async def read(self, consumer: str, slots: int) -> tuple[list[RawEntry], BackendError | None]:
        """Fill ``slots`` reserved slots with new entries of the lanes, without waiting:
        one ``XREADGROUP`` per lane, as :func:`lane_plan` says, then the lanes that gave
        all they were asked, in priority order, for what is left. Returns the entries
        read, and the error that stopped the reads early (None when none did)."""
        broker, lanes = self._broker, self._broker.lanes
        entries: list[RawEntry] = []
        full: list[int] = []
        plan = lane_plan(self._order(), self._weights, slots, strict=self._strict)
        try:
            for index, quota in plan:
                want = min(quota, slots - len(entries))
                if want > 0:
                    got = await broker.read_lane(consumer, lanes[index], want)
                    entries += got
                    if len(got) == want:
                        full.append(index)
            for index in sorted(full):
                want = slots - len(entries)
                if want > 0:
                    entries += await broker.read_lane(consumer, lanes[index], want)
        except BackendError as exc:
            return entries, exc
        return entries, None

    def _order(self) -> list[int]:
        """The order to read the lanes in this time: by priority when strict, else a
        draw by weight (each lane first with a probability proportional to its weight,
        then the next among the rest, and so on)."""
        if self._strict:
            return list(range(self.count))
        rest = list(range(self.count))
        weights = list(self._weights)
        order: list[int] = []
        while len(rest) > 1:
            pick = self._random.choices(range(len(rest)), weights)[0]
            order.append(rest.pop(pick))
            weights.pop(pick)
        return order + rest
