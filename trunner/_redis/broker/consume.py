"""Consuming: entries read and claimed, and held while they run (heartbeats, progress,
releases)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..._wire.keys import RELEASED_CONSUMER
from ..._wire.names import DEFAULT_LANE, lane_suffix, split_entry_id
from ..transports.base import Arg, Reader
from ..transports.resp import RawEntry, as_str, stream_entries, text_field
from ._base import (
    MAX_IDS_PER_CALL,
    RELEASED_IDLE_MS,
    BrokerBase,
    Delivery,
    Record,
    chunks,
    lane_stream_ids,
    same_id,
)

__all__ = ["Consume"]


class Consume(BrokerBase):
    """Reading the group's entries, and holding them while they run."""

    def open_reader(self) -> Reader:
        """A reader for the group's stream (on Cluster: on the node serving it); each read
        names its consumer."""
        return self.transport.open_reader(self.keys.stream)

    async def read(self, reader: Reader, consumer: str, count: int, block: float) -> list[RawEntry]:
        """Wait up to ``block`` seconds for new entries, at most ``count`` from each lane
        (so up to ``count`` times the lanes in all, with several lanes)."""
        if not self._multi:
            reply = await reader.xreadgroup(self.group, consumer, self.keys.stream, count, block)
            if not reply:
                return []
            return stream_entries(reply[0][1])
        reply = await reader.xreadgroup(self.group, consumer, self._streams, count, block)
        entries: list[RawEntry] = []
        for stream, raw in reply or ():
            entries += self._tagged(self._lane_of[as_str(stream)], raw)
        return entries

    @staticmethod
    def _tagged(lane: str, raw: Any) -> list[RawEntry]:
        return stream_entries(raw, suffix=lane_suffix(lane))

    async def read_lane(self, consumer: str, lane: str, count: int) -> list[RawEntry]:
        """Read up to ``count`` new entries of ``lane`` without waiting (``XREADGROUP``
        without ``BLOCK``, on the connection pool)."""
        reply = await self.transport.execute(
            "XREADGROUP", "GROUP", self.group, consumer, "COUNT", count,
            "STREAMS", self.keys.lane_stream(lane), ">",
        )  # fmt: skip
        return self._tagged(lane, reply[0][1]) if reply else []

    async def reclaim(
        self, consumer: str, min_idle_ms: int, cursor: str, count: int, lane: str = DEFAULT_LANE
    ) -> tuple[str, list[RawEntry]]:
        """Claim up to ``count`` entries of ``lane`` idle ``min_idle_ms`` or released, from
        ``cursor`` on: (next cursor, "0-0" at the end; the entries)."""
        reply = await self._script(
            "reclaim",
            [self.keys.lane_stream(lane)],
            [self.group, consumer, min_idle_ms, cursor, count],
        )
        suffix = lane_suffix(lane)
        entries = [RawEntry(as_str(e[0]) + suffix, list(e[1]) or None, int(e[2])) for e in reply[1]]
        return as_str(reply[0]), entries

    async def record_progress(self, record: Record, message_id: str, owner: Delivery) -> bool:
        """Write a running task's progress into its record (see ``task_progress.lua``);
        False when the record already holds an outcome, or the reporting attempt's delivery
        of ``message_id`` (``owner``) is no longer the pending one."""
        key, ttl_ms, fields = record
        lane, stream_id = split_entry_id(message_id)
        args: list[Arg] = [ttl_ms, self.group, stream_id, owner.consumer, owner.delivery_count]
        args += [text_field(x) for pair in fields for x in pair]
        return bool(await self._script("task_progress", [key, self.keys.lane_stream(lane)], args))

    async def record_started(self, starts: Sequence[tuple[Record, str, Delivery]]) -> int:
        """Write the running records of tasks that keep their result, each ``(record, its
        attempt's entry id, that attempt's delivery)``, unless one already holds an outcome
        or the delivery is no longer the pending one; returns how many were written."""
        written = 0
        for chunk in chunks(starts, MAX_IDS_PER_CALL // 2):
            args: list[Arg] = [self.group]
            streams: list[str] = []
            for (_, ttl_ms, fields), message_id, owner in chunk:
                lane, stream_id = split_entry_id(message_id)
                streams.append(self.keys.lane_stream(lane))
                args += [stream_id, owner.consumer, owner.delivery_count, ttl_ms, len(fields)]
                args += [text_field(x) for pair in fields for x in pair]
            keys = [record[0] for record, _, _ in chunk]
            written += int(await self._script("task_started", [*keys, *streams], args))
        return written

    async def heartbeat(self, consumer: str, ids: Sequence[str]) -> list[str]:
        """Extend the reservations of ``ids``; return those that are no longer ours."""
        lost: list[str] = []
        for stream, args, suffix in self.heartbeat_calls(consumer, ids):
            reply = await self._script("heartbeat", [stream], args)
            lost.extend(as_str(i) + suffix for i in reply)
        return lost

    def heartbeat_calls(
        self, consumer: str, ids: Sequence[str]
    ) -> list[tuple[str, list[Arg], str]]:
        """The ``heartbeat`` script calls that extend the reservations of ``ids``: (its
        stream key, its arguments, the lane suffix of the ids it returns), one per lane and
        chunk (the stall watchdog makes them on a connection of its own, too)."""
        calls: list[tuple[str, list[Arg], str]] = []
        for lane, lane_ids in self._by_lane(ids, same_id):
            stream, suffix = self.keys.lane_stream(lane), lane_suffix(lane)
            for chunk in chunks(lane_stream_ids(lane, lane_ids)):
                calls.append((stream, [self.group, consumer, *chunk], suffix))
        return calls

    async def mark_given_up(self, owner: Delivery, message_id: str, mark: int) -> bool:
        """Add ``mark`` to the delivery count of ``message_id`` if it is still pending for
        ``owner``'s delivery and not marked yet (its idle time restarts, as with a
        heartbeat); return whether it was."""
        lane, entry_id = split_entry_id(message_id)
        reply = await self._script(
            "mark_given_up",
            [self.keys.lane_stream(lane)],
            [self.group, owner.consumer, mark, entry_id, owner.delivery_count],
        )
        return bool(reply)

    async def release(self, consumer: str, entries: Sequence[tuple[str, int]]) -> int:
        """Release ``(id, deliveries to give back)`` entries of ``consumer`` for immediate
        reclaim (a negative number adds to the count: see ``trunner._engine.holdings.GIVEN_UP``)."""
        released = 0
        for lane, lane_entries in self._by_lane(entries, lambda entry: entry[0]):
            stream = self.keys.lane_stream(lane)
            for chunk in chunks(lane_entries, MAX_IDS_PER_CALL // 2):
                flat: list[Arg] = [
                    x for mid, undo in chunk for x in (split_entry_id(mid)[1], int(undo))
                ]
                released += int(
                    await self._script(
                        "release",
                        [stream],
                        [self.group, consumer, RELEASED_CONSUMER, RELEASED_IDLE_MS, *flat],
                    )
                )
        return released

    async def pending_ids(
        self,
        consumer: str,
        *,
        start: str = "-",
        count: int = MAX_IDS_PER_CALL,
        lane: str = DEFAULT_LANE,
    ) -> list[str]:
        """Ids of up to ``count`` entries of ``lane`` pending for ``consumer``, from the
        stream id ``start`` on."""
        reply = await self.transport.execute(
            "XPENDING", self.keys.lane_stream(lane), self.group, start, "+", count, consumer
        )
        suffix = lane_suffix(lane)
        return [as_str(e[0]) + suffix for e in reply or ()]

    async def delete_consumer_if_idle(self, consumer: str) -> bool:
        """Delete ``consumer`` from the group on each lane where nothing is pending for
        it; True when it is gone from every lane."""
        deleted = True
        for stream in self._streams:
            gone = await self._script("delete_consumer", [stream], [self.group, consumer])
            deleted = deleted and bool(gone)
        return deleted
