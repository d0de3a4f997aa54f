"""What an inspection of a group reads from Redis: its values, and their decoders from
the stored rows (no I/O: the queries that read the rows are ``trunner._producer.admin``).

The values are public through ``trunner.admin`` and ``trunner``.
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import attrs

from .._wire.decode import MessageDecodeError, decode_message, stored_headers
from ..status import TaskStatus
from .names import DEFAULT_LANE, is_lane
from .stats import GroupStats, InstanceInfo

__all__ = [
    "CronEntry",
    "DeadLetter",
    "DelayedTask",
    "GroupInfo",
    "ReplayResult",
    "as_dict",
    "dead_letter_of",
    "delayed_of",
    "instances_of",
    "is_entry_id",
    "unread_lanes",
]


class StoredEntry(Protocol):
    """A stream entry as read: its id and its flat list of fields and values."""

    @property
    def message_id(self) -> str: ...

    @property
    def fields(self) -> list[bytes] | None: ...


@attrs.frozen
class DeadLetter:
    """One entry of the dead-letter stream: a message given up on, and why.

    [``dead_letters``][trunner.admin.Admin.dead_letters] returns them; ``trunner dead-letter``
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
    """A consumer group at a glance, as [``inspect``][trunner.admin.Admin.inspect] returns it
    (and ``trunner inspect`` shows it)."""

    group: str
    """The consumer group."""
    queue_length: int
    """Entries in the group's stream, as [``queue_length``][trunner.admin.Admin.queue_length]
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
    workflows: int = 0
    """The group's live [workflows](workflows.md): dispatched, not settled
    ([``workflows``][trunner.admin.Admin.workflows] lists them)."""
    oldest_workflow_at: float | None = None
    """When the oldest live workflow was dispatched (seconds since the epoch); None
    without one."""

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


def dead_letter_of(entry: StoredEntry) -> DeadLetter:
    """A dead letter from its stream entry (a field it lacks, or that holds no number,
    reads as empty or 0)."""
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


@attrs.frozen
class ReplayResult:
    """What [``replay_dead_letters``][trunner.admin.Admin.replay_dead_letters] did: the new
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

_ENTRY_ID = re.compile(r"(\d{1,20})-(\d{1,20})")


def is_entry_id(text: str) -> bool:
    """Whether ``text`` is a complete stream entry id, ``<ms>-<seq>`` (each < 2**64)."""
    match = _ENTRY_ID.fullmatch(text)
    return match is not None and all(int(part) < 2**64 for part in match.groups())


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
) -> tuple[list[InstanceInfo], list[tuple[str, bytes, str]]]:
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
    retry), as [``delayed_tasks``][trunner.admin.Admin.delayed_tasks] lists it."""

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


def delayed_of(task_id: str, due_ms: float, data: bytes | None) -> DelayedTask:
    due = due_ms / 1000 if math.isfinite(due_ms) else 0.0
    if data is None:
        return DelayedTask(task_id, "", due, 0, 0.0, "its message is missing")
    try:
        message = decode_message(task_id, [b"payload", data])
    except MessageDecodeError as exc:
        return DelayedTask(task_id, "", due, 0, 0.0, f"undecodable: {exc.reason}")
    return DelayedTask(task_id, message.task_name, due, message.attempt, message.enqueued_at)


@attrs.frozen
class CronEntry:
    """A cron schedule of the group, as [``cron_entries``][trunner.admin.Admin.cron_entries]
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
