"""What this instance holds: every message delivered to its consumers that it has not
handed back yet, and in which state.

::

    submitted (ready, then running) ──► finished: acknowledgement buffered ──► forgotten
          │                        ├──► kept: left pending on purpose (it ran)
          └────────────────────────┴──► to release: handed back for immediate reclaim

Each transition has one owner: the pool adds and removes running jobs; the outcome of an
attempt moves a job to *finished*, *kept* or *to release*; the acknowledgement buffer
forgets what it wrote; the releaser takes what is to release. The heartbeater and the
releaser only read. Plain dicts behind attribute access: the pool's hot path pays one
dict operation per state change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._wire.decode import Fields, MessageDecodeError, message_from_fields
from .._wire.message import TaskMessage

if TYPE_CHECKING:
    from .._task import Task
    from .._wire.keys import Keys

__all__ = ["MAX_KEPT", "Holdings", "Job", "beat_interval"]

#: How many messages left pending on purpose are remembered (see :attr:`Holdings.kept`).
MAX_KEPT = 10_000


def beat_interval(task: Task | None, reclaim_delay: float) -> float:
    """How often a running attempt of ``task`` heartbeats: a third of the time after which
    its message could be reclaimed (``reservation_timeout``, capped by ``reclaim_delay``)."""
    if task is None or task.reservation_timeout is None:
        return reclaim_delay / 3
    return min(task.reservation_timeout, reclaim_delay) / 3


@attrs.define(eq=False)
class Job:
    """A message this instance holds: submitted, running, then finished; with its
    reservation's heartbeat schedule (kept fresh until the acknowledgement is written)."""

    consumer: str
    """The consumer the message is pending for."""
    interval: float
    """How often its reservation heartbeats (see :func:`beat_interval`)."""
    next_beat: float
    """When its next heartbeat is due (Trio clock)."""
    message_id: str
    deliveries: int
    """How many times its entry was delivered (the given-up mark of
    :mod:`trunner._wire.marks` taken off)."""
    task: Task | None
    """The registered task, or None (unknown name, or undecodable)."""
    fields: Fields
    """What the entry holds (see :data:`trunner.message.Fields`)."""
    decode_error: MessageDecodeError | None = None
    given_up: bool = False
    """It was given up on an earlier delivery, and not dead-lettered (see the given-up mark
    of :mod:`trunner._wire.marks`): the failed-task handler runs again, not the task."""
    marked_count: int = 0
    """For a message given up: its delivery count as Redis keeps it (the mark included)."""
    claimed_count: int = 0
    """For a message claimed again into this instance while held here: the claim's
    delivery count (see :meth:`reclaimed`)."""
    foreign: bool = False
    """The message is for another consumer group reading the same queue (its retry,
    replay or cron tick): skipped."""
    finishing: bool = False
    """A state-transition write (retry, dead-letter) acknowledges it: no more heartbeats."""
    lost: bool = False
    """Another consumer claimed it while it ran."""
    waited: bool = False
    """It suspended at least once (its job loop then left the ready jobs to others)."""
    cancel_requested: bool = False
    """Its task was cancelled: it ends with the outcome 'cancelled' (never retried)."""
    loop_scope: trio.CancelScope | None = None
    """The cancel scope of the job loop running it (cancelled to cancel the task)."""
    ended: bool = False
    """Its attempt ran to its end, or it may not run: its delivery counts (a release after
    this keeps it)."""
    keep_result: float | None = None
    """For a task that keeps its result: for how long (seconds)."""
    started_at: float = 0.0
    """For a task that keeps its result: when its attempt started (seconds since the
    epoch)."""
    result: bytes | None = None
    """For a task that keeps its result: what its attempt returned, as JSON."""
    progress: float | None = None
    """The last progress the task reported (0 to 1), and its message."""
    progress_message: str | None = None
    began: float = 0.0
    """When its attempt started (``time.perf_counter``)."""
    progress_at: float = -1e9
    """When its progress was last written (Trio clock): reports are throttled."""
    progress_done: bool = False
    """The last progress written was 1.0 (written at once the first time only)."""
    slot: tuple[str, str, int] | None = None
    """The group-wide concurrency slot its message holds (holders key, waiting-list key,
    limit): released with its acknowledgement, retry or dead letter (see
    ``trunner._engine.admission``)."""
    _message: TaskMessage | None = None

    @property
    def delivery_count(self) -> int:
        """Its entry's delivery count as Redis keeps it: the scripts that end its attempt
        write only while the entry is pending for its consumer with this count (see
        ``deliveries.lua``)."""
        return self.claimed_count or self.marked_count or self.deliveries

    def reclaimed(self, consumer: str, count: int) -> None:
        """A claim into ``consumer`` (this instance's own reclaim pass, after its process
        stalled past ``reclaim_delay``) delivered the message again, with delivery count
        ``count``, while it was held here: that delivery is this attempt's now. Not run a
        second time, and its writes, fenced to the delivery it began with, would all be
        discarded, though no other instance ever ran it."""
        self.consumer = consumer
        self.claimed_count = count
        self.lost = False

    @property
    def message(self) -> TaskMessage:
        """The :class:`TaskMessage`, built when first asked for (most tasks never ask)."""
        if self._message is None:
            self._message = message_from_fields(self.message_id, self.deliveries, self.fields)
        return self._message

    def about(self) -> str:
        """How log lines name it: ``task 'x' (message 1-0, attempt 2)``."""
        message = self.message
        name = repr(message.task_name) if message.task_name else "(undecodable)"
        return f"task {name} (message {message.message_id}, attempt {message.attempt})"

    def log_fields(self, **more: Any) -> dict[str, Any]:
        """Structured fields of its log records (``extra=``)."""
        message = self.message
        return {
            "task": message.task_name,
            "message_id": message.message_id,
            "task_id": message.task_id,
            "attempt": message.attempt,
            **more,
        }

    def lock(self, keys: Keys) -> tuple[str, str] | None:
        """The unique lock its end releases: (lock key, token), or None."""
        key, token = self.fields[6], self.fields[7]
        if key is None or token is None:
            return None
        return keys.unique(key), token


