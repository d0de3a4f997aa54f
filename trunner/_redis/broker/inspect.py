"""Looking at a group without changing it: counts, entries, and snapshots for the test kit.

:class:`~trunner._redis.broker.Broker` holds the state transitions of a group; its
read-only queries are here, in :class:`Inspection`, which the broker inherits, so that
``broker.queue_length()`` and the rest stay where callers look for them. The test helpers
(``trunner.testing``) read what they report through the same typed calls instead of
sending raw commands; :func:`delete_prefixed` cleans a test Redis.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ..._wire.names import DEFAULT_LANE, entry_id, is_lane, lane_suffix, split_entry_id
from ..._wire.record import record_from_json
from ...errors import RedisCommandError
from ..scripts import SCRIPTS
from ..transports.base import call_script
from ..transports.resp import RawEntry, as_str, stream_entries
from ._base import BrokerBase

if TYPE_CHECKING:
    from ..transports.base import Transport

__all__ = ["GroupProgress", "Inspection", "TaskLook", "delete_prefixed"]


@attrs.frozen
class GroupProgress:
    """Where a group stands, read in one round trip (one moment, on one server)."""

    pending: int
    """Entries delivered to the group and not acknowledged."""
    last_delivered: str | None
    """The id of the last entry delivered to the group: ``0-0`` before the group reads
    (or exists); None when the stream does not exist (nothing was ever enqueued)."""
    due: int
    """Delayed tasks (and retries) due by the time asked about."""
    delayed: int
    """Delayed tasks (and retries), due or not."""
    last_by_lane: dict[str, str | None] = attrs.field(factory=dict)
    """Per lane: :attr:`last_delivered` of the lane's stream (the default lane's is
    :attr:`last_delivered`)."""


@attrs.frozen
class TaskLook:
    """Where one task is, read in one script (one moment): see ``task_status.lua``."""

    record: dict[bytes, bytes]
    """Its record (empty without one)."""
    due_ms: float | None
    """When it is due, while it waits in the delayed set."""
    delayed: bytes | None
    """Its message, while it waits in the delayed set."""
    entry_id: str | None
    """Its entry in the stream, while it is there."""
    entry: list[bytes] | None
    """That entry's fields."""
    consumer: str | None
    """The consumer the entry is pending for (delivered, not acknowledged)."""
    deliveries: int
    """How many times the entry was delivered (0 when not pending)."""
    delivered: bool
    """Whether the group delivered the entry already (else it is queued)."""
    waiting: bytes | None = None
    """Its message, while it waits for a concurrency slot (in a limit's waiting list)."""


