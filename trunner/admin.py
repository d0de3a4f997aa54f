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
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from ._redis import BadValue, Broker, RawEntry
from ._util import wall_ms
from .errors import RedisCommandError
from .group_stats import GroupStats, InstanceInfo, compute_stats, stats_or_none
from .handles import status_of
from .keys import UniqueLock
from .message import (
    DEFAULT_UNIQUE_FOR,
    MESSAGE_GROWTH,
    NO_SIZE_LIMIT,
    MessageDecodeError,
    decode_message,
    reencode_for_retry,
    stored_headers,
    stored_unique_for,
)
from .quarantine import QuarantineRecord
from .status import TaskStatus

__all__ = [
    "DeadLetter",
    "GroupInfo",
    "ReplayResult",
    "inspect_group",
    "list_dead",
    "read_instances",
    "read_stats",
    "replay_dead",
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
        data = reencode_for_retry(again, 1, max_bytes + MESSAGE_GROWTH)
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
            if not is_entry_id(i):
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
    the stream id of its first message: its dead letter came later)."""
    start, seen = task_id, 0
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
    return InstanceInfo(
        id=instance,
        host=str(details.get("host", "")),
        pid=int(details.get("pid", 0)),
        capacity=int(details.get("capacity", 0)),
        started_at=float(details.get("started_at", 0.0)),
        last_seen=seen / 1000,
        leader=leader,
    )


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
    rows = await broker.live_instances(wall_ms() - int(ttl * 1000))
    return instances_of(rows, await broker.leader_id())[0]


async def read_stats(broker: Broker, ttl: float) -> GroupStats:
    """The group's statistics now, over the current window, from any instance."""
    fields = await broker.read_metrics()
    queue_length = await broker.queue_length()
    instances = await read_instances(broker, ttl)
    previous = stats_or_none(await broker.latest_stats())
    return compute_stats(
        fields, queue_length, instances, time.time(), previous.average if previous else 0.0
    )


async def inspect_group(broker: Broker, instance_ttl: float = 15.0) -> GroupInfo:
    try:
        pending = await broker.pending_by_consumer()
    except RedisCommandError as exc:
        if "NOGROUP" not in str(exc):
            raise
        pending = {}
    instances = await read_instances(broker, instance_ttl)
    return GroupInfo(
        group=broker.group,
        queue_length=await broker.queue_length(),
        pending=pending,
        delayed=await broker.delayed_count(),
        dead_letters=await broker.dead_count(),
        instances=instances,
        leader=await broker.leader_id(),
        capacity=await broker.capacity_decision(),
        stats=stats_or_none(await broker.latest_stats()),
        quarantined=await broker.quarantine_count(),
        running=await running_tasks(broker) if pending else [],
    )


#: How many running tasks ``inspect`` shows.
RUNNING_SHOWN = 20


async def running_tasks(broker: Broker, count: int = RUNNING_SHOWN) -> list[TaskStatus]:
    """The statuses of up to ``count`` tasks delivered and not acknowledged, longest
    first (an entry that cannot be decoded is left out: the runner that reads it deals
    with it)."""
    pending = await broker.pending_entries(count)
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
