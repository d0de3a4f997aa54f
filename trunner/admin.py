"""Inspection and dead-letter administration of a consumer group.

Available on runners and producer-only clients (``trunner inspect`` and ``trunner
dead-letter`` use them).
"""

from __future__ import annotations

import enum
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from ._redis import BadValue, Broker, RawEntry
from ._util import wall_ms
from ._wire.decode import MessageDecodeError, decode_message, stored_headers, stored_unique_for
from ._wire.envelope import NO_SIZE_LIMIT, message_growth, reencode_for_retry
from ._wire.keys import DEFAULT_LANE, UniqueLock, is_lane, is_lane_entry_id, split_entry_id
from ._wire.stats import GroupStats, InstanceInfo, compute_stats, stats_or_none
from .errors import RedisCommandError
from .handles import status_of
from .message import DEFAULT_UNIQUE_FOR
from .pausing import read_paused_since
from .quarantine import QuarantineRecord
from .status import TaskStatus
from .task import TaskRegistry

__all__ = [
    "CronEntry",
    "DeadLetter",
    "DelayedTask",
    "GroupInfo",
    "ReplayResult",
    "cron_entries",
    "dead_ids_of_task",
    "delete_dead",
    "inspect_group",
    "list_dead",
    "list_dead_newest",
    "list_delayed",
    "read_instances",
    "read_stats",
    "replay_dead",
    "unread_lanes",
    "waiting_age",
]


@attrs.frozen
class DeadLetter:
    """One entry of the dead-letter stream: a message given up on, and why.

    [``dead_letters``][trunner.Runner.dead_letters] returns them; ``trunner dead-letter``
    lists them (see [Command line](cli.md)).
    """

    id: str
    """The dead-letter entry's id (give it to ``replay_dead_letters`` to replay it)."""
    task: str
    """The task name; ``""`` when the message could not be decoded."""
    reason: str
    """``max retries exceeded``, ``max retries exceeded (redelivered)``,
    ``unknown task`` or ``undecodable``."""
    error: str
    """The error given to the failed-task handler: ``"<class>: <message>"``."""
    cause: str
    """Its ``__cause__`` (the last attempt's exception), ``"<class>: <message>"``; ``""``
    without one."""
    attempt: int
    """The attempt that was given up."""
    failed_at: float
    """When it was given up, in seconds since the epoch."""
    task_id: str
    """The task's id."""
    message_id: str
    """The stream entry id of the last delivery."""
    consumer: str
    """The consumer that gave it up."""
    payload: bytes = attrs.field(repr=False)
    """The message exactly as it was in the stream (not shown in ``repr``)."""
    headers: Mapping[str, str] = attrs.field(factory=dict, repr=False)
    """The message's headers (see [Middleware and headers](middleware.md#headers));
    empty when it has none or cannot be decoded (not shown in ``repr``)."""


@attrs.frozen
class GroupInfo:
    """A consumer group at a glance, as [``inspect``][trunner.Runner.inspect] returns it
    (and ``trunner inspect`` shows it)."""

    group: str
    """The consumer group."""
    queue_length: int
    """Entries in the group's stream, as [``queue_length``][trunner.Runner.queue_length]
    counts them."""
    pending: Mapping[str, int]
    """Delivered, not yet acknowledged, per consumer."""
    delayed: int
    """Tasks waiting in the delayed set."""
    dead_letters: int
    """Entries in the dead-letter stream."""
    instances: list[InstanceInfo]
    """The live instances."""
    leader: str | None
    """The id of the leadership lease's holder; ``None`` when nobody leads."""
    capacity: Mapping[str, int]
    """The leader's last capacity decision: value, fence, version (empty if none)."""
    stats: GroupStats | None
    """The leader's last published statistics."""
    quarantined: int = 0
    """Records in the quarantine stream: bad data set aside (see
    [Bad data in Redis](reliability.md#bad-data-in-redis))."""
    running: list[TaskStatus] = attrs.field(factory=list)
    """The tasks delivered longest ago and not finished (at most 20): each one's status,
    with the progress it reported."""
    paused_since: float | None = None
    """When the group was paused, in seconds since the epoch; ``None`` when it is not
    paused (see [Pausing a group](pause.md))."""
    queue: str = ""
    """The queue the group reads (its own name, unless it reads another: see
    [Queues and fan-out](queues.md))."""
    concurrency: Mapping[str, tuple[int, int]] = attrs.field(factory=dict)
    """The group's [concurrency limits](limits.md) in use (at most 100): each one's key
    (``<len>:<task>[:<key>]``) -> (slots held, messages waiting)."""
    lanes: Mapping[str, int] = attrs.field(factory=dict)
    """The queue's [priority lanes](lanes.md) (``"default"``, then those its runners
    declared) -> the queue length of each (``queue_length`` is their sum)."""
    unread_lanes: Mapping[str, int] = attrs.field(factory=dict)
    """The lanes of :attr:`lanes` that hold messages while no live instance of the group
    reads them -> their queue length (empty while no instance is live): those messages
    wait until a runner that reads the lane starts."""

    @property
    def paused(self) -> bool:
        """Whether the group is paused: its runners fetch nothing."""
        return self.paused_since is not None