class Inspection(BrokerBase):
    """The read-only queries of a group (a :class:`~trunner._redis.broker.Broker`)."""

    # -- counts -------------------------------------------------------------------------------

    async def known_lanes(self) -> list[str]:
        """The lanes this broker reads, then the others the queue's registry of lanes
        names (what runners declared; names that are no lane names are left out)."""
        try:
            named = await self.transport.execute("SMEMBERS", self.keys.lanes)
        except RedisCommandError:  # another type: set aside by the runners (Keys.types)
            named = []
        others = {n for raw in named or () if is_lane(n := as_str(raw))} - set(self.lanes)
        return [*self.lanes, *sorted(others)]

    async def queue_length(self) -> int:
        """The entries of the lanes' streams waiting for the group or running: all of
        them (XLEN) with one group on the queue; on a queue several groups read, those
        not yet delivered to this group plus its pending ones (``queue_length.lua``)."""
        return sum((await self.lane_lengths()).values())

    async def lane_lengths(self, lanes: Sequence[str] | None = None) -> dict[str, int]:
        """:meth:`queue_length` per lane (of ``lanes``, by default :meth:`known_lanes`)."""
        keys = self.keys
        lengths: dict[str, int] = {}
        for lane in lanes if lanes is not None else await self.known_lanes():
            try:
                lengths[lane] = int(
                    await call_script(
                        self.transport.execute,
                        SCRIPTS.queue_length,
                        [keys.lane_stream(lane), keys.groups],
                        [self.group],
                    )
                )
            except RedisCommandError:
                if lane in self.lanes:
                    raise  # this runner's own: it sets the key aside
                lengths[lane] = 0  # another runner's lane whose key holds another type
        return lengths

    async def _pending_summaries(self, lanes: Sequence[str] | None) -> list[Any]:
        """The XPENDING summary of each lane (of ``lanes``, by default
        :meth:`known_lanes`) with a stream and the group on it, in one round trip (an
        error of the default lane's stream, NOGROUP say, propagates)."""
        lanes = lanes if lanes is not None else await self.known_lanes()
        replies = await self.transport.pipeline(
            [("XPENDING", self.keys.lane_stream(lane), self.group) for lane in lanes]
        )
        found = []
        for lane, reply in zip(lanes, replies, strict=True):
            if isinstance(reply, BaseException):
                if lane == DEFAULT_LANE or not isinstance(reply, RedisCommandError):
                    raise reply
                continue
            found.append(reply)
        return found

    async def pending_count(self) -> int:
        return sum(int(reply[0]) for reply in await self._pending_summaries(None) if reply)

    async def pending_by_consumer(self, lanes: Sequence[str] | None = None) -> dict[str, int]:
        """Pending entries per consumer, over ``lanes`` (by default
        :meth:`known_lanes`)."""
        counts: dict[str, int] = {}
        for reply in await self._pending_summaries(lanes):
            for name, count in (reply[3] or ()) if reply else ():
                counts[as_str(name)] = counts.get(as_str(name), 0) + int(count)
        return counts

    async def task_look(self, task_id: str) -> TaskLook:
        """Where the task ``task_id`` is (its record, delayed, queued, pending), at once."""
        keys = self.keys
        reply = await call_script(
            self.transport.execute,
            SCRIPTS.task_status,
            [
                keys.stream,
                keys.delayed,
                keys.delayed_messages,
                keys.where,
                keys.task(task_id),
                keys.retries,
                keys.retry_messages,
                keys.concurrency_waiters,
            ],
            [self.group, task_id, keys.concurrency_waiting("")],
        )
        flat, due, delayed, entry_id, fields, consumer, deliveries, delivered, waiting = reply
        if isinstance(flat, bytes):  # an outcome written as one JSON object
            record = record_from_json(flat)
        else:
            record = {flat[i]: flat[i + 1] for i in range(0, len(flat) - 1, 2)}
        return TaskLook(
            record=record,
            due_ms=float(due) if due is not None else None,
            delayed=delayed if isinstance(delayed, bytes) else None,
            entry_id=as_str(entry_id) if entry_id else None,
            entry=list(fields) if fields else None,
            consumer=as_str(consumer) if consumer else None,
            deliveries=int(deliveries or 0),
            delivered=bool(delivered),
            waiting=waiting if isinstance(waiting, bytes) else None,
        )

    async def delayed_count(self) -> int:
        """The delayed tasks of the queue, and the group's retries waiting (for a group of
        its own, one set holds both)."""
        keys = self.keys
        count = int(await self.transport.execute("ZCARD", keys.delayed))
        if not keys.own_queue:
            count += int(await self.transport.execute("ZCARD", keys.retries))
        return count

    async def dead_count(self) -> int:
        return int(await self.transport.execute("XLEN", self.keys.dead))

    async def capacity_decision(self) -> dict[str, int]:
        """The leader's last capacity decision (fields that are not integers left out)."""
        reply = await self.transport.execute("HGETALL", self.keys.capacity)
        decision: dict[str, int] = {}
        for i in range(0, len(reply or ()), 2):
            try:
                decision[as_str(reply[i])] = int(reply[i + 1])
            except ValueError:
                continue
        return decision

    # -- dead letters -------------------------------------------------------------------------

    async def dead_entries(self, count: int = 100, start: str = "-") -> list[RawEntry]:
        reply = await self.transport.execute("XRANGE", self.keys.dead, start, "+", "COUNT", count)
        return stream_entries(reply)

    async def quarantine_count(self) -> int:
        return int(await self.transport.execute("XLEN", self.keys.quarantine))

    async def quarantine_entries(self, count: int = 100, start: str = "-") -> list[RawEntry]:
        """Records of the quarantine stream, oldest first, from ``start`` on."""
        reply = await self.transport.execute(
            "XRANGE", self.keys.quarantine, start, "+", "COUNT", count
        )
        return stream_entries(reply)

    async def dead_entries_before(self, count: int, end: str = "+") -> list[RawEntry]:
        """Up to ``count`` dead-letter entries, newest first, from ``end`` down (an id, or
        ``(id`` to leave it out)."""
        reply = await self.transport.execute("XREVRANGE", self.keys.dead, end, "-", "COUNT", count)
        return stream_entries(reply)

    async def dead_entry(self, entry_id: str) -> RawEntry | None:
        reply = await self.transport.execute("XRANGE", self.keys.dead, entry_id, entry_id)
        entries = stream_entries(reply)
        return entries[0] if entries else None

    # -- delayed tasks and cron -----------------------------------------------------------------

    async def delayed_entries(
        self, count: int, offset: int = 0
    ) -> list[tuple[str, float, bytes | None]]:
        """(task id, due ms, message or None) of up to ``count`` delayed tasks, soonest
        first, from position ``offset``: two commands, bounded by ``count``."""
        keys = self.keys
        flat = await self.transport.execute(
            "ZRANGE", keys.delayed, offset, offset + count - 1, "WITHSCORES"
        )
        ids = [as_str(flat[i]) for i in range(0, len(flat or ()) - 1, 2)]
        if not ids:
            return []
        dues = [float(flat[i]) for i in range(1, len(flat), 2)]
        messages = await self.transport.execute("HMGET", keys.delayed_messages, *ids)
        return [
            (i, due, m if isinstance(m, bytes) else None)
            for i, due, m in zip(ids, dues, messages, strict=True)
        ]

    # -- progress, for the test kit's run_until_idle --------------------------------------------

    async def progress(self, due_by_ms: int) -> GroupProgress:
        """Where the group stands, with the delayed tasks due by ``due_by_ms`` (Unix ms)."""
        keys = self.keys
        lanes = await self.known_lanes()
        replies = await self.transport.pipeline(
            [
                *(("XINFO", "GROUPS", keys.lane_stream(lane)) for lane in lanes),
                ("ZCOUNT", keys.delayed, "-inf", due_by_ms),
                ("ZCARD", keys.delayed),
            ]
        )
        due, delayed = replies[-2], replies[-1]
        if isinstance(due, BaseException):
            raise due
        if isinstance(delayed, BaseException):
            raise delayed
        pending = 0
        lasts: dict[str, str | None] = {}
        for lane, groups in zip(lanes, replies[: len(lanes)], strict=True):
            last = None
            if isinstance(groups, BaseException):
                # No stream yet: nothing was dispatched. Another type: for another
                # runner's lane, nothing to wait for here.
                if "no such key" not in str(groups) and lane in self.lanes:
                    raise groups
            else:
                last = "0-0"  # a stream without our group: every entry is waiting for it
                for info in groups:
                    fields = {as_str(info[i]): info[i + 1] for i in range(0, len(info) - 1, 2)}
                    if as_str(fields.get("name")) == self.group:
                        pending += int(fields["pending"])
                        last = as_str(fields["last-delivered-id"])
            lasts[lane] = last
        return GroupProgress(pending, lasts[DEFAULT_LANE], int(due), int(delayed), lasts)

    async def undelivered(self, after: str, count: int, lane: str = DEFAULT_LANE) -> list[RawEntry]:
        """Up to ``count`` entries of ``lane``'s stream after its stream id ``after``."""
        reply = await self.transport.execute(
            "XRANGE", self.keys.lane_stream(lane), f"({after}", "+", "COUNT", count
        )
        return stream_entries(reply, suffix=lane_suffix(lane))

    async def pending_entries(
        self, count: int, lanes: Sequence[str] | None = None
    ) -> list[tuple[str, str]]:
        """(id, consumer) of up to ``count`` entries pending in the group, oldest first
        in each lane, lane after lane (of ``lanes``, by default :meth:`known_lanes`)."""
        found: list[tuple[str, str]] = []
        for lane in lanes if lanes is not None else await self.known_lanes():
            if len(found) >= count:
                break
            try:
                reply = await self.transport.execute(
                    "XPENDING", self.keys.lane_stream(lane), self.group, "-", "+", count
                )
            except RedisCommandError:
                if lane == DEFAULT_LANE:
                    raise
                continue
            found += [(entry_id(as_str(p[0]), lane), as_str(p[1])) for p in reply]
        return found[:count]

    async def entries(self, ids: Sequence[str]) -> list[RawEntry | None]:
        """The entries ``ids`` (of any lane), in one round trip; None for each deleted
        one."""
        if not ids:
            await self.transport.checkpoint()
            return []
        commands: list[tuple[str, ...]] = []
        for i in ids:
            lane, stream_id = split_entry_id(i)
            commands.append(("XRANGE", self.keys.lane_stream(lane), stream_id, stream_id))
        replies = await self.transport.pipeline(commands)
        found: list[RawEntry | None] = []
        for i, reply in zip(ids, replies, strict=True):
            entries = [] if isinstance(reply, BaseException) else stream_entries(reply)
            found.append(RawEntry(i, entries[0].fields, 1) if entries else None)
        return found

    async def due_messages(self, due_by_ms: int, count: int) -> list[bytes | None]:
        """The messages of up to ``count`` delayed tasks due by ``due_by_ms`` (None for one
        cancelled meanwhile)."""
        keys = self.keys
        ids = await self.transport.execute(
            "ZRANGEBYSCORE", keys.delayed, "-inf", due_by_ms, "LIMIT", 0, count
        )
        if not ids:
            return []
        messages: list[bytes | None] = await self.transport.execute(
            "HMGET", keys.delayed_messages, *ids
        )
        return messages


def _glob_escape(text: str) -> str:
    return re.sub(r"([\\*?\[\]])", r"\\\1", text)


async def delete_prefixed(transport: Transport, prefix: str) -> int:
    """Delete every key named ``<prefix>:...``; return how many there were.

    A SCAN loop: keys written meanwhile may be left. For the Redis a test suite owns.
    """
    deleted = 0
    cursor = "0"
    while True:
        reply = await transport.execute(
            "SCAN", cursor, "MATCH", f"{_glob_escape(prefix)}:*", "COUNT", 1000
        )
        cursor, found = as_str(reply[0]), reply[1]
        if found:
            deleted += int(await transport.execute("DEL", *found))
        if cursor == "0":
            return deleted
