"""Every Redis key name trunner uses, built in one place.

All keys of one queue and of the consumer groups that read it carry the hash tag
``{<queue>}`` so that a script may touch several of them on Redis Cluster. A group reading
the queue of its own name (the default) keeps the layout trunner always had:
``<prefix>:{<group>}:stream`` and so on. A group reading another queue keeps what is its
own under ``<prefix>:{<queue>}:group:<group>:`` (see [Queues and fan-out](queues.md)).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from .key_names import KeyFamilies, aside_key_for, fence_key_for, hash_tag
from .names import DEFAULT_LANE, check_name
from .unique_lock import UniqueLock
from .workflow import WorkflowKeys

__all__ = [
    "RELEASED_CONSUMER",
    "Keys",
    "UniqueLock",
    "aside_key_for",
    "fence_key_for",
    "hash_tag",
]

#: The consumer that owns messages released for immediate reclaim (see ``pool``/``fetcher``).
RELEASED_CONSUMER = "trunner:released"

#: What the name of every holders key of a concurrency limit starts with, after the group.
_CONCURRENCY_HOLDERS = "concurrency:holders:"


#: Every key of a group and of its queue with a fixed name, by the :class:`Keys` property
#: naming it: its Redis type (``TYPE`` names; None for the quarantine stream, which
#: :meth:`Keys.types` leaves out) and whose it is, the queue's (shared by the groups reading
#: it) or the group's own.
_FIXED_KEYS: tuple[tuple[str, str | None, str], ...] = (
    ("stream", "stream", "queue"),
    ("groups", "set", "queue"),
    ("dead", "stream", "group"),
    ("delayed", "zset", "queue"),
    ("delayed_messages", "hash", "queue"),
    ("delayed_unique", "hash", "queue"),
    ("retries", "zset", "group"),
    ("retry_messages", "hash", "group"),
    ("retry_unique", "hash", "group"),
    ("leader", "string", "group"),
    ("fence", "string", "group"),
    ("cron", "hash", "group"),
    ("metrics", "hash", "group"),
    ("instances", "zset", "group"),
    ("instances_info", "hash", "group"),
    ("capacity", "hash", "group"),
    ("stats", "string", "group"),
    ("floor", "string", "group"),
    ("where", "hash", "queue"),
    ("cancelled", "hash", "queue"),
    ("paused", "string", "group"),
    ("quarantine", None, "group"),
    ("concurrency_keys", "set", "group"),
    ("concurrency_waiters", "hash", "group"),
    ("lanes", "set", "queue"),
    ("workflows", "zset", "group"),
)


def _queue_of(keys: Keys) -> str:
    return keys.group


def _checked_name(field: str) -> Callable[[object, attrs.Attribute[Any], object], None]:
    """An attrs validator: :func:`~trunner._wire.names.check_name` naming ``field``."""

    def check(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
        check_name(field, value)

    return check


@attrs.frozen
class Keys(KeyFamilies):
    """The key names of one consumer group reading one queue, under one prefix.

    Every key carries the hash tag ``{<queue>}``, so that all keys of a queue and of its
    groups are in one Redis Cluster hash slot (see [Redis keys and
    messages](redis-layout.md)). The queue defaults to the group: then every key is
    ``<prefix>:{<group>}:<name>``. A group reading another queue has the queue's keys
    (the stream, the delayed dispatches, the unique locks, the cancel marks) in
    ``<prefix>:{<queue>}:<name>`` and its own (dead letters, retries, results, leadership,
    metrics ...) in ``<prefix>:{<queue>}:group:<group>:<name>``.

    Raises:
        TypeError: ``prefix``, ``group`` or ``queue`` is not a string.
        ValueError: ``prefix``, ``group`` or ``queue`` is empty, or holds ``{``, ``}``
            or whitespace.
    """

    prefix: str = attrs.field(validator=_checked_name("prefix"))
    """The key prefix (``RunnerConfig.prefix``)."""
    group: str = attrs.field(validator=_checked_name("consumer_group"))
    """The consumer group."""
    queue: str = attrs.field(
        default=attrs.Factory(_queue_of, takes_self=True), validator=_checked_name("queue")
    )
    """The queue (stream) the group reads; by default the group's own name."""

    @property
    def own_queue(self) -> bool:
        """Whether the group reads the queue of its own name (the layout trunner always
        had)."""
        return self.queue == self.group

    @property
    def queue_base(self) -> str:
        """``<prefix>:{<queue>}:``, what every key of the queue starts with; a group's own
        keys follow it (the group of the queue's name), or ``group:<group>:`` does (see
        :meth:`_key`; cancel_task.lua names other groups' records so)."""
        return self._qkey("")

    def for_group(self, group: str) -> Keys:
        """The keys of another group reading the same queue."""
        return Keys(self.prefix, group, self.queue)

    @property
    def stream(self) -> str:
        """``<prefix>:{<queue>}:stream``: the task stream, read by the consumer group (and
        by every other group reading the queue)."""
        return self._qkey("stream")

    def lane_stream(self, lane: str) -> str:
        """The stream of one lane of the queue: :attr:`stream` for the default lane, else
        ``<prefix>:{<queue>}:stream:<lane>`` (the scripts name it so too: the default
        stream's name, ``:`` and the lane)."""
        return self.stream if lane == DEFAULT_LANE else self._qkey(f"stream:{lane}")

    @property
    def lanes(self) -> str:
        """``<prefix>:{<queue>}:lanes``: the lanes other than the default that runners
        reading the queue declared (a set): ``trunner inspect`` shows each one's backlog."""
        return self._qkey("lanes")

    @property
    def groups(self) -> str:
        """``<prefix>:{<queue>}:groups``: the names of the consumer groups trunner created
        on the queue's stream (a set). With more than one, acknowledging a message never
        deletes it: the leaders trim what every group has finished."""
        return self._qkey("groups")

    @property
    def dead(self) -> str:
        """``<prefix>:{<group>}:dead``: the dead-letter stream."""
        return self._key("dead")

    @property
    def delayed(self) -> str:
        """``<prefix>:{<queue>}:delayed``: the delayed task ids (delayed tasks, and the
        retries of a group reading its own queue), by due time."""
        return self._qkey("delayed")

    @property
    def delayed_messages(self) -> str:
        """``<prefix>:{<queue>}:delayed:messages``: delayed task id → the message to
        enqueue when it is due."""
        return self._qkey("delayed:messages")

    @property
    def delayed_wake(self) -> str:
        """``<prefix>:{<queue>}:delayed:wake``: a pub/sub channel, told when a delayed
        task or a retry became the earliest one (payload: its due time in ms)."""
        return self._qkey("delayed:wake")

    @property
    def cron(self) -> str:
        """``<prefix>:{<group>}:cron``: cron schedule name → the last tick fired (ms)."""
        return self._key("cron")

    @property
    def leader(self) -> str:
        """``<prefix>:{<group>}:leader``: the leadership lease."""
        return self._key("leader")

    @property
    def fence(self) -> str:
        """``<prefix>:{<group>}:leader:fence``: the lease's fence counter."""
        return fence_key_for(self.leader)

    @property
    def delayed_unique(self) -> str:
        """``<prefix>:{<queue>}:delayed:unique``: delayed unique task id → the lock it
        takes when due, a JSON array ``["<lock key>", "<token>", <ttl ms>]`` (see
        [Unique locks](redis-layout.md#unique-locks))."""
        return self._qkey("delayed:unique")

    @property
    def retries(self) -> str:
        """The delayed set of the group's own retries (and of its tasks deferred by a
        limit): :attr:`delayed` for a group reading its own queue, else
        ``<prefix>:{<queue>}:group:<group>:delayed`` (a retry is the group's alone: it
        must not wait beside another group's retry of the same task id)."""
        return self._key("delayed")

    @property
    def retry_messages(self) -> str:
        """The messages of :attr:`retries` (as :attr:`delayed_messages`)."""
        return self._key("delayed:messages")

    @property
    def retry_unique(self) -> str:
        """The delayed unique hash beside :attr:`retries` (as :attr:`delayed_unique`;
        retries keep the lock they hold, so it stays empty for a group of its own)."""
        return self._key("delayed:unique")

    def unique(self, key: str) -> str:
        """The lock of a unique task's key.

        Args:
            key: [``Task.key_for(payload)``][trunner.Task.key_for]
                (``<len>:<task>[:<key>]``).

        Returns:
            ``<prefix>:{<queue>}:unique:<key>``.
        """
        return self._qkey(f"unique:{key}")

    def rate_limit(self, key: str) -> str:
        """The state of one rate limit (GCRA): its theoretical arrival time.

        Args:
            key: The limit's key, ``<len>:<task>[:<rate_limit_key(payload)>]``.

        Returns:
            ``<prefix>:{<group>}:rate:<key>``, a string (ms since the epoch) with a
            time-to-live.
        """
        return self._key(f"rate:{key}")

    def concurrency_holders(self, key: str) -> str:
        """The holders of one concurrency limit: ``<prefix>:{<group>}:concurrency:holders:
        <key>``, a sorted set of stream ids scored by when they were granted (ms)."""
        return self._key(f"{_CONCURRENCY_HOLDERS}{key}")

    def concurrency_waiting(self, key: str) -> str:
        """The waiting list of one concurrency limit: ``<prefix>:{<group>}:concurrency:
        waiting:<key>``, a list of encoded messages, oldest first."""
        return self._key(f"concurrency:waiting:{key}")

    @property
    def concurrency_waiters(self) -> str:
        """``<prefix>:{<group>}:concurrency:waiters``: the group's index of the tasks waiting
        for a concurrency slot (a hash of task id -> ``<n>:<its waiting list's key><its
        message>``, n the length of that key), so that status and cancel find them. The
        limit scripts name it from a limit's keys (limits.lua: waiters_index)."""
        return self._key("concurrency:waiters")

    @property
    def concurrency_keys(self) -> str:
        """``<prefix>:{<group>}:concurrency:keys``: the keys of the concurrency limits in use
        (a set of ``<len>:<task>[:<key>]``), which the leader's janitor looks over for slots
        whose holder is gone."""
        return self._key("concurrency:keys")

    @property
    def metrics(self) -> str:
        """``<prefix>:{<group>}:metrics``: the timing totals since the leader last reset
        them."""
        return self._key("metrics")

    @property
    def instances(self) -> str:
        """``<prefix>:{<group>}:instances``: the live instance ids, by last-seen time
        (ms)."""
        return self._key("instances")

    @property
    def instances_info(self) -> str:
        """``<prefix>:{<group>}:instances:info``: instance id → its details (JSON)."""
        return self._key("instances:info")

    @property
    def capacity(self) -> str:
        """``<prefix>:{<group>}:capacity``: the per-instance capacity the leader decided
        (value, fence, version)."""
        return self._key("capacity")

    @property
    def stats(self) -> str:
        """``<prefix>:{<group>}:stats``: the statistics of the last completed window
        (JSON), written by the leader."""
        return self._key("stats")

    @property
    def where(self) -> str:
        """The hash of task id -> the stream id of its message, for the messages whose id is
        not their task's (delayed tasks, retries, cron ticks, replays), while they are in
        the stream: so that a task can be found by its id (cancel, status)."""
        return self._qkey("where")

    @property
    def cancelled(self) -> str:
        """The hash of cancelled task id -> until when the mark holds (ms): a task fetched
        after its cancellation is dropped before it starts."""
        return self._qkey("cancelled")

    @property
    def cancel_channel(self) -> str:
        """Pub/sub channel: a task was cancelled (payload: its id); runners running it
        cancel it. It also carries the group's notices to its runners (payload: the byte
        0xFF, which never starts UTF-8 text, hence never a task id, then the notice:
        ``pause`` or ``resume``; see ``trunner._engine.pausing``)."""
        return self._qkey("cancel")

    @property
    def paused(self) -> str:
        """``<prefix>:{<group>}:paused``: present while the group is paused; its value is
        when it was paused (ms since the epoch, decimal digits)."""
        return self._key("paused")

    @property
    def done(self) -> str:
        """Pub/sub channel: tasks finished (payload: their ids, separated by spaces);
        waiters of their results look again."""
        return self._key("done")

    def task(self, task_id: str) -> str:
        """The record of one task that keeps its result (see ``trunner.status``)."""
        return self._key(f"task:{task_id}")

    def _workflow(self, workflow_id: str) -> WorkflowKeys:
        """The keys of one workflow: ``<prefix>:{<group>}:wf:<id>`` and four named after it
        (``ValueError`` for an id with whitespace, or none)."""
        return WorkflowKeys.at(self._key("wf:"), workflow_id)

    @property
    def workflows(self) -> str:
        """The group's live workflows (a zset: id -> when dispatched, ms)."""
        return self._key("workflows")

    @property
    def floor(self) -> str:
        """The id below which every message of the stream is finished for the group (see
        ``group_floor.lua``); a lost group is recreated from it."""
        return self._key("floor")

    def lane_floor(self, lane: str) -> str:
        """The floor (see :attr:`floor`) of one lane's stream: :attr:`floor` for the default
        lane, else ``<prefix>:{<group>}:floor:<lane>``."""
        return self.floor if lane == DEFAULT_LANE else self._key(f"floor:{lane}")

    @property
    def quarantine(self) -> str:
        """The stream of bad data set aside, with the reason (see
        ``trunner._engine.quarantine``)."""
        return self._key("quarantine")

    def types(self) -> dict[str, str]:
        """The Redis type of every fixed key but the quarantine stream (``TYPE`` names)."""
        return {getattr(self, name): kind for name, kind, _ in _FIXED_KEYS if kind is not None}

    @staticmethod
    def aside(key: str, at_ms: int) -> str:
        """The name a key of a wrong type is renamed to (see :func:`aside_key_for`)."""
        return aside_key_for(key, at_ms)

    def queue_keys(self) -> list[str]:
        """The keys of the queue, shared by the groups reading it (the unique locks are
        not listed)."""
        return [getattr(self, name) for name, _, whose in _FIXED_KEYS if whose == "queue"]

    def group_keys(self) -> list[str]:
        """The keys of the group's own with a fixed name (for a group reading its own
        queue, the queue's keys too)."""
        own = [getattr(self, name) for name, _, whose in _FIXED_KEYS if whose == "group"]
        if self.own_queue:
            return list(dict.fromkeys(self.queue_keys() + own))
        return own

    def fixed(self) -> list[str]:
        """Every key of the group and of its queue with a fixed name (the unique locks are
        not listed)."""
        return list(dict.fromkeys(self.queue_keys() + self.group_keys()))