def _text(fields: dict[str, bytes], name: str) -> str:
    return fields.get(name, b"").decode("utf-8", "replace")


def _number(fields: dict[str, bytes], name: str) -> float:
    """A number field of a dead letter; 0 when it holds no finite number (NaN, inf and
    1e400 would fail the int() of an attempt count)."""
    try:
        value = float(fields.get(name, b"0"))
    except ValueError:
        return 0.0
    return value if math.isfinite(value) else 0.0


def dead_letter_of(entry: RawEntry) -> DeadLetter:
    flat = entry.fields or []
    fields = {flat[i].decode("utf-8", "replace"): flat[i + 1] for i in range(0, len(flat) - 1, 2)}
    return DeadLetter(
        id=entry.message_id,
        task=_text(fields, "task"),
        reason=_text(fields, "reason"),
        error=_text(fields, "error"),
        cause=_text(fields, "cause"),
        attempt=int(_number(fields, "attempt")),
        failed_at=_number(fields, "failed_at") / 1000,
        task_id=_text(fields, "task_id"),
        message_id=_text(fields, "message_id"),
        consumer=_text(fields, "consumer"),
        payload=fields.get("payload", b""),
        headers=stored_headers(fields.get("payload", b"")),
    )


async def list_dead(broker: Broker, count: int = 100, start: str = "-") -> list[DeadLetter]:
    return [dead_letter_of(e) for e in await broker.dead_entries(count, start)]


async def list_dead_newest(broker: Broker, count: int = 100, end: str = "+") -> list[DeadLetter]:
    """Up to ``count`` dead letters, newest first, from the id ``end`` down (``(id``
    leaves that id out): one ``XREVRANGE ... COUNT``, whatever the stream's length."""
    return [dead_letter_of(e) for e in await broker.dead_entries_before(count, end)]


#: Dead letters read per round trip when looking through the whole stream.
DEAD_BATCH = 500


async def dead_ids_of_task(broker: Broker, task: str) -> list[str]:
    """The ids of every dead letter of the task named ``task``, oldest first.

    Reads the whole dead-letter stream, :data:`DEAD_BATCH` entries per round trip."""
    found: list[str] = []
    start = "-"
    while batch := await broker.dead_entries(DEAD_BATCH, start):
        for entry in batch:
            if dead_letter_of(entry).task == task:
                found.append(entry.message_id)
        if len(batch) < DEAD_BATCH:
            break
        start = f"({batch[-1].message_id}"
    return found


async def delete_dead(broker: Broker, ids: Sequence[str]) -> int:
    """Delete the dead-letter entries ``ids`` (those that are not entry ids are left
    out); return how many were there."""
    return await broker.delete_dead([i for i in dict.fromkeys(ids) if is_entry_id(i)])


