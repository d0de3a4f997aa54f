"""The stream operations of one consumer group, as typed Trio calls.

Each state transition of a message is one command or one script (``lua/``), and every key a
script touches is passed in KEYS (all in the group's hash slot).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import attrs
import trio

from .._wire.envelope import PAYLOAD_FIELD
from .._wire.keys import (
    DEFAULT_LANE,
    RELEASED_CONSUMER,
    Keys,
    UniqueLock,
    entry_id,
    is_stream_id,
    lane_suffix,
    split_entry_id,
)
from ..errors import BackendError, RedisCommandError
from .inspect import Inspection
from .lease import LeaseStore
from .resp import RawEntry, as_str, packed_fields, stream_entries, text_field
from .scripts import SCRIPTS, Script
from .transport import Arg, Reader, Subscriber, Transport

__all__ = [
    "MAX_AHEAD_MS",
    "MAX_IDS_PER_CALL",
    "RELEASED_IDLE_MS",
    "AckRecord",
    "Admit",
    "BadValue",
    "Broker",
    "Delivery",
    "Leader",
    "Owner",
    "RawEntry",
    "Record",
    "Slot",
]

T = TypeVar("T")

#: The most ids or payloads one script call carries; larger batches are split.
MAX_IDS_PER_CALL = 1000
#: Idle time given to released entries: far above any reclaim delay.
RELEASED_IDLE_MS = 10 * 365 * 24 * 3600 * 1000
#: How far ahead of a reader's clock an instance's last-seen time may be (ms): an hour of
#: clock skew between hosts. Further ahead, no running instance wrote it: it is not listed,
#: and the leader drops it (else it would be listed as live for ever).
MAX_AHEAD_MS = 3600 * 1000


class Leader(Protocol):
    """The current leader (an ``Elector``): runs a fenced script, which writes only while
    the lease still holds the leader's id (else it raises LeadershipLost)."""

    async def run_fenced(self, script: Script, keys: Sequence[str], args: Sequence[Arg]) -> Any: ...


def _chunks(items: Sequence[Any], size: int = MAX_IDS_PER_CALL) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _by_consumer(
    ids: Sequence[str], owners: Mapping[str, Delivery]
) -> Iterable[tuple[str, Sequence[str]]]:
    """``ids`` in script-sized chunks, each of one consumer's deliveries (in order)."""
    consumer = owners[ids[0]].consumer if ids else ""
    if all(owners[i].consumer == consumer for i in ids):  # the usual case: one consumer
        for chunk in _chunks(ids):
            yield consumer, chunk
        return
    grouped: dict[str, list[str]] = {}
    for i in ids:
        grouped.setdefault(owners[i].consumer, []).append(i)
    for name, its_ids in grouped.items():
        for chunk in _chunks(its_ids):
            yield name, chunk


#: A stored value that is not what trunner writes there: (field or item, value, reason).
BadValue = tuple[str, bytes, str]
#: The outcome of a task that keeps its result: its record's key, time-to-live (ms) and
#: fields (``trunner.status`` says which), stored as a hash.
Record = tuple[str, int, Sequence[tuple[str, Arg]]]
#: A record written with an acknowledgement (:meth:`Broker.ack`): as a :data:`Record`, or
#: with its fields as one JSON object, stored as a string (one ``SET``: the hot path).
AckRecord = Record | tuple[str, int, bytes]
#: A concurrency slot an entry holds: its holders key, its waiting-list key, the limit.
Slot = tuple[str, str, int]
#: The most messages one admission script call decides.
MAX_ADMITS_PER_CALL = 100


class Delivery(Protocol):
    """The delivery an attempt belongs to: the consumer it is pending for, and its count
    as Redis keeps it (what XPENDING said of it when the attempt began). The scripts that
    end an attempt write only while this is still the entry's pending delivery
    (``deliveries.lua``)."""

    @property
    def consumer(self) -> str: ...

    @property
    def delivery_count(self) -> int: ...


@attrs.frozen
class Owner:
    """A :class:`Delivery` as a value (a runner's jobs are deliveries themselves)."""

    consumer: str
    delivery_count: int = 1


@attrs.frozen
class Admit:
    """One message to admit (see :meth:`Broker.admit_many`): its entry id, its task id,
    the message stored if it is deferred, its rate (key, emission interval ms, burst
    tolerance ms; None: not checked), its concurrency slot (None: none) and that limit's
    key (``<len>:<task>[:<key>]``, or '')."""

    message_id: str
    task_id: str
    deferred: bytes
    rate: tuple[str, float, float] | None
    slot: Slot | None
    slot_key: str


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


def _same(message_id: str) -> str:
    return message_id


