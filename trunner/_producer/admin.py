"""The queries of a group's inspection and administration: each reads or changes the
group through its broker and returns the values of ``trunner._wire.inspection``."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import attrs

from .._redis import Broker, RawEntry
from .._util import wall_ms
from .._waiting.protocol import status_of
from .._wire.decode import MessageDecodeError, decode_message, stored_unique_for
from .._wire.envelope import NO_SIZE_LIMIT, message_growth, reencode_for_retry
from .._wire.inspection import (
    GONE,
    MALFORMED,
    CronEntry,
    DeadLetter,
    DelayedTask,
    GroupInfo,
    ReplayResult,
    dead_letter_of,
    delayed_of,
    instances_of,
    is_entry_id,
    unread_lanes,
)
from .._wire.keys import UniqueLock
from .._wire.message import DEFAULT_UNIQUE_FOR
from .._wire.names import is_lane_entry_id, split_entry_id
from .._wire.quarantine import QuarantineRecord
from .._wire.stats import GroupStats, InstanceInfo, compute_stats, stats_or_none
from ..errors import RedisCommandError
from ..registry import TaskRegistry
from ..status import TaskStatus
from .workflow_views import oldest_workflow

__all__ = [
    "cron_entries",
    "dead_ids_of_task",
    "delete_dead",
    "inspect_group",
    "list_dead",
    "list_dead_newest",
    "list_delayed",
    "list_quarantined",
    "read_instances",
    "read_stats",
    "replay_dead",
    "running_tasks",
    "waiting_age",
]


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


#: How far a task id given in place of a dead-letter id is looked for (entries read).
TASK_ID_SCAN = 10_000


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
    start, seen, first = split_entry_id(task_id)[1], 0, True
    while seen < TASK_ID_SCAN and (batch := await broker.dead_entries(500, start)):
        # The first read is inclusive: a dead letter written in the millisecond of the
        # dispatch may have the very id of the task's message (another stream's counter).
        fresh = batch if first else [e for e in batch if e.message_id != start]
        first = False
        if not fresh:
            break
        for entry in fresh:
            if dead_letter_of(entry).task_id == task_id:
                return entry.message_id
        seen += len(fresh)
        start = fresh[-1].message_id
    return None


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
    paused = await broker.paused_since() is not None
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
    workflows, oldest_workflow_at = await oldest_workflow(broker)
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
        paused_since=await broker.paused_since(),
        queue=broker.keys.queue,
        concurrency=await broker.concurrency_usage(),
        lanes=lengths,
        unread_lanes=unread_lanes(lengths, (n for i in instances for n in i.lanes))
        if instances
        else {},
        workflows=workflows,
        oldest_workflow_at=oldest_workflow_at,
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


async def list_delayed(broker: Broker, count: int = 50, offset: int = 0) -> list[DelayedTask]:
    """Up to ``count`` delayed tasks, soonest due first, from position ``offset`` (two
    commands, bounded by ``count``)."""
    return [delayed_of(*row) for row in await broker.delayed_entries(count, offset)]


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