@attrs.frozen
class ReplayResult:
    """What [``replay_dead_letters``][trunner.Runner.replay_dead_letters] did: the new
    stream ids, and why each dead letter that was not replayed was not.

    Unpacks as ``(replayed, list of the ids not replayed)``, as the tuple it replaces.
    """

    replayed: list[str]
    """The stream ids of the replayed messages, in the order of the dead letters."""
    skipped: dict[str, str]
    """Id asked for -> why it was not replayed: its message cannot be decoded, its
    unique key is locked (both stay in the dead-letter stream), it is not (or no longer)
    in the dead-letter stream, it is the task id of a dead letter rather than the dead
    letter's own id (the reason names that one), or it is not an entry id at all."""
    new_ids: dict[str, str] = attrs.field(factory=dict)
    """Dead-letter entry id -> the stream id of its replayed message, for each one
    replayed."""

    def __iter__(self) -> Iterator[Any]:
        return iter((self.replayed, list(self.skipped)))


#: Why a dead letter was not replayed (see :class:`ReplayResult`).
GONE = "not in the dead-letter stream: already replayed, purged, or never dead-lettered"
#: Why an id was not even looked up.
MALFORMED = (
    "not a dead-letter id: ids look like 1712345678901-0 (dead_letters() and "
    "`trunner dead-letter list` show them)"
)
#: How far a task id given in place of a dead-letter id is looked for (entries read).
TASK_ID_SCAN = 10_000

_ENTRY_ID = re.compile(r"(\d{1,20})-(\d{1,20})")


def is_entry_id(text: str) -> bool:
    """Whether ``text`` is a complete stream entry id, ``<ms>-<seq>`` (each < 2**64)."""
    match = _ENTRY_ID.fullmatch(text)
    return match is not None and all(int(part) < 2**64 for part in match.groups())


def _task_id_reason(dead_id: str) -> str:
    return (
        f"this is a task id (what dispatch returns), not a dead-letter id: the dead "
        f"letter of that task is {dead_id}; replay that id"
    )


def _locked(key: str) -> str:
    return (
        f"its unique key {key!r} is locked: a task of that key is queued or running; "
        "it stays in the dead-letter stream"
    )


async def replay_dead(
    broker: Broker,
    ids: Sequence[str] | None = None,
    max_bytes: int = NO_SIZE_LIMIT,
    unique_for: Callable[[str], float | None] = lambda _task: None,
) -> ReplayResult:
    """Put dead letters back in the stream as fresh first attempts (same task id).

    ``ids``: the dead-letter entries to replay; None replays all of them. A message of a
    unique task takes its key's lock again as it enters the stream (in the same script),
    for its ``unique_for`` (from the message; else ``unique_for(task name)``, the
    registry's; else :data:`~trunner.message.DEFAULT_UNIQUE_FOR`): if the key is locked,
    it is not replayed and stays in the dead-letter stream.
    """
    skipped: dict[str, str] = {}
    items: list[tuple[str, bytes, UniqueLock | None, str]] = []
    keys: dict[str, str] = {}
    for entry in await _dead_entries(broker, ids, skipped):
        letter = dead_letter_of(entry)
        try:
            message = decode_message(
                letter.message_id or entry.message_id, [b"payload", letter.payload]
            )
        except MessageDecodeError as exc:
            skipped[entry.message_id] = f"its message cannot be decoded: {exc.reason}"
            continue
        again = attrs.evolve(message, enqueued_at=time.time())
        # As a retry, a replay may grow the message a little: runners allow for it.
        data = reencode_for_retry(
            again, 1, max_bytes + message_growth(broker.keys.group), broker.keys.group
        )
        lock = None
        if message.unique_key is not None and message.unique_token is not None:
            seconds = (
                stored_unique_for(letter.payload)
                or unique_for(message.task_name)
                or DEFAULT_UNIQUE_FOR
            )
            key = broker.keys.unique(message.unique_key)
            lock = UniqueLock(key, message.unique_token, max(1, math.ceil(seconds * 1000)))
            keys[entry.message_id] = message.unique_key
        items.append((entry.message_id, data, lock, message.task_id))
    replayed: list[str] = []
    new_ids: dict[str, str] = {}
    for (dead_id, _, _, _), result in zip(items, await broker.replay_dead(items), strict=True):
        if isinstance(result, str):
            replayed.append(result)
            new_ids[dead_id] = result
        else:
            skipped[dead_id] = GONE if result is None else _locked(keys[dead_id])
    return ReplayResult(replayed, skipped, new_ids)


