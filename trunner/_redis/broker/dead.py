"""Dead letters and quarantine: replaying, recording, setting aside and purging."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..._wire.keys import UniqueLock
from ..transports.base import Arg
from ..transports.resp import as_str, text_field
from ._base import MAX_IDS_PER_CALL, chunks
from .inspect import Inspection

__all__ = ["Dead"]


class Dead(Inspection):
    """The dead-letter and quarantine streams, and keys set aside."""

    async def replay_dead(
        self, items: Sequence[tuple[str, bytes, UniqueLock | None, str]]
    ) -> list[str | bool | None]:
        """Move dead-letter entries ``(id, message, lock, task id)`` back into the stream,
        atomically; one with a ``lock`` (a unique task's) takes it as it enters, or stays.
        The where-map records the new entry of each task id.

        Returns per entry: its new stream id; None when it is no longer in the dead-letter
        stream; False when its lock is held (it stays in the dead-letter stream).
        """
        results: list[str | bool | None] = []
        for chunk in chunks(items, MAX_IDS_PER_CALL // 2):
            locks = [lock.key for _, _, lock, _ in chunk if lock is not None]
            args: list[Arg] = []
            for dead_id, data, lock, task_id in chunk:
                args += [dead_id, data, *((lock.token, lock.ttl_ms) if lock else ("", 0))]
                args.append(task_id)
            reply = await self._script(
                "replay_dead",
                [self.keys.dead, self.keys.stream, self.keys.where, self.keys.quarantine, *locks],
                args,
            )
            results.extend(False if r == 0 else as_str(r) if r else None for r in reply)
        return results

    async def quarantine(self, fields: Sequence[tuple[str, Arg]], maxlen: int) -> str:
        """Add a record to the quarantine stream (approximately capped at ``maxlen``); text
        that cannot be sent as it is is written with backslash escapes."""
        flat: list[Any] = [text_field(x) for pair in fields for x in pair]
        reply = await self.transport.execute(
            "XADD", self.keys.quarantine, "MAXLEN", "~", maxlen, "*", *flat
        )
        return as_str(reply)

    async def set_aside_wrong_types(
        self, instance: str, now_ms: int, maxlen: int
    ) -> list[tuple[str, str, str]]:
        """Rename every fixed key holding a value of the wrong type, recording each in the
        quarantine stream: (key, the type it had, its new name) of each (the streams and
        floors of the lanes it knows of included: :meth:`known_lanes`)."""
        keys = self.keys
        types = keys.types()
        for lane in await self.known_lanes():
            types[keys.lane_stream(lane)] = "stream"
            types[keys.lane_floor(lane)] = "string"
        flat: list[str] = []
        for key in types:
            flat += [key, keys.aside(key, now_ms)]
        reply = await self._script(
            "set_aside_keys",
            [keys.quarantine, keys.aside(keys.quarantine, now_ms), *flat],
            [maxlen, instance, now_ms, *types.values()],
        )
        return [
            (as_str(reply[i]), as_str(reply[i + 1]), as_str(reply[i + 2]))
            for i in range(0, len(reply), 3)
        ]

    async def purge_quarantine(self) -> int:
        """Delete the quarantine stream; return how many records it held."""
        replies = await self.transport.pipeline(
            [("XLEN", self.keys.quarantine), ("DEL", self.keys.quarantine)]
        )
        return int(replies[0]) if isinstance(replies[0], int) else 0

    async def delete_dead(self, ids: Sequence[str]) -> int:
        """Delete the dead-letter entries ``ids`` (XDEL, 1000 at a time); return how many
        were there."""
        deleted = 0
        for chunk in chunks(ids):
            deleted += int(await self.transport.execute("XDEL", self.keys.dead, *chunk))
        if not ids:
            await self.transport.checkpoint()
        return deleted

    async def purge_dead(self) -> int:
        """Delete the dead-letter stream; return how many entries it held."""
        replies = await self.transport.pipeline([("XLEN", self.keys.dead), ("DEL", self.keys.dead)])
        return int(replies[0]) if isinstance(replies[0], int) else 0
