"""Runner configuration: one frozen, validated value object."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs

from . import _validate as v
from .group_stats import GroupStats
from .message import DEFAULT_MAX_PAYLOAD_BYTES

if TYPE_CHECKING:
    from .message import TaskMessage

__all__ = ["FailedTaskHandler", "LongQueueHook", "RunnerConfig"]

#: ``async def handler(message, error)``: runs when a task is given up on (see the docs).
FailedTaskHandler = Callable[["TaskMessage", BaseException], Awaitable[Any]]
#: ``async def hook(stats)``: the leader calls it when the predicted wait is too long.
LongQueueHook = Callable[[GroupStats], Awaitable[Any]]


@attrs.frozen(kw_only=True)
class RunnerConfig:
    """How one runner instance of a consumer group behaves.

    Every value is checked when the object is built; a wrong one raises ``TypeError`` or
    ``ValueError`` naming the field. Durations are in seconds.
    """

    consumer_group: str = attrs.field(validator=v.name)
    """The consumer group: every runner of one group shares its stream and its work."""

    num_workers: int = attrs.field(default=10, validator=v.positive_int)
    """How many tasks this instance runs at once."""

    num_fetchers: int = attrs.field(default=1, validator=v.positive_int)
    """How many concurrent XREADGROUP loops feed the pool (each has its own connection)."""

    batch_size: int = attrs.field(default=10, validator=v.positive_int)
    """The most messages one read takes (never more than the free worker slots)."""

    block_duration: float = attrs.field(default=5.0, validator=v.positive_number)
    """How long one XREADGROUP waits for new messages before it loops."""

    reclaim_delay: float = attrs.field(default=300.0, validator=v.positive_number)
    """A fetched message idle this long (its consumer died) is reclaimed by another one.

    Must be the same on every instance of the group.
    """

    reclaim_interval: float = attrs.field(default=1.0, validator=v.positive_number)
    """How often this instance looks for abandoned or released messages to reclaim."""

    delete_on_ack: bool = attrs.field(default=True, validator=v.boolean)
    """Delete a message from the stream (XDEL) when it is acknowledged."""

    drain_timeout: float = attrs.field(default=30.0, validator=v.non_negative_number)
    """On shutdown, how long running tasks may take to finish before they are cancelled."""

    cancel_grace: float = attrs.field(default=5.0, validator=v.non_negative_number)
    """After ``drain_timeout``, how long cancelled tasks may take to unwind. A task still
    running then (it ignores cancellation) is abandoned: its message is released, and
    ``open_runner`` returns; so leaving it takes at most ``drain_timeout + cancel_grace``
    plus the bounded clean-up steps."""

    prefix: str = attrs.field(default="trunner", validator=v.name)
    """Namespace of every key, so environments can share one Redis."""

    failed_task_handler: FailedTaskHandler | None = attrs.field(
        default=None, validator=v.optional_async_callable
    )
    """``async def handler(message, error)``, run before a message is dead-lettered."""

    host: str | None = attrs.field(default=None, validator=v.optional_name)
    """This instance's host name in its consumer name (default: the machine's host name)."""

    consumer_name: str | None = attrs.field(default=None, validator=v.optional_name)
    """This instance's consumer name (default: ``host:pid:random``). Must be unique."""

    connect_timeout: float = attrs.field(default=5.0, validator=v.positive_number)
    """Bound on connecting to Redis at start; ``open_runner`` fails after it."""

    command_timeout: float = attrs.field(default=10.0, validator=v.positive_number)
    """A Redis command without a reply for this long fails (its connection is dropped);
    blocking reads get ``block_duration`` more. Guards against half-open connections."""

    max_payload_bytes: int = attrs.field(
        default=DEFAULT_MAX_PAYLOAD_BYTES, validator=v.positive_int
    )
    """The largest encoded task message ``dispatch`` accepts."""

    dead_letter_maxlen: int | None = attrs.field(default=100_000, validator=v.optional_positive_int)
    """Approximate cap of the dead-letter stream (oldest entries are trimmed); None: no cap."""

    ack_batch_size: int = attrs.field(default=100, validator=v.positive_int)
    """Acknowledgements are flushed when this many are buffered ..."""

    ack_flush_interval: float = attrs.field(default=0.005, validator=v.positive_number)
    """... or this long after the first one was buffered, whichever comes first."""

    max_connections: int = attrs.field(default=20, validator=v.positive_int)
    """Size of the connection pool for control traffic (blocking reads have their own)."""

    min_workers: int | None = attrs.field(default=None, validator=v.optional_positive_int)
    """Capacity floor when the leader decides capacity (default: ``num_workers``)."""

    max_workers: int | None = attrs.field(default=None, validator=v.optional_positive_int)
    """Capacity ceiling when the leader decides capacity (default: ``num_workers``)."""

    long_queue_threshold: float | None = attrs.field(
        default=None, validator=v.optional_positive_number
    )
    """Predicted wait (seconds) above which ``long_queue_hook`` is called, and the target
    of capacity decisions when ``min_workers < max_workers``."""

    long_queue_hook: LongQueueHook | None = attrs.field(
        default=None, validator=v.optional_async_callable
    )
    """``async def hook(stats)``: called by the leader when the predicted wait is too long."""

    stats_interval: float | None = attrs.field(default=None, validator=v.optional_positive_number)
    """How often the leader aggregates (default: ``long_queue_threshold / 2``, else 60 s)."""

    report_interval: float = attrs.field(default=1.0, validator=v.positive_number)
    """How often each instance reports its timings and membership and reads its capacity."""

    instance_ttl: float = attrs.field(default=15.0, validator=v.positive_number)
    """An instance that has not reported for this long counts as gone."""

    leader_ttl: float = attrs.field(default=5.0, validator=v.positive_number)
    """Time-to-live of the leadership lease; a crashed leader is replaced after it."""

    leader_wait: float = attrs.field(default=6.0, validator=v.positive_number)
    """How often followers try to take the lease (at once when a leader releases it)."""

    leader_jitter: float = attrs.field(default=0.005, validator=v.non_negative_number)
    """Random extra delay of each renewal, after ``leader_ttl / 2``."""

    janitor_interval: float | None = attrs.field(default=60.0, validator=v.optional_positive_number)
    """How often the leader removes the consumers of instances that are gone (and trims
    the stream, see ``stream_retention``); None: never."""

    stream_retention: float | None = attrs.field(
        default=24 * 3600.0, validator=v.optional_positive_number
    )
    """With ``delete_on_ack=False``: how long finished messages stay in the stream before
    the janitor trims them (seconds); None: for ever. Messages not yet delivered or still
    pending are never trimmed."""

    def __attrs_post_init__(self) -> None:
        if self.consumer_name is not None and self.consumer_name.startswith("trunner:"):
            raise ValueError("consumer_name must not start with 'trunner:' (reserved)")
        low, high = self.worker_bounds
        if not low <= self.num_workers <= high:
            raise ValueError(
                f"num_workers ({self.num_workers}) must lie within min_workers ({low}) and "
                f"max_workers ({high})"
            )
        if low != high and self.long_queue_threshold is None:
            raise ValueError(
                "min_workers < max_workers needs long_queue_threshold: the leader sizes "
                "the pools so that the predicted wait meets it"
            )
        if self.instance_ttl <= self.report_interval:
            raise ValueError(
                f"instance_ttl ({self.instance_ttl}) must be longer than report_interval "
                f"({self.report_interval})"
            )

    @property
    def worker_bounds(self) -> tuple[int, int]:
        """(min_workers, max_workers), each defaulting to num_workers."""
        low = self.min_workers if self.min_workers is not None else self.num_workers
        high = self.max_workers if self.max_workers is not None else self.num_workers
        return low, high