async def _dead_entries(
    broker: Broker, ids: Sequence[str] | None, skipped: dict[str, str]
) -> list[RawEntry]:
    """The dead-letter entries ``ids`` (all of them for None); those not found go to
    ``skipped``, with why."""
    entries: list[RawEntry] = []
    if ids is not None:
        for i in dict.fromkeys(ids):  # each once, in order
            if not is_entry_id(i) and is_lane_entry_id(i):  # a task id of a lane
                dead_id = await _dead_letter_of_task(broker, i)
                skipped[i] = _task_id_reason(dead_id) if dead_id is not None else GONE
            elif not is_entry_id(i):
                skipped[i] = MALFORMED
            elif (entry := await broker.dead_entry(i)) is not None:
                entries.append(entry)
            elif (dead_id := await _dead_letter_of_task(broker, i)) is not None:
                skipped[i] = _task_id_reason(dead_id)
            else:
                skipped[i] = GONE
        return entries
    start = "-"
    while batch := await broker.dead_entries(500, start):
        fresh = [e for e in batch if e.message_id != start]
        if not fresh:
            break
        entries.extend(fresh)
        start = fresh[-1].message_id
    return entries


async def _dead_letter_of_task(broker: Broker, task_id: str) -> str | None:
    """The id of a dead letter of task ``task_id``, if one is found among the
    :data:`TASK_ID_SCAN` dead letters written from the task's dispatch on (a task id is
    the stream id of its first message, of a lane or not: its dead letter came later)."""
    start, seen = split_entry_id(task_id)[1], 0
    while seen < TASK_ID_SCAN and (batch := await broker.dead_entries(500, start)):
        fresh = [e for e in batch if e.message_id != start]
        if not fresh:
            break
        for entry in fresh:
            if dead_letter_of(entry).task_id == task_id:
                return entry.message_id
        seen += len(fresh)
        start = fresh[-1].message_id
    return None


def _instance(instance: str, seen: float, info: str | None, leader: bool) -> InstanceInfo:
    """An instance from its membership row; ValueError (or TypeError, OverflowError) if its
    details are not what the reporter writes."""
    details = json.loads(info) if info else {}
    if not isinstance(details, dict):
        raise ValueError(f"not a JSON object: {info!r:.200}")
    lanes = details.get("lanes", [DEFAULT_LANE])
    if not isinstance(lanes, list) or not all(isinstance(n, str) and is_lane(n) for n in lanes):
        raise ValueError(f"lanes are not a list of lane names: {lanes!r:.200}")
    return InstanceInfo(
        id=instance,
        host=str(details.get("host", "")),
        pid=int(details.get("pid", 0)),
        capacity=int(details.get("capacity", 0)),
        started_at=float(details.get("started_at", 0.0)),
        last_seen=seen / 1000,
        leader=leader,
        lanes=tuple(lanes),
    )


def unread_lanes(lengths: Mapping[str, int], read: Iterable[str]) -> dict[str, int]:
    """The lanes of ``lengths`` (lane -> queue length) that hold messages and are not
    among the lanes ``read`` (by the live instances of the group): their messages wait
    until a runner that reads the lane starts."""
    read = set(read)
    return {lane: n for lane, n in lengths.items() if n > 0 and lane not in read}


def instances_of(
    rows: Sequence[tuple[str, float, str | None]], leader: str | None
) -> tuple[list[InstanceInfo], list[BadValue]]:
    """The live instances, sorted by id; an instance whose details cannot be read is
    listed with none (host, pid, capacity unknown) and returned apart as bad too."""
    out, bad = [], []
    for instance, seen, info in rows:
        try:
            out.append(_instance(instance, seen, info, instance == leader))
        except (ValueError, TypeError, OverflowError, RecursionError) as exc:
            # OverflowError: a number JSON reads as infinity (1e400) is no pid or capacity.
            bad.append((instance, (info or "").encode("utf-8", "surrogateescape"), str(exc)))
            out.append(_instance(instance, seen, None, instance == leader))
    return sorted(out, key=lambda i: i.id), bad


