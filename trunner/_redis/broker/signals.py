"""Signals to a group and its waiters: cancellations and their marks, pause and resume,
and the channels they are heard on."""

from __future__ import annotations

from collections.abc import Sequence

from ..._wire.pause import decode_mark
from ...errors import RedisCommandError
from ..transports.base import Subscriber
from ..transports.resp import as_str, text_field
from ._base import BrokerBase, Record, int_or_none

__all__ = ["Signals"]


class Signals(BrokerBase):
    """Cancelling, pausing and resuming, and the subscribers that hear of it."""

    async def cancel_task(
        self,
        task_id: str,
        mark_until_ms: int,
        lock: tuple[str, str] | None,
        record: Record | None,
    ) -> str:
        """Cancel ``task_id`` wherever it is (see ``cancel_task.lua``): returns where it was
        cancelled (``delayed``, ``waiting``, ``queued``, ``running``) or ``absent``. ``lock``: its
        unique lock (key, token), released with a delayed or queued task; ``record``: its
        'cancelled' outcome, for a task that keeps its result."""
        keys = self.keys
        ttl, fields = (record[1], record[2]) if record else (0, [])
        reply = await self._script(
            "cancel_task",
            [
                keys.stream,
                keys.delayed,
                keys.delayed_messages,
                keys.delayed_unique,
                keys.where,
                keys.cancelled,
                keys.task(task_id),
                keys.retries,
                keys.retry_messages,
                keys.groups,
                keys.concurrency_waiters,
                *([lock[0]] if lock else []),
            ],
            [
                self.group,
                task_id,
                mark_until_ms,
                keys.cancel_channel,
                keys.done,
                lock[1] if lock else "",
                ttl,
                keys.queue_base,
                keys.queue,
                keys.concurrency_waiting(""),
                *(text_field(x) for pair in fields for x in pair),
            ],
        )
        return as_str(reply)

    async def cancel_marks(self, now_ms: int) -> list[str]:
        """The ids of the tasks whose cancel mark still holds at ``now_ms``."""
        reply = await self.transport.execute("HGETALL", self.keys.cancelled)
        marks = []
        for i in range(0, len(reply or ()), 2):
            until = int_or_none(reply[i + 1])
            if until is not None and until > now_ms:
                marks.append(as_str(reply[i]))
        return marks

    async def scan_hash(
        self, key: str, cursor: int, count: int
    ) -> tuple[int, list[tuple[str, str]]]:
        """One page of ``HSCAN key cursor COUNT count``: (next cursor, field/value pairs as
        text; 0 when the scan is complete)."""
        reply = await self.transport.execute("HSCAN", key, cursor, "COUNT", count)
        flat = reply[1] or []
        pairs = [(as_str(flat[i]), as_str(flat[i + 1])) for i in range(0, len(flat) - 1, 2)]
        return int(reply[0]), pairs

    async def forget_stale(
        self, now_ms: int, marks: Sequence[str], moved: Sequence[str]
    ) -> tuple[int, int]:
        """Delete the cancel marks of ``marks`` that are past (or garbage), and the
        where-map entries of ``moved`` whose stream entry is gone (see
        ``forget_stale.lua``): (marks deleted, entries deleted)."""
        keys = self.keys
        reply = await self._script(
            "forget_stale",
            [keys.cancelled, keys.where, keys.stream],
            [now_ms, len(marks), *marks, len(moved), *moved],
        )
        return int(reply[0]), int(reply[1])

    def open_cancel_subscriber(self) -> Subscriber:
        """A subscriber of the group's channel of cancelled tasks (their ids)."""
        return self.transport.open_subscriber(self.keys.cancel_channel)

    async def pause(self, now_ms: int, notice: bytes) -> tuple[bool, bytes]:
        """Pause the group (``pause.lua``) and send ``notice`` to its runners: whether this
        call paused it (False: it was paused already), and the pause mark it holds."""
        keys = self.keys
        changed, mark = await self._script(
            "pause", [keys.paused], [now_ms, keys.cancel_channel, notice]
        )
        return bool(changed), mark

    async def resume(self, notice: bytes) -> bool:
        """Resume the group (``resume.lua``) and send ``notice`` to its runners: whether it
        was paused."""
        keys = self.keys
        return bool(await self._script("resume", [keys.paused], [keys.cancel_channel, notice]))

    async def pause_mark(self) -> bytes | None:
        """The group's pause mark as stored; None when the group is not paused.

        Raises:
            RedisCommandError: ``WRONGTYPE``, when the key holds another type.
        """
        reply = await self.transport.execute("GET", self.keys.paused)
        return reply if isinstance(reply, bytes) else None

    async def paused_since(self) -> float | None:
        """When the group was paused (seconds since the epoch); None when it is not paused,
        which is also how a mark trunner did not write reads (a value of another type, or
        one :func:`~trunner._wire.pause.decode_mark` refuses)."""
        try:
            raw = await self.pause_mark()
        except RedisCommandError as exc:
            if "WRONGTYPE" not in str(exc):
                raise
            return None
        if raw is None:
            return None
        try:
            return decode_mark(raw) / 1000
        except ValueError:
            return None

    def open_done_subscriber(self) -> Subscriber:
        """A subscriber of the group's channel of finished tasks (their ids)."""
        return self.transport.open_subscriber(self.keys.done)

    def open_wake_subscriber(self) -> Subscriber:
        return self.transport.open_subscriber(self.keys.delayed_wake)
