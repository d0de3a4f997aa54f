"""Dispatching: shared by the runner and the producer-only client."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from ._redis import Broker
from .errors import RunnerNotRunning, TaskNotFound
from .message import encode_message
from .task import TaskRegistry

__all__ = ["Producer"]


class Producer:
    """Dispatch methods; subclasses provide the broker while they are open."""

    _broker: Broker | None = None
    _registry: TaskRegistry | None = None
    _max_payload_bytes: int

    def _open_broker(self) -> Broker:
        if self._broker is None:
            raise RunnerNotRunning(f"{type(self).__name__} is not open")
        return self._broker

    def _encode(self, task_name: str, payload: Any, now: float) -> bytes:
        if not isinstance(task_name, str):
            raise TypeError(f"task_name must be a str, got {type(task_name).__name__}")
        if not task_name:
            raise ValueError("task_name must not be empty")
        if self._registry is not None and task_name not in self._registry:
            raise TaskNotFound(task_name)
        return encode_message(
            task_name, payload, enqueued_at=now, max_bytes=self._max_payload_bytes
        )

    async def dispatch(self, task_name: str, payload: Any = None) -> str:
        """Enqueue one task; return its message id (also the task's id).

        The payload must be JSON-serializable; a bad payload or an unknown task name raises
        before anything is written to Redis.
        """
        broker = self._open_broker()
        return await broker.enqueue(self._encode(task_name, payload, time.time()))

    async def dispatch_many(self, task_name: str, payloads: Iterable[Any]) -> list[str]:
        """Enqueue one task per payload, in one round trip per 1000; return their ids.

        Every payload is encoded first: if one is bad, nothing is written.
        """
        broker = self._open_broker()
        now = time.time()
        datas = [self._encode(task_name, payload, now) for payload in payloads]
        if not datas:
            return []
        return await broker.enqueue_many(datas)

    async def queue_length(self) -> int:
        """Entries in the group's stream (XLEN): waiting, or delivered and not acknowledged.

        With ``delete_on_ack=False`` acknowledged entries stay in the stream and count too.
        """
        return await self._open_broker().queue_length()

    async def pending_count(self) -> int:
        """Messages delivered to a consumer and not yet acknowledged (running, or lost)."""
        return await self._open_broker().pending_count()

    async def delayed_count(self) -> int:
        """Messages waiting in the delayed set (scheduled retries)."""
        return await self._open_broker().delayed_count()

    async def dead_letter_count(self) -> int:
        """Entries in the group's dead-letter stream."""
        return await self._open_broker().dead_count()