async def read_instances(broker: Broker, ttl: float) -> list[InstanceInfo]:
    """The group's live instances (seen within ``ttl``), and which one leads."""
    now_ms = wall_ms()
    rows = await broker.live_instances(now_ms - int(ttl * 1000), now_ms)
    return instances_of(rows, await broker.leader_id())[0]


async def read_stats(broker: Broker, ttl: float) -> GroupStats:
    """The group's statistics now, over the current window, from any instance."""
    fields = await broker.read_metrics()
    queue_length = await broker.queue_length()
    instances = await read_instances(broker, ttl)
    previous = stats_or_none(await broker.latest_stats())
    paused = await read_paused_since(broker) is not None
    average = previous.average if previous else 0.0
    return compute_stats(fields, queue_length, instances, time.time(), average, paused=paused)


async def inspect_group(broker: Broker, instance_ttl: float = 15.0) -> GroupInfo:
    lanes = await broker.known_lanes()  # read once for every count below
    try:
        pending = await broker.pending_by_consumer(lanes)
    except RedisCommandError as exc:
        if "NOGROUP" not in str(exc):
            raise
        pending = {}
    instances = await read_instances(broker, instance_ttl)
    lengths = await broker.lane_lengths(lanes)
    return GroupInfo(
        group=broker.group,
        queue_length=sum(lengths.values()),
        pending=pending,
        delayed=await broker.delayed_count(),
        dead_letters=await broker.dead_count(),
        instances=instances,
        leader=await broker.leader_id(),
        capacity=await broker.capacity_decision(),
        stats=stats_or_none(await broker.latest_stats()),
        quarantined=await broker.quarantine_count(),
        running=await running_tasks(broker, lanes=lanes) if pending else [],
        paused_since=await read_paused_since(broker),
        queue=broker.keys.queue,
        concurrency=await broker.concurrency_usage(),
        lanes=lengths,
        unread_lanes=unread_lanes(lengths, (n for i in instances for n in i.lanes))
        if instances
        else {},
    )


#: How many running tasks ``inspect`` shows.
RUNNING_SHOWN = 20


async def running_tasks(
    broker: Broker, count: int = RUNNING_SHOWN, lanes: Sequence[str] | None = None
) -> list[TaskStatus]:
    """The statuses of up to ``count`` tasks delivered and not acknowledged, longest
    first in each lane (of ``lanes``, by default all it knows of; an entry that cannot be
    decoded is left out: the runner that reads it deals with it)."""
    pending = await broker.pending_entries(count, lanes)
    statuses = []
    for (entry_id, _), entry in zip(
        pending, await broker.entries([i for i, _ in pending]), strict=True
    ):
        if entry is None:
            continue
        try:
            task_id = decode_message(entry_id, entry.fields or []).task_id
        except MessageDecodeError:
            continue
        statuses.append(status_of(task_id, await broker.task_look(task_id)))
    return statuses


async def list_quarantined(
    broker: Broker, count: int = 100, start: str = "-"
) -> list[QuarantineRecord]:
    """Up to ``count`` quarantine records, oldest first, from record id ``start``."""
    entries = await broker.quarantine_entries(count, start)
    return [QuarantineRecord.from_fields(e.message_id, _pairs(e.fields)) for e in entries]


def _pairs(flat: list[bytes] | None) -> dict[bytes, bytes]:
    flat = flat or []
    return {flat[i]: flat[i + 1] for i in range(0, len(flat) - 1, 2)}


def as_dict(value: Any) -> Any:
    """A JSON-ready form of the values above (bytes as text, enums as their values)."""
    return attrs.asdict(value, value_serializer=_json_ready)


def _json_ready(_inst: Any, _field: Any, value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):  # read-only headers
        return dict(value)
    return value