class Holdings:
    """The ledger of one runner's messages (see the module docs)."""

    def __init__(self, max_kept: int = MAX_KEPT) -> None:
        #: Submitted and not ended: ready, or running.
        self.running: dict[str, Job] = {}
        #: Ended, with the acknowledgement buffered or being written.
        self.finished: dict[str, Job] = {}
        #: Ran, and left pending on purpose (the failed-task handler raised, or the outcome
        #: could not be written): redelivered after ``reclaim_delay``, never released as if
        #: they had not run. Bounded: the oldest are forgotten first. Id -> consumer.
        self.kept: dict[str, str] = {}
        self._max_kept = max_kept
        self._to_release: list[tuple[str, str, int]] = []
        #: Task ids with a cancel mark -> until when it holds (ms): a message of one of
        #: them is dropped before it starts (see ``trunner._engine.cancellation``).
        self.cancelled: dict[str, int] = {}

    def slots_held(self) -> int:
        """How many of the messages held here hold a concurrency slot (admitted)."""
        return sum(1 for job in self.running.values() if job.slot is not None)

    def holds(self, message_id: str) -> bool:
        """Whether the message is running here, or finished with its acknowledgement not
        written yet (a read must not treat it as delivered to nobody)."""
        return message_id in self.running or message_id in self.finished

    def keep(self, job: Job) -> None:
        """Leave a message that ran pending, for a later delivery."""
        kept = self.kept
        kept[job.message_id] = job.consumer
        while len(kept) > self._max_kept:
            del kept[next(iter(kept))]

    def release_later(self, consumer: str, message_id: str, give_back: int = 1) -> None:
        """Queue a message for the releaser; ``give_back``: how much to take off its
        delivery count: 1, its delivery did not count (it never ran); 0, it did; or
        ``-GIVEN_UP``, it was given up (see :mod:`trunner._wire.marks`)."""
        self._to_release.append((consumer, message_id, give_back))

    @property
    def to_release(self) -> int:
        """Messages queued for release."""
        return len(self._to_release)

    def take_releases(self) -> list[tuple[str, str, int]]:
        """What is queued for release: (consumer, id, give back), emptied."""
        releases, self._to_release = self._to_release, []
        return releases
