"""Dispatching: shared by the runner and the producer-only client."""

from __future__ import annotations

import math
import secrets
import time
import warnings
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ._redis import Broker
from .admin import (
    DeadLetter,
    GroupInfo,
    ReplayResult,
    inspect_group,
    list_dead,
    list_quarantined,
    read_instances,
    read_stats,
    replay_dead,
)
from .errors import RunnerNotRunning, TaskAlreadyDispatched
from .group_stats import GroupStats, InstanceInfo
from .keys import UniqueLock
from .message import MessageDecodeError, decode_message, encode_message
from .quarantine import QuarantineRecord
from .task import Task, TaskRegistry, checked_task_name

if TYPE_CHECKING:
    import datetime

__all__ = ["Producer"]


@attrs.frozen
class _Unique:
    """The lock a unique task takes: its key, a token of this dispatch, and its ttl."""

    key: str
    token: str
    ttl_ms: int
    seconds: float
    """``unique_for``, as the message carries it."""


class Producer:
    """Dispatch and inspection methods, for the runner and the producer-only client.

    ``registry``: the tasks to check names (and unique keys) against, or None to accept
    any name; ``instance_ttl``: how long an instance that has not reported counts as live
    (the group's ``RunnerConfig.instance_ttl``). The broker is set while open.
    """

    def __init__(
        self, *, registry: TaskRegistry | None, max_payload_bytes: int, instance_ttl: float
    ) -> None:
        self._broker: Broker | None = None
        self._registry = registry
        self._max_payload_bytes = max_payload_bytes
        self._instance_ttl = instance_ttl

    def _open_broker(self) -> Broker:
        if self._broker is None:
            raise RunnerNotRunning(f"{type(self).__name__} is not open")
        return self._broker

    def _task(self, task_name: str) -> Task | None:
        """The registered task (None without a registry); checks the name."""
        checked_task_name(task_name)
        if self._registry is None:
            return None
        return self._registry.get(task_name)

    def _encode(
        self,
        task_name: str,
        payload: Any,
        now: float,
        task_id: str | None = None,
        unique: _Unique | None = None,
    ) -> bytes:
        return encode_message(
            task_name,
            payload,
            enqueued_at=now,
            task_id=task_id,
            unique_key=unique.key if unique else None,
            unique_token=unique.token if unique else None,
            unique_for=unique.seconds if unique else None,
            max_bytes=self._max_payload_bytes,
        )

    def _unique(self, task: Task | None, payload: Any) -> _Unique | None:
        if task is None or not task.unique:
            return None
        key = task.key_for(payload)
        return _Unique(key, secrets.token_hex(16), task.unique_for_ms, task.unique_for or 0.0)

    async def dispatch(self, task_name: str, payload: Any = None) -> str:
        """Add one task to the group's stream.

        The task name and the payload are checked, and the payload encoded, before
        anything is written to Redis. The task receives the payload after a JSON round
        trip: tuples arrive as lists, and dict keys as strings (``{1: "x"}`` arrives as
        ``{"1": "x"}``).

        For a [unique task](unique-tasks.md), the ``unique_key`` of the payload is
        computed first (whatever it raises propagates). If its key is locked (a task of
        the same key is queued and not finished), nothing is written; otherwise the lock
        is taken and the task added in one script.

        The call is not retried: after a ``RedisUnavailable``, or a cancellation while
        the command was on its way, the task may or may not have been added.

        Args:
            task_name: A non-empty task name. A runner, or a client with ``tasks=``, only
                accepts a name its registry knows.
            payload: Any JSON-serializable value.

        Returns:
            The new stream entry's id, which is also the task's id.

        Raises:
            TypeError: ``task_name`` is not a string, or the ``unique_key`` of a unique
                task returned something other than a ``str`` or ``int``.
            ValueError: ``task_name`` is empty.
            TaskNotFound: The registry does not know ``task_name``.
            InvalidPayload: The payload is not JSON-serializable (sets, bytes, NaN,
                infinities, arbitrary objects).
            PayloadTooLarge: The encoded message exceeds ``max_payload_bytes``.
            TaskAlreadyDispatched: A unique task whose key is locked.
            RunnerNotRunning: The runner or client is not open.
            RedisUnavailable: No connection, or no reply within ``command_timeout``.
            RedisCommandError: Redis answered with an error.
        """
        broker = self._open_broker()
        task = self._task(task_name)
        unique = self._unique(task, payload)
        data = self._encode(task_name, payload, time.time(), unique=unique)
        if unique is None:
            return await broker.enqueue(data)
        (message_id,) = await broker.enqueue_unique(
            [(broker.keys.unique(unique.key), unique.token, data)], unique.ttl_ms
        )
        if message_id is None:
            raise TaskAlreadyDispatched(task_name, [unique.key])
        return message_id

    async def dispatch_many(self, task_name: str, payloads: Iterable[Any]) -> list[str]:
        """Add one task per payload, in order.

        Every payload is checked and encoded first; if one fails, nothing is written. The
        tasks are then sent in chunks of 1000, each written atomically by one script (one
        round trip per chunk). If Redis fails after the first chunk, the chunks already
        sent stay written. An empty iterable returns ``[]`` without contacting Redis.

        For a [unique task](unique-tasks.md), the chunks hold 500 tasks. Payloads whose
        key is locked, or repeats the key of an earlier payload of the same call (the
        first one wins), are refused; the others are enqueued. If any was refused, the
        call raises [``TaskAlreadyDispatched``][trunner.TaskAlreadyDispatched] after
        enqueuing the others: its ``refused`` holds the indices of the refused payloads,
        and its ``ids`` the id of each payload (``None`` where refused).

        Args:
            task_name: A non-empty task name, as for [``dispatch``][trunner.Runner.dispatch].
            payloads: The payloads, each JSON-serializable.

        Returns:
            The ids of the new tasks, in the order of ``payloads``.

        Raises:
            TaskAlreadyDispatched: Some payloads of a unique task were refused; the others
                were enqueued.

        It raises the other errors of [``dispatch``][trunner.Runner.dispatch] too.
        """
        broker = self._open_broker()
        task = self._task(task_name)
        now = time.time()
        items = []
        for payload in payloads:
            unique = self._unique(task, payload)
            items.append((unique, self._encode(task_name, payload, now, unique=unique)))
        if not items:
            return []
        if task is None or not task.unique:
            return await broker.enqueue_many([data for _, data in items])
        locked = [(broker.keys.unique(u.key), u.token, data) for u, data in items if u is not None]
        ids = await broker.enqueue_unique(locked, task.unique_for_ms)
        refused = [i for i, message_id in enumerate(ids) if message_id is None]
        if refused:
            keys = [u.key for i in refused if (u := items[i][0]) is not None]
            raise TaskAlreadyDispatched(task_name, keys, refused, ids)
        return [i for i in ids if i is not None]

    async def dispatch_delayed(
        self, task_name: str, payload: Any, delay: float | datetime.timedelta
    ) -> str:
        """Schedule one task to be added to the stream ``delay`` from now.

        The task is stored in the group's delayed set, in one script; when it is due, the
        group's leader moves it into the stream (see
        [Delayed and periodic tasks](delayed-and-periodic.md)). The task name and payload
        are checked like [``dispatch``][trunner.Runner.dispatch] checks them, before
        anything is written. The call is not retried: after a ``RedisUnavailable``, the
        task may or may not be scheduled.

        A [unique task](unique-tasks.md) is never refused here: its lock is taken when
        it is moved into the stream. If the key is locked then, the task is dropped
        (counted in [``RunnerStatistics.unique_dropped``][trunner.RunnerStatistics.unique_dropped]).

        Args:
            task_name: A non-empty task name, as for [``dispatch``][trunner.Runner.dispatch].
            payload: Any JSON-serializable value.
            delay: Seconds (``int`` or ``float``) or a ``datetime.timedelta``; ``0`` means
                as soon as possible.

        Returns:
            The task's id, 32 hex digits: its ``task_id`` when it runs (and across its
            retries), and the argument of [``cancel_delayed``][trunner.Runner.cancel_delayed].

        Raises:
            TypeError: ``delay`` is neither a number nor a ``timedelta`` (``bool``
                included).
            ValueError: ``delay`` is negative, NaN or infinite.

        It raises the other errors of [``dispatch``][trunner.Runner.dispatch] too, except
        ``TaskAlreadyDispatched``.
        """
        seconds: Any = delay
        if not isinstance(delay, int | float):
            import datetime  # noqa: PLC0415 - only for a timedelta; workers never need it

            if isinstance(delay, datetime.timedelta):
                seconds = delay.total_seconds()
        if not isinstance(seconds, int | float) or isinstance(seconds, bool):
            raise TypeError(f"delay must be seconds or a timedelta, got {type(delay).__name__}")
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"delay must be a finite number of seconds >= 0, got {delay!r}")
        return await self._schedule(task_name, payload, time.time() + seconds)

    async def schedule_for(self, task_name: str, payload: Any, when: datetime.datetime) -> str:
        """Schedule one task to be added to the stream at ``when``.

        Like [``dispatch_delayed``][trunner.Runner.dispatch_delayed], for a point in time.

        Args:
            task_name: A non-empty task name, as for [``dispatch``][trunner.Runner.dispatch].
            payload: Any JSON-serializable value.
            when: An aware ``datetime`` (with a time zone). A time in the past means as
                soon as possible.

        Returns:
            The task's id, as ``dispatch_delayed`` returns it.

        Raises:
            TypeError: ``when`` is not a ``datetime``.
            ValueError: ``when`` is naive.

        It raises the other errors of ``dispatch_delayed`` too.
        """
        import datetime  # noqa: PLC0415 - not loaded by workers that never need it

        if not isinstance(when, datetime.datetime):
            raise TypeError(f"when must be a datetime, got {type(when).__name__}")
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError("when must be an aware datetime (with a time zone), got a naive one")
        return await self._schedule(task_name, payload, when.timestamp())

    async def _schedule(self, task_name: str, payload: Any, due: float) -> str:
        broker = self._open_broker()
        task = self._task(task_name)
        unique = self._unique(task, payload)
        task_id = secrets.token_hex(16)
        data = self._encode(task_name, payload, time.time(), task_id, unique)
        due_ms = math.ceil(max(due, 0.0) * 1000)
        lock = None
        if unique is not None:
            lock = UniqueLock(broker.keys.unique(unique.key), unique.token, unique.ttl_ms)
        await broker.schedule(task_id, due_ms, data, lock)
        self._scheduled(due_ms)
        return task_id

    def _scheduled(self, due_ms: int) -> None:
        """A delayed task was added (the runner wakes its scheduler if it leads)."""

    async def cancel_delayed(self, delayed_id: str) -> bool:
        """Remove a task that waits in the delayed set.

        A scheduled retry is stored under its task id, so ``cancel_delayed(task_id)``
        removes it too: the task then does not run again and is not dead-lettered.
        Cancelling the scheduled retry of a unique task releases its key's lock.

        Args:
            delayed_id: The id [``dispatch_delayed``][trunner.Runner.dispatch_delayed] or
                [``schedule_for``][trunner.Runner.schedule_for] returned, or the task id of
                a scheduled retry.

        Returns:
            ``True`` if the task was removed; ``False`` if no such task was waiting: it
            was already moved into the stream (it then runs as usual), was cancelled
            before, or never existed.

        Raises:
            TypeError: ``delayed_id`` is not a string.
        """
        if not isinstance(delayed_id, str):
            raise TypeError(f"delayed_id must be a str, got {type(delayed_id).__name__}")
        broker = self._open_broker()
        lock = None
        data = await broker.delayed_message(delayed_id)
        if data is not None:
            try:
                message = decode_message(delayed_id, [b"payload", data])
            except MessageDecodeError:
                message = None
            if message is not None and message.unique_key and message.unique_token:
                lock = (broker.keys.unique(message.unique_key), message.unique_token)
        return await broker.cancel_delayed(delayed_id, lock)

    async def group_stats(self) -> GroupStats:
        """The group's statistics over the current window, computed now.

        Group-wide and read from Redis, the same from any instance (see
        [Metrics and capacity](metrics-and-capacity.md));
        [``Runner.statistics``][trunner.Runner.statistics] is one instance's own.
        Instances that have not reported for ``instance_ttl`` are not counted.

        Returns:
            The statistics, as the leader computes them at the end of a window.
        """
        return await read_stats(self._open_broker(), self._instance_ttl)

    async def stats(self) -> GroupStats:
        """Deprecated alias of :meth:`group_stats` (removed in the next release)."""
        warnings.warn(
            "stats() is deprecated, use group_stats(): the group's statistics, not to be "
            "confused with statistics(), this instance's",
            DeprecationWarning,
            stacklevel=2,
        )
        return await self.group_stats()

    async def instances(self) -> list[InstanceInfo]:
        """The group's live instances, and which one leads.

        An instance that has not reported for ``instance_ttl`` is not listed.

        Returns:
            One [``InstanceInfo``][trunner.InstanceInfo] per live instance, by id.
        """
        return await read_instances(self._open_broker(), self._instance_ttl)

    async def inspect(self) -> GroupInfo:
        """The group at a glance, as ``trunner inspect`` shows it.

        Returns:
            The queue, pending messages per consumer, delayed tasks, dead letters, live
            instances, leader, capacity decision and the leader's last statistics. A
            group that no runner created yet has no pending messages.
        """
        return await inspect_group(self._open_broker(), self._instance_ttl)

    async def dead_letters(self, count: int = 100, start: str = "-") -> list[DeadLetter]:
        """Read the dead-letter stream, oldest first.

        Args:
            count: The most entries to return.
            start: The dead-letter entry id to start at (included); ``"-"``: the oldest.

        Returns:
            Up to ``count`` entries.
        """
        return await list_dead(self._open_broker(), count, start)

    async def replay_dead_letters(self, ids: Sequence[str] | None = None) -> ReplayResult:
        """Put dead letters back into the stream, as fresh first attempts.

        Each replayed entry leaves the dead-letter stream and enters the task stream in
        one script, with its task id and payload, and attempt 1. A dead letter of a unique
        task takes its key's lock again in the same script; if the key is locked (a task
        of that key is queued or running), it is not replayed and stays in the dead-letter
        stream. An entry whose message cannot be decoded stays too, and ids that are not
        in the dead-letter stream are skipped.

        Args:
            ids: The dead-letter entry ids to replay; ``None`` replays all of them.

        Returns:
            A [``ReplayResult``][trunner.ReplayResult]: the new stream ids, and why each
            entry that was not replayed was not (it unpacks as ``(new ids, ids not
            replayed)``).
        """
        return await replay_dead(
            self._open_broker(), ids, self._max_payload_bytes, self._unique_for
        )

    def _unique_for(self, task_name: str) -> float | None:
        """The registry's ``unique_for`` of a task (None without one, or not unique)."""
        registry = self._registry
        if registry is None or task_name not in registry:
            return None
        return registry.get(task_name).unique_for

    async def purge_dead_letters(self) -> int:
        """Delete every dead-letter entry.

        Returns:
            How many entries there were.
        """
        return await self._open_broker().purge_dead()

    async def queue_length(self) -> int:
        """The number of entries in the group's stream (``XLEN``).

        Waiting messages, plus delivered ones not yet acknowledged. With
        ``delete_on_ack=False``, acknowledged entries stay in the stream and are counted
        too.
        """
        return await self._open_broker().queue_length()

    async def pending_count(self) -> int:
        """The number of messages delivered to a consumer and not yet acknowledged.

        Running, released, or abandoned by a dead instance.

        Raises:
            RedisCommandError: The consumer group does not exist yet (no runner of it
                has started).
        """
        return await self._open_broker().pending_count()

    async def delayed_count(self) -> int:
        """The number of tasks waiting in the delayed set (``ZCARD``).

        Delayed tasks ([``dispatch_delayed``][trunner.Runner.dispatch_delayed],
        [``schedule_for``][trunner.Runner.schedule_for]) and scheduled retries that have
        not been moved into the stream yet. Cron ticks are not counted: they are added to
        the stream directly.
        """
        return await self._open_broker().delayed_count()

    async def quarantined(self, count: int = 100, start: str = "-") -> list[QuarantineRecord]:
        """Up to ``count`` records of bad data the runners set aside, oldest first, from
        record id ``start`` (see [Bad data in Redis](reliability.md#bad-data-in-redis))."""
        return await list_quarantined(self._open_broker(), count, start)

    async def purge_quarantine(self) -> int:
        """Delete every quarantine record; return how many there were."""
        return await self._open_broker().purge_quarantine()

    async def quarantine_count(self) -> int:
        """Records in the group's quarantine stream."""
        return await self._open_broker().quarantine_count()

    async def dead_letter_count(self) -> int:
        """The number of entries in the group's dead-letter stream."""
        return await self._open_broker().dead_count()
