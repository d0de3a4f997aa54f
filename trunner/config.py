"""Runner configuration: one frozen, validated value object."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from . import _validate as v
from ._wire.envelope import DEFAULT_MAX_PAYLOAD_BYTES
from ._wire.names import DEFAULT_LANE, check_lane
from ._wire.stats import GroupStats
from .middleware import Middleware, check_middleware

if TYPE_CHECKING:
    from ._wire.message import TaskMessage

__all__ = ["MAX_LANES", "MAX_LANE_WEIGHT", "FailedTaskHandler", "LongQueueHook", "RunnerConfig"]

FailedTaskHandler = Callable[["TaskMessage", BaseException], Awaitable[Any]]
"""The type of [``RunnerConfig.failed_task_handler``][trunner.RunnerConfig.failed_task_handler]:
``async def handler(message, error)``.

It runs when a message is given up on (see [Giving up](concepts.md#giving-up)), before
the message is moved to the dead-letter stream. ``error`` is
[``MaxRetryExceeded``][trunner.MaxRetryExceeded], [``TaskNotFound``][trunner.TaskNotFound]
or [``InvalidMessage``][trunner.errors.InvalidMessage]. The return value is ignored. If the
handler raises, the message is not dead-lettered: it stays pending for a later delivery.
"""

LongQueueHook = Callable[[GroupStats], Awaitable[Any]]
"""The type of [``RunnerConfig.long_queue_hook``][trunner.RunnerConfig.long_queue_hook]:
``async def hook(stats)``.

The leader calls it with the window's [``GroupStats``][trunner.admin.GroupStats] when their
``predicted_wait`` exceeds ``long_queue_threshold``. The return value is ignored; an
exception is reported through ``runner.errors()`` and does not stop the leader.
"""


#: The most lanes one runner reads.
MAX_LANES = 16
#: The largest weight of a lane.
MAX_LANE_WEIGHT = 1000


def _lanes(value: Any) -> tuple[tuple[str, int], ...]:
    """``RunnerConfig.lanes`` as (name, weight) pairs, highest priority first."""
    if value is None:
        return ((DEFAULT_LANE, 1),)
    if isinstance(value, str) or not isinstance(value, Mapping | list | tuple):
        raise TypeError(
            "lanes must be a dict of lane name -> weight, or a list of lane names or of "
            f"(name, weight) pairs, got {type(value).__name__}"
        )
    if isinstance(value, Mapping):
        pairs = list(value.items())
    else:  # names, or (name, weight) pairs (what this returns: attrs.evolve gives it back)
        pairs = [
            (n[0], n[1]) if isinstance(n, tuple | list) and len(n) == 2 else (n, 1) for n in value
        ]
    if not 1 <= len(pairs) <= MAX_LANES:
        raise ValueError(f"lanes must name 1 to {MAX_LANES} lanes, got {len(pairs)}")
    seen: set[str] = set()
    for name, weight in pairs:
        check_lane(name, "RunnerConfig.lanes: each lane")
        if name in seen:
            raise ValueError(f"RunnerConfig.lanes names the lane {name!r} twice")
        seen.add(name)
        if not isinstance(weight, int) or isinstance(weight, bool):
            raise TypeError(f"the weight of lane {name!r} must be an int, got {weight!r:.40}")
        if not 1 <= weight <= MAX_LANE_WEIGHT:
            raise ValueError(
                f"the weight of lane {name!r} must be 1 to {MAX_LANE_WEIGHT}, got {weight}"
            )
    if DEFAULT_LANE not in seen:
        raise ValueError(
            f"lanes must include {DEFAULT_LANE!r}: tasks dispatched without a priority go there"
        )
    return tuple(pairs)


@attrs.frozen(kw_only=True)
class RunnerConfig:
    """How one runner instance of a consumer group behaves.

    Keyword arguments only; ``consumer_group`` is required. Every value is checked when the
    object is built: a wrong type raises ``TypeError`` and an out-of-range value
    ``ValueError``, both naming the field. To change a value, build a new object with
    ``attrs.evolve(config, num_workers=50)``, which checks the values again. Durations are
    in seconds, as ``int`` or ``float`` (not ``bool``). A *name* is a non-empty string
    without ``{``, ``}`` or whitespace.

    Raises:
        TypeError: A value of the wrong type.
        ValueError: A value out of range; ``consumer_name`` starting with ``trunner:``;
            ``num_workers`` outside ``min_workers`` .. ``max_workers``;
            ``min_workers < max_workers`` without ``long_queue_threshold``; or
            ``instance_ttl`` not longer than ``report_interval``.
    """

    consumer_group: str = attrs.field(validator=v.name)
    """The consumer group (a name): every runner of one group shares its stream and its
    work. Required."""

    queue: str | None = attrs.field(default=None, validator=v.optional_name)
    """The queue (a name) the group reads; ``None`` (the default): the queue of the
    group's own name, with the key layout trunner always had. Several groups reading one
    queue each get every message once (fan-out): see [Queues and fan-out](queues.md)."""

    lanes: tuple[tuple[str, int], ...] = attrs.field(default=None, converter=_lanes)
    """The priority lanes this runner reads: a dict of lane name -> weight (an int from 1
    to 1000), highest priority first, or a list of lane names (or of (name, weight)
    pairs); kept as (name, weight) pairs. ``None`` (the default): the one lane
    ``"default"``. It must include ``"default"``, where tasks dispatched without a
    priority go. Every runner of a group should read the same lanes. See
    [Priority lanes](lanes.md)."""

    strict_lanes: bool = attrs.field(default=False, validator=v.boolean)
    """Serve the lanes in strict priority order: a lane is read only while every lane
    before it is empty. ``False`` (the default): by weight, each read dividing the free
    workers among the lanes by weight, so that no lane starves."""

    num_workers: int = attrs.field(default=10, validator=v.positive_int)
    """How many tasks this instance runs at once (an int >= 1)."""

    max_threads: int | None = attrs.field(default=None, validator=v.optional_positive_int)
    """How many worker threads run the bodies of plain ``def`` tasks at once (an int >= 1),
    under a limiter of their own, apart from the runner's own threads. A thread abandoned
    by its attempt's timeout or cancellation counts until it returns. ``None`` (the
    default): ``num_workers``. See
    [Blocking and CPU-bound tasks](blocking-and-cpu-bound-tasks.md)."""

    max_processes: int | None = attrs.field(default=None, validator=v.optional_positive_int)
    """How many worker processes run the bodies of ``run_in="process"`` tasks at once (an
    int >= 1), under a limiter of their own. ``None`` (the default): one per core this
    process may run on (its CPU set, else every core of the machine). See
    [Blocking and CPU-bound tasks](blocking-and-cpu-bound-tasks.md)."""

    stall_threshold: float | None = attrs.field(default=0.5, validator=v.optional_positive_number)
    """After how many seconds without running the event loop counts as stalled (> 0): a
    task blocked it (a sync call in an ``async def``). The stall watchdog then logs a
    warning naming the task and the stack that holds the loop, counts it
    (``RunnerStatistics.stalls``), and keeps the reservations of every message held here
    fresh from a thread of its own, within ``max_stall`` or the blocking task's timeout.
    ``None``: no watchdog (a stall longer than about ``reclaim_delay * 2 / 3`` may then
    have messages reclaimed and run twice). See
    [Blocking and CPU-bound tasks](blocking-and-cpu-bound-tasks.md)."""

    max_stall: float = attrs.field(default=300.0, validator=v.positive_number)
    """How long (seconds) the stall watchdog keeps reservations fresh while the event loop
    is blocked by a task without a timeout (or by no task); a task with a timeout is kept
    until its timeout. Past it the worker counts as hung: its messages are reclaimed by
    other instances after ``reclaim_delay``."""

    num_fetchers: int = attrs.field(default=1, validator=v.positive_int)
    """How many concurrent ``XREADGROUP`` loops feed the workers (an int >= 1). Each has
    its own connection and consumer name."""

    batch_size: int = attrs.field(default=10, validator=v.positive_int)
    """The most messages one read or reclaim takes (an int >= 1). It is never more than
    the free worker slots."""

    block_duration: float = attrs.field(default=5.0, validator=v.positive_number)
    """How long one ``XREADGROUP`` waits for new messages (> 0). A read never blocks past
    the next reclaim pass, so in effect it is at most ``reclaim_interval``."""

    reclaim_delay: float = attrs.field(default=30.0, validator=v.positive_number)
    """A delivered message idle this long (its instance died) is reclaimed by another
    instance (> 0). Must be the same on every instance of the group. Running tasks
    heartbeat every ``reclaim_delay / 3``, so an event-loop stall or a Redis outage of
    up to about two thirds of it runs no task twice: see
    [Choosing `reclaim_delay`](concepts.md#choosing-reclaim_delay)."""

    reclaim_interval: float = attrs.field(default=1.0, validator=v.positive_number)
    """The shortest time between two reclaim passes of this instance, which look for
    abandoned or released messages (> 0)."""

    delete_on_ack: bool = attrs.field(default=True, validator=v.boolean)
    """Delete a message from the stream (``XDEL``) when it is acknowledged (a bool). On a
    queue that more than one group reads, a message is never deleted on acknowledgement
    (another group may not have read it yet): the groups' leaders trim what every group
    has finished instead (see [Queues and fan-out](queues.md#trimming))."""

    drain_timeout: float = attrs.field(default=30.0, validator=v.non_negative_number)
    """On shutdown, how long running tasks may take to finish before they are cancelled
    (>= 0)."""

    cancel_grace: float = attrs.field(default=5.0, validator=v.non_negative_number)
    """After ``drain_timeout``, how long cancelled tasks may take to unwind. A task still
    running then (it ignores cancellation) is abandoned: its message is released, and
    ``open_runner`` returns; so leaving it takes at most ``drain_timeout + cancel_grace``
    plus the bounded clean-up steps."""

    prefix: str = attrs.field(default="trunner", validator=v.name)
    """The namespace of every key (a name), so that environments can share one Redis."""

    failed_task_handler: FailedTaskHandler | None = attrs.field(
        default=None, validator=v.optional_async_callable
    )
    """``async def handler(message, error)``, called when a message is given up, before
    it is dead-lettered (see [the contract](concepts.md#the-failed-task-handler) and
    [``FailedTaskHandler``][trunner.FailedTaskHandler]). It must be an ``async``
    function, or an object with an ``async def __call__``: ``TypeError`` otherwise."""

    middleware: tuple[Middleware, ...] = attrs.field(default=(), converter=check_middleware)
    """[Middleware][trunner.Middleware] of this runner, a list (kept as a tuple): their
    ``around_attempt`` hooks wrap each attempt it runs, their ``on_dispatch`` hooks see
    each message it dispatches. The first is the outermost (see
    [Middleware and headers](middleware.md)). ``TypeError`` if an item is not a
    ``Middleware``."""

    host: str | None = attrs.field(default=None, validator=v.optional_name)
    """The host part of the default consumer name (a name). Default: the machine's host
    name, with braces and whitespace replaced by ``-``."""

    consumer_name: str | None = attrs.field(default=None, validator=v.optional_name)
    """This instance's consumer name (a name, not starting with ``trunner:``). Default:
    ``<host>:<pid>:<6 hex digits>``. It must be unique among running instances. It is
    also the instance's id in the leadership lease."""

    connect_timeout: float = attrs.field(default=5.0, validator=v.positive_number)
    """Bound on reaching Redis at start, and again on loading the scripts and creating
    the group (> 0); ``open_runner`` fails after it."""

    command_timeout: float = attrs.field(default=10.0, validator=v.positive_number)
    """A Redis command without a reply for this long fails, and its connection is
    dropped (> 0). Blocking reads get ``block_duration`` more. It guards against
    half-open connections."""

    max_payload_bytes: int = attrs.field(
        default=DEFAULT_MAX_PAYLOAD_BYTES, validator=v.positive_int
    )
    """The largest encoded task message ``dispatch`` accepts (an int >= 1; 1 MiB). This
    runner reads entries up to 128 bytes larger (a retry or a replay adds the task id and
    a longer attempt number: a message dispatched at the limit keeps all of its retries);
    larger ones are given up as undecodable."""

    dead_letter_maxlen: int | None = attrs.field(default=100_000, validator=v.optional_positive_int)
    """The approximate cap of the dead-letter stream (an int >= 1): the oldest entries
    are trimmed. ``None``: no cap."""

    ack_batch_size: int = attrs.field(default=100, validator=v.positive_int)
    """Acknowledgements are written when this many are buffered (an int >= 1) ..."""

    ack_flush_interval: float = attrs.field(default=0.005, validator=v.positive_number)
    """... or this long after the first one was buffered, whichever comes first (> 0)."""

    result_flush_interval: float = attrs.field(default=0.0, validator=v.non_negative_number)
    """An acknowledgement carrying a kept outcome (``keep_result``, a cancelled task) is
    written at most this long after it was buffered (>= 0; default: at once — somebody
    may be waiting for it; while that write is in flight, the next batch gathers)."""

    max_connections: int = attrs.field(default=20, validator=v.positive_int)
    """The size of the connection pool for everything but blocking reads and pub/sub
    (an int >= 1)."""

    min_workers: int | None = attrs.field(default=None, validator=v.optional_positive_int)
    """The capacity floor when the leader decides each instance's capacity (an int >= 1;
    default: ``num_workers``). See [Capacity](metrics-and-capacity.md#capacity)."""

    max_workers: int | None = attrs.field(default=None, validator=v.optional_positive_int)
    """The capacity ceiling when the leader decides each instance's capacity (an int >=
    1; default: ``num_workers``). ``min_workers < max_workers`` needs
    ``long_queue_threshold``."""

    long_queue_threshold: float | None = attrs.field(
        default=None, validator=v.optional_positive_number
    )
    """The predicted wait above which ``long_queue_hook`` is called, and the target of
    capacity decisions when ``min_workers < max_workers`` (> 0 or ``None``)."""

    long_queue_hook: LongQueueHook | None = attrs.field(
        default=None, validator=v.optional_async_callable
    )
    """``async def hook(stats)``, called by the leader when the predicted wait exceeds
    ``long_queue_threshold`` (see [``LongQueueHook``][trunner.LongQueueHook]). It must be
    ``async``: ``TypeError`` otherwise."""

    stats_interval: float | None = attrs.field(default=None, validator=v.optional_positive_number)
    """How often the leader computes the group's statistics (> 0; default:
    ``long_queue_threshold / 2``, else 60 s)."""

    report_interval: float = attrs.field(default=1.0, validator=v.positive_number)
    """How often each instance reports its timings and membership, and reads back its
    capacity (> 0)."""

    instance_ttl: float = attrs.field(default=15.0, validator=v.positive_number)
    """An instance that has not reported for this long counts as gone (> 0, longer than
    ``report_interval``)."""

    leader_ttl: float = attrs.field(default=5.0, validator=v.positive_number)
    """The time-to-live of the group's leadership lease (> 0). A crashed leader is
    replaced after it."""

    leader_wait: float = attrs.field(default=6.0, validator=v.positive_number)
    """How often followers try to take the lease (> 0). They also try at once when a
    leader releases it."""

    leader_jitter: float = attrs.field(default=0.005, validator=v.non_negative_number)
    """The random extra delay of each renewal, which happens after ``leader_ttl / 2``
    (>= 0)."""

    janitor_interval: float | None = attrs.field(default=60.0, validator=v.optional_positive_number)
    """How often the leader deletes the consumers of instances that are gone, and trims
    the stream (> 0; see [Clean-up](concepts.md#clean-up)). ``None``: never."""

    stream_retention: float | None = attrs.field(
        default=24 * 3600.0, validator=v.optional_positive_number
    )
    """With ``delete_on_ack=False``: how long finished messages stay in the stream before
    the janitor trims them (> 0). ``None``: for ever. Messages not yet delivered or still
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
    def lane_names(self) -> list[str]:
        """The names of :attr:`lanes`, highest priority first."""
        return [lane for lane, _ in self.lanes]

    @property
    def worker_bounds(self) -> tuple[int, int]:
        """``(min_workers, max_workers)``, each defaulting to ``num_workers``."""
        low = self.min_workers if self.min_workers is not None else self.num_workers
        high = self.max_workers if self.max_workers is not None else self.num_workers
        return low, high
