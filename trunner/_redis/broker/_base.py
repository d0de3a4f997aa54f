"""What every part of the broker stands on: its transport, the group's keys, script calls
by name, ids by lane, and the values its calls take and give."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

import attrs

from ..._wire.keys import Keys
from ..._wire.names import DEFAULT_LANE, split_entry_id
from ..scripts import SCRIPTS, Script
from ..transports.base import Arg, Transport

__all__ = [
    "MAX_ADMITS_PER_CALL",
    "MAX_AHEAD_MS",
    "MAX_IDS_PER_CALL",
    "RELEASED_IDLE_MS",
    "AckRecord",
    "Admit",
    "BadValue",
    "BrokerBase",
    "Delivery",
    "Leader",
    "Owner",
    "Record",
    "Slot",
    "chunks",
    "int_or_none",
    "lane_stream_ids",
    "same_id",
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


def chunks(items: Sequence[Any], size: int = MAX_IDS_PER_CALL) -> Iterable[Sequence[Any]]:
    """``items`` in slices of at most ``size``, one script call each."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


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


def same_id(message_id: str) -> str:
    return message_id


def lane_stream_ids(lane: str, ids: Sequence[str]) -> Sequence[str]:
    """The stream ids of trunner's entry ids ``ids`` of ``lane``."""
    return ids if lane == DEFAULT_LANE else [split_entry_id(i)[1] for i in ids]


def int_or_none(raw: Any) -> int | None:
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None


class BrokerBase:
    """The group ``keys.group`` on ``transport``, reading ``lanes`` (highest priority
    first): what each concern of :class:`~trunner._redis.broker.Broker` works with."""

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
