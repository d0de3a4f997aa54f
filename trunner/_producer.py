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
    read_instances,
    read_stats,
    replay_dead,
)
from .errors import RunnerNotRunning, TaskAlreadyDispatched
from .group_stats import GroupStats, InstanceInfo
from .keys import DelayedLock
from .message import MessageDecodeError, decode_message, encode_message
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
        """Enqueue one task; return its message id (also the task's id).

        The payload must be JSON-serializable; a bad payload or an unknown task name raises
        before anything is written to Redis. A unique task whose key is already queued
        raises :class:`~trunner.TaskAlreadyDispatched`.
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
        """Enqueue one task per payload, in one round trip per 1000; return their ids.

        Every payload is encoded first: if one is bad, nothing is written. For a unique
        task, payloads whose key is already queued (or repeats an earlier one of the same
        call) are refused, the others enqueued, and :class:`~trunner.TaskAlreadyDispatched`
        says which were refused (``refused``) and gives every id (``ids``).
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
        """Enqueue a task to run ``delay`` from now (seconds, or a timedelta); return its id.

        A delay of 0 means as soon as possible. The id can be passed to
        :meth:`cancel_delayed`; it is also the task's ``task_id`` when it runs.
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
        """Enqueue a task to run at ``when`` (an aware datetime); return its id.

        A time in the past means as soon as possible.
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
            lock = DelayedLock(broker.keys.unique(unique.key), unique.token, unique.ttl_ms)
        await broker.schedule(task_id, due_ms, data, lock)
        self._scheduled(due_ms)
        return task_id

    def _scheduled(self, due_ms: int) -> None:
        """A delayed task was added (the runner wakes its scheduler if it leads)."""

    async def cancel_delayed(self, delayed_id: str) -> bool:
        """Remove a delayed task that is not due yet; return whether it was found.

        Cancelling the scheduled retry of a unique task releases its key's lock.
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
        """The group's statistics over the current window (the same from any instance).

        Group-wide and read from Redis; ``Runner.statistics()`` is this instance's own.
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
        """The group's live instances, and which one leads."""
        return await read_instances(self._open_broker(), self._instance_ttl)

    async def inspect(self) -> GroupInfo:
        """The group at a glance: queue, pending per consumer, delayed, dead letters,
        instances, leader, capacity decision and the leader's last statistics."""
        return await inspect_group(self._open_broker(), self._instance_ttl)

    async def dead_letters(self, count: int = 100, start: str = "-") -> list[DeadLetter]:
        """Up to ``count`` dead-letter entries, oldest first, from entry id ``start``."""
        return await list_dead(self._open_broker(), count, start)

    async def replay_dead_letters(self, ids: Sequence[str] | None = None) -> ReplayResult:
        """Enqueue dead letters again as fresh first attempts (all of them with None).

        A dead letter of a unique task takes its key's lock again, atomically with its
        re-enqueue; if the key is locked (a task of that key is queued or running), it is
        not replayed and stays in the dead-letter stream. Returns a
        :class:`~trunner.ReplayResult`: the new stream ids, and why each entry that was
        not replayed was not (it unpacks as ``(new ids, ids not replayed)``).
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
        """Delete every dead-letter entry; return how many there were."""
        return await self._open_broker().purge_dead()

    async def queue_length(self) -> int:
        """Entries in the group's stream (XLEN): waiting, or delivered and not acknowledged.

        With ``delete_on_ack=False`` acknowledged entries stay in the stream and count too.
        """
        return await self._open_broker().queue_length()

    async def pending_count(self) -> int:
        """Messages delivered to a consumer and not yet acknowledged (running, or lost)."""
        return await self._open_broker().pending_count()

    async def delayed_count(self) -> int:
        """Tasks waiting in the delayed set (delayed dispatches and scheduled retries)."""
        return await self._open_broker().delayed_count()

    async def dead_letter_count(self) -> int:
        """Entries in the group's dead-letter stream."""
        return await self._open_broker().dead_count()