def _stream_ids(lane: str, ids: Sequence[str]) -> Sequence[str]:
    """The stream ids of trunner's entry ids ``ids`` of ``lane``."""
    return ids if lane == DEFAULT_LANE else [split_entry_id(i)[1] for i in ids]


def _int_or_none(raw: Any) -> int | None:
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None


class Broker(Inspection):
    """The group ``keys.group`` on ``transport``: its state transitions here, its
    read-only queries in :class:`~trunner._redis.inspect.Inspection`.

    ``lanes``: the priority lanes it reads, highest first (see [Priority
    lanes](lanes.md)). Ids in and out are trunner's entry ids (``<stream id>@<lane>``
    in a lane other than the default, :func:`~trunner._wire.keys.entry_id`); each call goes to
    the stream of its ids' lane, one script call per lane.
    """

    def __init__(
        self,
        transport: Transport,
        keys: Keys,
        *,
        delete_on_ack: bool = True,
        lanes: Sequence[str] = (DEFAULT_LANE,),
    ) -> None:
        self.transport = transport
        self.keys = keys
        self.group = keys.group
        self._delete = "1" if delete_on_ack else "0"
        self.lanes = tuple(lanes)
        """The lanes it reads, highest priority first."""
        self._streams = [keys.lane_stream(lane) for lane in self.lanes]
        self._lane_of = dict(zip(self._streams, self.lanes, strict=True))
        self._multi = len(self.lanes) > 1

    def _by_lane(
        self, items: Sequence[T], id_of: Callable[[T], str]
    ) -> Iterable[tuple[str, Sequence[T]]]:
        """``items`` by the lane of their entry id (``id_of(item)``): (lane, its items in
        order). With one lane (every id of the default lane: the runner reads no other),
        ``items`` as they are."""
        if not self._multi:
            return ((DEFAULT_LANE, items),)
        lanes: dict[str, list[T]] = {}
        for item in items:
            lanes.setdefault(split_entry_id(id_of(item))[0], []).append(item)
        return lanes.items()

    @property
    def description(self) -> str:
        return self.transport.description

    async def _script(self, name: str, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        return await self.transport.evalsha(getattr(SCRIPTS, name), keys, args)

    # -- set-up -----------------------------------------------------------------------------

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

    # -- producing --------------------------------------------------------------------------

    async def declare_lanes(self, lanes: Sequence[str]) -> None:
        """Name ``lanes`` in the queue's registry of lanes."""
        await self.transport.execute("SADD", self.keys.lanes, *lanes)

    async def enqueue(self, data: bytes, lane: str = DEFAULT_LANE) -> str:
        """Add a message to ``lane``'s stream; its entry id."""
        stream = self.keys.lane_stream(lane)
        reply = await self.transport.execute("XADD", stream, "*", PAYLOAD_FIELD, data)
        return entry_id(as_str(reply), lane)

    async def enqueue_unique(
        self, items: Sequence[tuple[str, str, bytes]], ttl_ms: int, lane: str = DEFAULT_LANE
    ) -> list[str | None]:
        """Enqueue unique tasks ``(lock key, token, message)`` into ``lane``: ids, None
        where refused."""
        ids: list[str | None] = []
        stream = self.keys.lane_stream(lane)
        for chunk in _chunks(items, MAX_IDS_PER_CALL // 2):
            keys = [stream, self.keys.quarantine, *(lock for lock, _, _ in chunk)]
            args: list[Arg] = [ttl_ms]
            for _, token, data in chunk:
                args += [token, data]
            reply = await self._script("enqueue_unique", keys, args)
            ids.extend(entry_id(as_str(i), lane) if i else None for i in reply)
        return ids

    async def enqueue_many(self, datas: Sequence[bytes], lane: str = DEFAULT_LANE) -> list[str]:
        """Add messages to ``lane``'s stream, in order; their entry ids."""
        ids: list[str] = []
        stream = self.keys.lane_stream(lane)
        for chunk in _chunks(datas):
            reply = await self._script("enqueue_many", [stream], chunk)
            ids.extend(entry_id(as_str(i), lane) for i in reply)
        return ids

    async def schedule(
        self,
        task_id: str,
        due_ms: int,
        data: bytes,
        unique: UniqueLock | None = None,
    ) -> bool:
        """Add a delayed task (replacing one of the same id); True when it is new.

        ``unique``: the lock of a unique task, taken when it is moved.
        """
        keys = self.keys
        lock = unique.encode() if unique else ""
        reply = await self._script(
            "schedule",
            [keys.delayed, keys.delayed_messages, keys.delayed_unique],
            [task_id, due_ms, data, keys.delayed_wake, lock],
        )
        return bool(reply)

    async def delayed_message(self, task_id: str) -> bytes | None:
        reply = await self.transport.execute("HGET", self.keys.delayed_messages, task_id)
        return reply if isinstance(reply, bytes) else None

    async def cancel_delayed(self, task_id: str, lock: tuple[str, str] | None = None) -> bool:
        """Cancel a delayed task; a retry's unique ``lock`` (key, token) is released."""
        keys = self.keys
        reply = await self._script(
            "cancel_delayed",
            [
                keys.delayed,
                keys.delayed_messages,
                keys.delayed_unique,
                *([lock[0]] if lock else []),
            ],
            [task_id, lock[1] if lock else ""],
        )
        return bool(reply)

    # -- consuming --------------------------------------------------------------------------

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

    async def ack(
        self,
        ids: Sequence[str],
        locks: Mapping[str, tuple[str, str]] | None = None,
        moved: Mapping[str, str] | None = None,
        records: Mapping[str, AckRecord] | None = None,
        forget: Mapping[str, str] | None = None,
        slots: Mapping[str, Slot] | None = None,
        *,
        owners: Mapping[str, Delivery],
    ) -> tuple[int, list[str]]:
        """Acknowledge ``ids`` and tell the waiters of their tasks, in one script per 1000;
        return how many were acknowledged, and the ids whose delivery was no longer the
        ending attempt's (``owners[id]``): nothing was written for those.

        Per id, where given: ``locks[id] = (lock key, token)`` is released; ``moved[id]``
        is the task id of a message whose id is not its task's (the where-map forgets
        it, and the waiters hear of the task id); ``records[id]`` is the outcome of a task
        that keeps its result, written with the acknowledgement; ``forget[id]`` is a
        cancelled task id whose cancel mark goes; ``slots[id]`` is the concurrency slot
        it holds, released (and granted to the oldest waiter) with the acknowledgement.
        """
        acked, lost = 0, list[str]()
        for lane, lane_ids in self._by_lane(ids, _same):
            suffix = lane_suffix(lane)
            for consumer, chunk in _by_consumer(lane_ids, owners):
                done, refused = await self._ack_lane(
                    lane, consumer, chunk, owners, locks, moved, records, forget, slots
                )
                acked += done
                lost += (as_str(i) + suffix for i in refused)
        return acked, lost

    async def _ack_lane(
        self,
        lane: str,
        consumer: str,
        chunk: Sequence[str],
        owners: Mapping[str, Delivery],
        locks: Mapping[str, tuple[str, str]] | None,
        moved: Mapping[str, str] | None,
        records: Mapping[str, AckRecord] | None,
        forget: Mapping[str, str] | None,
        slots: Mapping[str, Slot] | None,
    ) -> tuple[int, list[Any]]:
        """One script call: ``chunk`` (at most 1000 ids of ``lane``, pending for
        ``consumer``)."""
        keys = self.keys
        stream_ids = _stream_ids(lane, chunk)
        held = [(n, locks[i]) for n, i in enumerate(chunk, 1) if i in locks] if locks else []
        outcomes = (
            [(n, records[i]) for n, i in enumerate(chunk, 1) if i in records] if records else []
        )
        args: list[Arg] = [self.group, self._delete, keys.done, lane_suffix(lane), consumer]
        args.append(len(chunk))
        for stream_id, i in zip(stream_ids, chunk, strict=True):
            args += [stream_id, owners[i].delivery_count]
        args.append(len(held))
        for n, (_, token) in held:
            args += [n, token]
        pairs = [(n, moved[i]) for n, i in enumerate(chunk, 1) if i in moved] if moved else []
        args += [len(pairs), *(x for pair in pairs for x in pair)]
        gone = [(n, forget[i]) for n, i in enumerate(chunk, 1) if i in forget] if forget else []
        args += [len(gone), *(x for pair in gone for x in pair)]
        args.append(len(outcomes))
        for n, (_, ttl_ms, fields) in outcomes:
            args.append(n)
            if isinstance(fields, bytes):  # a JSON object: stored as it is
                args += [fields, ttl_ms]
                continue
            packed = packed_fields(fields, ttl_ms) if fields else None
            if packed is not None:
                args.append(packed)
            else:
                args += [ttl_ms, len(fields), *(text_field(x) for pair in fields for x in pair)]
        held_slots = (
            [(n, i, slots[i]) for n, i in enumerate(chunk, 1) if i in slots] if slots else []
        )
        slot_keys: list[str] = []
        if held_slots:
            args.append(len(held_slots))
            for n, i, (holders, waiting, limit) in held_slots:
                slot_keys += [holders, waiting]
                args += [n, i, limit]
            slot_keys += [keys.quarantine, keys.stream]
        reply = await self._script(
            "ack",
            [
                keys.lane_stream(lane),
                keys.where,
                keys.cancelled,
                *(key for _, (key, _) in held),
                *(key for _, (key, _, _) in outcomes),
                *slot_keys,
                keys.groups,
            ],
            args,
        )
        return int(reply[0]), list(reply[1] or ())

    async def cancel_task(
        self,
        task_id: str,
        mark_until_ms: int,
        lock: tuple[str, str] | None,
        record: Record | None,
    ) -> str:
        """Cancel ``task_id`` wherever it is (see ``cancel_task.lua``): returns where it was
        cancelled (``delayed``, ``waiting``, ``queued``, ``running``) or ``absent``. ``lock``: its
        unique lock (key, token), released with a delayed or queued task; ``record``: its
        'cancelled' outcome, for a task that keeps its result."""
        keys = self.keys
        ttl, fields = (record[1], record[2]) if record else (0, [])
        reply = await self._script(
            "cancel_task",
            [
                keys.stream,
                keys.delayed,
                keys.delayed_messages,
                keys.delayed_unique,
                keys.where,
                keys.cancelled,
                keys.task(task_id),
                keys.retries,
                keys.retry_messages,
                keys.groups,
                keys.concurrency_waiters,
                *([lock[0]] if lock else []),
            ],
            [
                self.group,
                task_id,
                mark_until_ms,
                keys.cancel_channel,
                keys.done,
                lock[1] if lock else "",
                ttl,
                keys.queue_base,
                keys.queue,
                keys.concurrency_waiting(""),
                *(text_field(x) for pair in fields for x in pair),
            ],
        )
        return as_str(reply)

    async def cancel_marks(self, now_ms: int) -> list[str]:
        """The ids of the tasks whose cancel mark still holds at ``now_ms``."""
        reply = await self.transport.execute("HGETALL", self.keys.cancelled)
        marks = []
        for i in range(0, len(reply or ()), 2):
            until = _int_or_none(reply[i + 1])
            if until is not None and until > now_ms:
                marks.append(as_str(reply[i]))
        return marks

    async def scan_hash(
        self, key: str, cursor: int, count: int
    ) -> tuple[int, list[tuple[str, str]]]:
        """One page of ``HSCAN key cursor COUNT count``: (next cursor, field/value pairs as
        text; 0 when the scan is complete)."""
        reply = await self.transport.execute("HSCAN", key, cursor, "COUNT", count)
        flat = reply[1] or []
        pairs = [(as_str(flat[i]), as_str(flat[i + 1])) for i in range(0, len(flat) - 1, 2)]
        return int(reply[0]), pairs

    async def forget_stale(
        self, now_ms: int, marks: Sequence[str], moved: Sequence[str]
    ) -> tuple[int, int]:
        """Delete the cancel marks of ``marks`` that are past (or garbage), and the
        where-map entries of ``moved`` whose stream entry is gone (see
        ``forget_stale.lua``): (marks deleted, entries deleted)."""
        keys = self.keys
        reply = await self._script(
            "forget_stale",
            [keys.cancelled, keys.where, keys.stream],
            [now_ms, len(marks), *marks, len(moved), *moved],
        )
        return int(reply[0]), int(reply[1])

    def open_cancel_subscriber(self) -> Subscriber:
        """A subscriber of the group's channel of cancelled tasks (their ids)."""
        return self.transport.open_subscriber(self.keys.cancel_channel)

    async def pause(self, now_ms: int, notice: bytes) -> tuple[bool, bytes]:
        """Pause the group (``pause.lua``) and send ``notice`` to its runners: whether this
        call paused it (False: it was paused already), and the pause mark it holds."""
        keys = self.keys
        changed, mark = await self._script(
            "pause", [keys.paused], [now_ms, keys.cancel_channel, notice]
        )
        return bool(changed), mark

    async def resume(self, notice: bytes) -> bool:
        """Resume the group (``resume.lua``) and send ``notice`` to its runners: whether it
        was paused."""
        keys = self.keys
        return bool(await self._script("resume", [keys.paused], [keys.cancel_channel, notice]))

    async def pause_mark(self) -> bytes | None:
        """The group's pause mark as stored; None when the group is not paused.

        Raises:
            RedisCommandError: ``WRONGTYPE``, when the key holds another type.
        """
        reply = await self.transport.execute("GET", self.keys.paused)
        return reply if isinstance(reply, bytes) else None

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
        for chunk in _chunks(starts, MAX_IDS_PER_CALL // 2):
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

    async def retry(
        self,
        message_id: str,
        task_id: str,
        due_ms: int,
        data: bytes,
        record: Record | None = None,
        slot: Slot | None = None,
        *,
        owner: Delivery,
    ) -> bool:
        """Acknowledge a failed message and schedule its next attempt, atomically; update
        the ``record`` of a task that keeps its result (state 'retrying'); release the
        concurrency ``slot`` it holds. False, and nothing written, when the attempt's
        delivery (``owner``) is no longer the pending one."""
        keys = self.keys
        lane, stream_id = split_entry_id(message_id)
        ttl, fields = (record[1], record[2]) if record else (0, [])
        reply = await self._script(
            "retry",
            [
                keys.lane_stream(lane),
                keys.retries,
                keys.retry_messages,
                keys.where,
                record[0] if record else keys.stream,
                keys.groups,
                *((slot[0], slot[1], keys.quarantine, keys.stream) if slot else ()),
            ],
            [
                self.group,
                self._delete,
                stream_id,
                due_ms,
                data,
                task_id,
                keys.delayed_wake,
                ttl,
                owner.consumer,
                owner.delivery_count,
                *(text_field(x) for pair in fields for x in pair),
                *((message_id, slot[2]) if slot else ()),
            ],
        )
        return bool(reply)

    async def dead_letter(
        self,
        message_id: str,
        fields: Sequence[tuple[str, Arg]],
        maxlen: int | None,
        lock: tuple[str, str] | None = None,
        task_id: str | None = None,
        record: Record | None = None,
        slot: Slot | None = None,
        *,
        owner: Delivery,
    ) -> str | None:
        """Acknowledge and copy to the dead-letter stream; release ``lock`` (key, token);
        write the ``record`` of a task that keeps its result; tell the task's waiters;
        release the concurrency ``slot`` it holds. None, and nothing written, when the
        attempt's delivery (``owner``) is no longer the pending one.

        A field's text that cannot be sent as it is (a lone surrogate, in an error message
        say) is written with backslash escapes: the write never fails on it."""
        keys = self.keys
        lane, stream_id = split_entry_id(message_id)
        flat: list[Any] = [text_field(x) for pair in fields for x in pair]
        ttl, outcome = (record[1], record[2]) if record else (0, [])
        reply = await self._script(
            "dead_letter",
            [
                keys.lane_stream(lane),
                keys.dead,
                keys.where,
                keys.cancelled,
                record[0] if record else keys.stream,
                keys.groups,
                *([lock[0]] if lock else [keys.stream] if slot else []),
                *((slot[0], slot[1], keys.quarantine, keys.stream) if slot else ()),
            ],
            [
                self.group,
                self._delete,
                stream_id,
                maxlen or 0,
                lock[1] if lock else "",
                task_id or message_id,
                keys.done,
                ttl,
                owner.consumer,
                owner.delivery_count,
                len(outcome),
                *(text_field(x) for pair in outcome for x in pair),
                *flat,
                *((message_id, slot[2]) if slot else ()),
            ],
        )
        return as_str(reply) if reply else None

    async def admit(
        self,
        message_id: str,
        task_id: str,
        now_ms: float,
        deferred: bytes,
        rate: tuple[str, float, float] | None,
        slot: Slot | None,
        slot_key: str = "",
    ) -> tuple[str, int]:
        """Admit one message of a limited task, or defer it: see :meth:`admit_many`."""
        request = Admit(message_id, task_id, deferred, rate, slot, slot_key)
        return (await self.admit_many([request], now_ms))[0]

    async def admit_many(self, requests: Sequence[Admit], now_ms: float) -> list[tuple[str, int]]:
        """Admit messages of limited tasks, or defer them (``admit.lua``, one call per
        :data:`MAX_ADMITS_PER_CALL`, in order): per message ``("run", 0)``,
        ``("rate", due ms)``, ``("wait", position)`` or ``("lost", 0)``."""
        if not self._multi:
            return await self._admit_lane(DEFAULT_LANE, requests, now_ms)
        verdicts: dict[str, tuple[str, int]] = {}
        for lane, chosen in self._by_lane(requests, lambda r: r.message_id):
            lane_verdicts = await self._admit_lane(lane, chosen, now_ms)
            verdicts.update(zip((r.message_id for r in chosen), lane_verdicts, strict=True))
        return [verdicts[r.message_id] for r in requests]

    async def _admit_lane(
        self, lane: str, requests: Sequence[Admit], now_ms: float
    ) -> list[tuple[str, int]]:
        keys = self.keys
        suffix = lane_suffix(lane)
        verdicts: list[tuple[str, int]] = []
        for chunk in _chunks(requests, MAX_ADMITS_PER_CALL):
            call_keys = [
                keys.lane_stream(lane),
                keys.retries,
                keys.retry_messages,
                keys.where,
                keys.quarantine,
                keys.groups,
                keys.concurrency_keys,
                keys.stream,
            ]
            args: list[Arg] = [self.group, self._delete, repr(now_ms), keys.delayed_wake, suffix]
            for r in chunk:
                rate, slot = r.rate, r.slot
                call_keys += [
                    rate[0] if rate else keys.stream,
                    slot[0] if slot else keys.stream,
                    slot[1] if slot else keys.stream,
                ]
                args += [
                    split_entry_id(r.message_id)[1],
                    r.task_id,
                    r.deferred,
                    repr(rate[1]) if rate else "0",
                    repr(rate[2]) if rate else "0",
                    slot[2] if slot else 0,
                    r.slot_key,
                ]
            reply = await self._script("admit", call_keys, args)
            verdicts += [(as_str(v[0]), int(v[1])) for v in reply]
        return verdicts

    async def concurrency_limits(self, cursor: int, count: int) -> tuple[int, list[str]]:
        """One page of the keys of the concurrency limits in use (``SSCAN``): (next
        cursor, 0 when done; the keys)."""
        reply = await self.transport.execute(
            "SSCAN", self.keys.concurrency_keys, cursor, "COUNT", count
        )
        return int(reply[0]), [as_str(key) for key in reply[1] or ()]

    async def concurrency_usage(self, count: int = 100) -> dict[str, tuple[int, int]]:
        """Up to ``count`` concurrency limits in use: key -> (slots held, waiting); a
        holders or waiting key of another type counts as 0 (the admission script sets it
        aside)."""
        _, limits = await self.concurrency_limits(0, count)
        limits = sorted(limits)[:count]
        if not limits:
            return {}
        keys = self.keys
        commands: list[tuple[Arg, ...]] = []
        for key in limits:
            commands += [
                ("ZCARD", keys.concurrency_holders(key)),
                ("LLEN", keys.concurrency_waiting(key)),
            ]
        replies = await self.transport.pipeline(commands)
        counts = [r if isinstance(r, int) else 0 for r in replies]
        return {key: (counts[2 * i], counts[2 * i + 1]) for i, key in enumerate(limits)}

    async def reconcile_slots(self, key: str, limit: int) -> tuple[int, int, int]:
        """Free the slots of the concurrency limit ``key`` whose holder entry is gone (see
        ``reconcile_slots.lua``), granting them to its waiters when ``limit`` is known
        (> 0): (freed, held now, waiting now)."""
        keys = self.keys
        reply = await self._script(
            "reconcile_slots",
            [
                keys.stream,
                keys.concurrency_keys,
                keys.concurrency_holders(key),
                keys.concurrency_waiting(key),
                keys.where,
                keys.quarantine,
            ],
            [self.group, key, limit],
        )
        return int(reply[0]), int(reply[1]), int(reply[2])

    async def heartbeat(self, consumer: str, ids: Sequence[str]) -> list[str]:
        """Extend the reservations of ``ids``; return those that are no longer ours."""
        lost: list[str] = []
        for lane, lane_ids in self._by_lane(ids, _same):
            stream, suffix = self.keys.lane_stream(lane), lane_suffix(lane)
            for chunk in _chunks(_stream_ids(lane, lane_ids)):
                reply = await self._script("heartbeat", [stream], [self.group, consumer, *chunk])
                lost.extend(as_str(i) + suffix for i in reply)
        return lost

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
            for chunk in _chunks(lane_entries, MAX_IDS_PER_CALL // 2):
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

    # -- leader chores (fenced: ``leader`` runs them only while it leads) --------------------

    async def consumers(self) -> list[tuple[str, int, int]]:
        """(name, pending entries, idle ms) of every consumer of the group, over its lanes
        (pending summed, the shortest idle time)."""
        rows: dict[str, tuple[int, int]] = {}
        for stream in self._streams:
            try:
                reply = await self.transport.execute("XINFO", "CONSUMERS", stream, self.group)
            except RedisCommandError as exc:
                if "NOGROUP" in str(exc) or "no such key" in str(exc):
                    continue
                raise
            for flat in reply or ():
                info = {as_str(flat[i]): flat[i + 1] for i in range(0, len(flat) - 1, 2)}
                name, pending, idle = as_str(info["name"]), int(info["pending"]), int(info["idle"])
                if name in rows:
                    pending, idle = pending + rows[name][0], min(idle, rows[name][1])
                rows[name] = (pending, idle)
        return [(name, pending, idle) for name, (pending, idle) in rows.items()]

    async def trim_finished(self, leader: Leader, before_ms: int, limit: int) -> tuple[int, str]:
        """Trim finished messages with ids below ``before_ms`` (leader only):
        (entries trimmed, the id trimmed below). Undelivered and pending ones stay."""
        trimmed, below = 0, "0-0"
        for lane, stream in zip(self.lanes, self._streams, strict=True):
            reply = await leader.run_fenced(
                SCRIPTS.trim, [stream, self.keys.groups], [before_ms, limit]
            )
            trimmed += int(reply[0])
            if lane == DEFAULT_LANE:
                below = as_str(reply[1])
        return trimmed, below

    def _delayed_keys(self, own: bool) -> tuple[str, str, str]:
        """The delayed set, its messages and its unique hash: the queue's (delayed
        dispatches), or with ``own`` the group's (its retries; the same keys for a group
        reading its own queue)."""
        keys = self.keys
        if own:
            return keys.retries, keys.retry_messages, keys.retry_unique
        return keys.delayed, keys.delayed_messages, keys.delayed_unique

    async def move_due(
        self, leader: Leader, now_ms: int, limit: int, *, own: bool = False
    ) -> tuple[int, float | None, list[str]]:
        """Move up to ``limit`` due tasks: (moved, earliest remaining due ms, due unique ids)
        of the queue's delayed set, or with ``own`` of the group's retries.

        Due unique tasks are left for :meth:`move_unique` (their locks must be in KEYS).
        """
        keys = self.keys
        delayed, messages, unique = self._delayed_keys(own)
        reply = await leader.run_fenced(
            SCRIPTS.move_due,
            [delayed, messages, keys.stream, unique, keys.where],
            [now_ms, limit],
        )
        moved = int(reply[0])
        nxt = float(reply[1]) if reply[1] is not None else None
        return moved, nxt, [as_str(i) for i in reply[2]]

    async def move_unique(
        self, leader: Leader, task_ids: Sequence[str], *, own: bool = False
    ) -> tuple[int, int, list[tuple[str, bytes, str]]]:
        """Move due unique tasks, each taking its lock.

        Returns (moved, dropped because their lock was held, bad): ``bad`` holds (task id,
        stored lock, why it cannot be read) of the tasks whose lock is not what
        :class:`~trunner._wire.keys.UniqueLock` writes; they are not moved (set them aside).
        """
        keys = self.keys
        delayed, messages, unique = self._delayed_keys(own)
        specs = await self.transport.execute("HMGET", unique, *task_ids)
        locks: list[str] = []
        args: list[Arg] = []
        bad: list[tuple[str, bytes, str]] = []
        for task_id, spec in zip(task_ids, specs, strict=True):
            if spec is None:
                continue  # cancelled meanwhile
            try:
                lock = UniqueLock.decode(spec)
            except ValueError as exc:
                bad.append((task_id, spec, f"its unique lock cannot be read: {exc}"))
                continue
            locks.append(lock.key)
            args += [task_id, lock.token, lock.ttl_ms]
        if not locks:
            return 0, 0, bad
        reply = await leader.run_fenced(
            SCRIPTS.move_unique,
            [
                delayed,
                messages,
                keys.stream,
                unique,
                keys.where,
                keys.quarantine,
                *locks,
            ],
            args,
        )
        return int(reply[0]), int(reply[1]), bad

    async def set_aside_delayed(
        self, leader: Leader, task_id: str, record: Sequence[tuple[str, Arg]], maxlen: int
    ) -> bool:
        """Move a delayed task out of the delayed keys into a quarantine record (with its
        message); False when it was no longer delayed."""
        keys = self.keys
        flat: list[Arg] = [x for pair in record for x in pair]
        reply = await leader.run_fenced(
            SCRIPTS.set_aside_delayed,
            [keys.delayed, keys.delayed_messages, keys.delayed_unique, keys.quarantine],
            [task_id, maxlen, *flat],
        )
        return bool(reply)

    async def fire_cron(
        self,
        leader: Leader,
        name: str,
        tick_ms: int,
        data: bytes,
        lock: UniqueLock | None = None,
        task_id: str | None = None,
    ) -> int:
        """Enqueue one tick of a cron schedule unless it was already fired.

        ``lock``: the lock of a unique task; ``task_id``: the tick's (default
        ``cron:<name>:<tick ms>``). Returns 1 when fired, 0 when the tick was already
        fired, -1 when its key was locked (the tick is skipped).
        """
        keys = [
            self.keys.cron,
            self.keys.stream,
            self.keys.where,
            self.keys.quarantine,
            *([lock.key] if lock else []),
        ]
        tick_id = task_id or f"cron:{name}:{tick_ms}"
        args: list[Arg] = [name, tick_ms, data, tick_id]
        args += [lock.token, lock.ttl_ms] if lock else []
        return int(await leader.run_fenced(SCRIPTS.cron_fire, keys, args))

    async def cron_last_fired(self) -> tuple[dict[str, int], list[tuple[str, bytes]]]:
        """The last tick fired per schedule (ms), and the (name, value) of the entries
        that are not a tick (left in place: the next tick fired replaces them)."""
        reply = await self.transport.execute("HGETALL", self.keys.cron)
        fired: dict[str, int] = {}
        bad: list[tuple[str, bytes]] = []
        for i in range(0, len(reply or ()), 2):
            name, value = as_str(reply[i]), reply[i + 1]
            # What cron_fire.lua reads as a tick: ASCII digits, at most 15 (int() also
            # takes ' 7', '+7' and '1_000', which the script does not).
            if value.isdigit() and len(value) <= 15:
                fired[name] = int(value)
            else:
                bad.append((name, value))
        return fired, bad

    def open_done_subscriber(self) -> Subscriber:
        """A subscriber of the group's channel of finished tasks (their ids)."""
        return self.transport.open_subscriber(self.keys.done)

    def open_wake_subscriber(self) -> Subscriber:
        return self.transport.open_subscriber(self.keys.delayed_wake)

    # -- metrics, membership, capacity -----------------------------------------------------

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
        capacity, capacity_version = _int_or_none(value), _int_or_none(version)
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

    # -- dead letters -----------------------------------------------------------------------

    async def replay_dead(
        self, items: Sequence[tuple[str, bytes, UniqueLock | None, str]]
    ) -> list[str | bool | None]:
        """Move dead-letter entries ``(id, message, lock, task id)`` back into the stream,
        atomically; one with a ``lock`` (a unique task's) takes it as it enters, or stays.
        The where-map records the new entry of each task id.

        Returns per entry: its new stream id; None when it is no longer in the dead-letter
        stream; False when its lock is held (it stays in the dead-letter stream).
        """
        results: list[str | bool | None] = []
        for chunk in _chunks(items, MAX_IDS_PER_CALL // 2):
            locks = [lock.key for _, _, lock, _ in chunk if lock is not None]
            args: list[Arg] = []
            for dead_id, data, lock, task_id in chunk:
                args += [dead_id, data, *((lock.token, lock.ttl_ms) if lock else ("", 0))]
                args.append(task_id)
            reply = await self._script(
                "replay_dead",
                [self.keys.dead, self.keys.stream, self.keys.where, self.keys.quarantine, *locks],
                args,
            )
            results.extend(False if r == 0 else as_str(r) if r else None for r in reply)
        return results

    async def quarantine(self, fields: Sequence[tuple[str, Arg]], maxlen: int) -> str:
        """Add a record to the quarantine stream (approximately capped at ``maxlen``); text
        that cannot be sent as it is is written with backslash escapes."""
        flat: list[Any] = [text_field(x) for pair in fields for x in pair]
        reply = await self.transport.execute(
            "XADD", self.keys.quarantine, "MAXLEN", "~", maxlen, "*", *flat
        )
        return as_str(reply)

    async def set_aside_wrong_types(
        self, instance: str, now_ms: int, maxlen: int
    ) -> list[tuple[str, str, str]]:
        """Rename every fixed key holding a value of the wrong type, recording each in the
        quarantine stream: (key, the type it had, its new name) of each (the streams and
        floors of the lanes it knows of included: :meth:`known_lanes`)."""
        keys = self.keys
        types = keys.types()
        for lane in await self.known_lanes():
            types[keys.lane_stream(lane)] = "stream"
            types[keys.lane_floor(lane)] = "string"
        flat: list[str] = []
        for key in types:
            flat += [key, keys.aside(key, now_ms)]
        reply = await self._script(
            "set_aside_keys",
            [keys.quarantine, keys.aside(keys.quarantine, now_ms), *flat],
            [maxlen, instance, now_ms, *types.values()],
        )
        return [
            (as_str(reply[i]), as_str(reply[i + 1]), as_str(reply[i + 2]))
            for i in range(0, len(reply), 3)
        ]

    async def purge_quarantine(self) -> int:
        """Delete the quarantine stream; return how many records it held."""
        replies = await self.transport.pipeline(
            [("XLEN", self.keys.quarantine), ("DEL", self.keys.quarantine)]
        )
        return int(replies[0]) if isinstance(replies[0], int) else 0

    async def delete_dead(self, ids: Sequence[str]) -> int:
        """Delete the dead-letter entries ``ids`` (XDEL, 1000 at a time); return how many
        were there."""
        deleted = 0
        for chunk in _chunks(ids):
            deleted += int(await self.transport.execute("XDEL", self.keys.dead, *chunk))
        if not ids:
            await trio.lowlevel.checkpoint()
        return deleted

    async def purge_dead(self) -> int:
        """Delete the dead-letter stream; return how many entries it held."""
        replies = await self.transport.pipeline([("XLEN", self.keys.dead), ("DEL", self.keys.dead)])
        return int(replies[0]) if isinstance(replies[0], int) else 0