@attrs.frozen
class DelayedTask:
    """A task waiting in the delayed set (a delayed dispatch, a scheduled time, or a
    retry), as [``delayed_tasks``][trunner.Runner.delayed_tasks] lists it."""

    id: str
    """Its id in the delayed set: the task id (give it to ``handle(id).cancel()``)."""
    task: str
    """The task name; ``""`` when its message cannot be decoded (or is missing)."""
    due_at: float
    """When it is due, in seconds since the epoch."""
    attempt: int
    """The attempt it will be (above 1 for a scheduled retry); 0 when undecodable."""
    enqueued_at: float
    """When it was first dispatched (seconds since the epoch); 0.0 when undecodable."""
    problem: str = ""
    """Why its message cannot be read; ``""`` when it can."""


def _delayed(task_id: str, due_ms: float, data: bytes | None) -> DelayedTask:
    due = due_ms / 1000 if math.isfinite(due_ms) else 0.0
    if data is None:
        return DelayedTask(task_id, "", due, 0, 0.0, "its message is missing")
    try:
        message = decode_message(task_id, [b"payload", data])
    except MessageDecodeError as exc:
        return DelayedTask(task_id, "", due, 0, 0.0, f"undecodable: {exc.reason}")
    return DelayedTask(task_id, message.task_name, due, message.attempt, message.enqueued_at)


async def list_delayed(broker: Broker, count: int = 50, offset: int = 0) -> list[DelayedTask]:
    """Up to ``count`` delayed tasks, soonest due first, from position ``offset`` (two
    commands, bounded by ``count``)."""
    return [_delayed(*row) for row in await broker.delayed_entries(count, offset)]


@attrs.frozen
class CronEntry:
    """A cron schedule of the group, as [``cron_entries``][trunner.Runner.cron_entries]
    lists it: what the registry says of it, and when the group last fired it."""

    name: str
    """The schedule's name."""
    expression: str
    """Its cron expression; ``""`` when the registry given does not know it."""
    task: str
    """The task it runs; ``""`` when the registry given does not know it."""
    timezone: str
    """The time zone its ticks are computed in; ``""`` when unknown."""
    last_fired_at: float | None
    """When the group last fired a tick of it (seconds since the epoch); None if never
    (or if what Redis holds is not a tick)."""
    next_fire_at: float | None
    """Its next tick after now; None when the registry does not know it."""


async def cron_entries(broker: Broker, registry: TaskRegistry | None) -> list[CronEntry]:
    """The schedules of ``registry`` (in its order), then the names Redis holds a last
    tick of that the registry does not know, by name."""
    fired, bad = await broker.cron_last_fired()
    now = time.time()
    entries = []
    known = registry.crons if registry is not None else []
    for schedule in known:
        try:
            upcoming: float | None = schedule.next_tick(now)
        except ValueError:
            upcoming = None
        last = fired.get(schedule.name)
        entries.append(
            CronEntry(
                schedule.name,
                schedule.expression,
                schedule.task_name,
                schedule.timezone,
                last / 1000 if last is not None else None,
                upcoming,
            )
        )
    names = {s.name for s in known}
    others = sorted({*fired, *(name for name, _ in bad)} - names)
    for name in others:
        last = fired.get(name)
        entries.append(CronEntry(name, "", "", "", last / 1000 if last else None, None))
    return entries


async def waiting_age(broker: Broker) -> float | None:
    """How long the oldest message not yet delivered to the group has waited, in seconds
    (from its stream id's time: for a delayed task or a retry, since it was moved into
    the stream), over its lanes; None when no message waits. Two round trips and one per
    lane, whatever the backlog."""
    try:
        progress = await broker.progress(0)
    except RedisCommandError:
        return None
    oldest: int | None = None
    for lane, last in progress.last_by_lane.items():
        if last is None:
            continue
        head = await broker.undelivered(last, 1, lane)
        if not head:
            continue
        try:
            at_ms = int(split_entry_id(head[0].message_id)[1].split("-", 1)[0])
        except ValueError:
            continue
        oldest = at_ms if oldest is None else min(oldest, at_ms)
    return None if oldest is None else max(0.0, (wall_ms() - oldest) / 1000)
