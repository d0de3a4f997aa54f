"""Producing: messages added to a lane's stream, unique or not, and delayed tasks kept
until they are due."""

from __future__ import annotations

from collections.abc import Sequence

from ..._wire.envelope import PAYLOAD_FIELD
from ..._wire.keys import UniqueLock
from ..._wire.names import DEFAULT_LANE, entry_id
from ..transports.base import Arg
from ..transports.resp import as_str
from ._base import MAX_IDS_PER_CALL, BrokerBase, chunks

__all__ = ["Produce"]


class Produce(BrokerBase):
    """Adding messages to the group's queue, now or when due."""

    async def declare_lanes(self, lanes: Sequence[str]) -> None:
        """Name ``lanes`` in the queue's registry of lanes."""
        await self.transport.execute("SADD", self.keys.lanes, *lanes)

    async def enqueue(self, data: bytes, lane: str = DEFAULT_LANE) -> str:
        """Add a message to ``lane``'s stream; its entry id."""
        stream = self.keys.lane_stream(lane)
        reply = await self.transport.execute("XADD", stream, "*", PAYLOAD_FIELD, data)
        return entry_id(as_str(reply), lane)

    async def enqueue_unique(
        self, items: Sequence[tuple[str, str, bytes]], ttl_ms: int, lane: str = DEFAULT_LANE
    ) -> list[str | None]:
        """Enqueue unique tasks ``(lock key, token, message)`` into ``lane``: ids, None
        where refused."""
        ids: list[str | None] = []
        stream = self.keys.lane_stream(lane)
        for chunk in chunks(items, MAX_IDS_PER_CALL // 2):
            keys = [stream, self.keys.quarantine, *(lock for lock, _, _ in chunk)]
            args: list[Arg] = [ttl_ms]
            for _, token, data in chunk:
                args += [token, data]
            reply = await self._script("enqueue_unique", keys, args)
            ids.extend(entry_id(as_str(i), lane) if i else None for i in reply)
        return ids

    async def enqueue_many(self, datas: Sequence[bytes], lane: str = DEFAULT_LANE) -> list[str]:
        """Add messages to ``lane``'s stream, in order; their entry ids."""
        ids: list[str] = []
        stream = self.keys.lane_stream(lane)
        for chunk in chunks(datas):
            reply = await self._script("enqueue_many", [stream], chunk)
            ids.extend(entry_id(as_str(i), lane) for i in reply)
        return ids

    async def schedule(
        self,
        task_id: str,
        due_ms: int,
        data: bytes,
        unique: UniqueLock | None = None,
    ) -> bool:
        """Add a delayed task (replacing one of the same id); True when it is new.

        ``unique``: the lock of a unique task, taken when it is moved.
        """
        keys = self.keys
        lock = unique.encode() if unique else ""
        reply = await self._script(
            "schedule",
            [keys.delayed, keys.delayed_messages, keys.delayed_unique],
            [task_id, due_ms, data, keys.delayed_wake, lock],
        )
        return bool(reply)

    async def delayed_message(self, task_id: str) -> bytes | None:
        reply = await self.transport.execute("HGET", self.keys.delayed_messages, task_id)
        return reply if isinstance(reply, bytes) else None

    async def cancel_delayed(self, task_id: str, lock: tuple[str, str] | None = None) -> bool:
        """Cancel a delayed task; a retry's unique ``lock`` (key, token) is released."""
        keys = self.keys
        reply = await self._script(
            "cancel_delayed",
            [
                keys.delayed,
                keys.delayed_messages,
                keys.delayed_unique,
                *([lock[0]] if lock else []),
            ],
            [task_id, lock[1] if lock else ""],
        )
        return bool(reply)
