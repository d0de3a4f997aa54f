"""The leader's chores, each fenced to its lease: trimming, moving due tasks, firing cron
ticks, and the consumers it looks after."""

from __future__ import annotations

from collections.abc import Sequence

from ..._wire.keys import UniqueLock
from ..._wire.names import DEFAULT_LANE
from ...errors import RedisCommandError
from ..scripts import SCRIPTS
from ..transports.base import Arg
from ..transports.resp import as_str
from ._base import BrokerBase, Leader

__all__ = ["Chores"]


class Chores(BrokerBase):
    """The leader's chores (fenced: ``leader`` runs them only while it leads)."""

    async def consumers(self) -> list[tuple[str, int, int]]:
        """(name, pending entries, idle ms) of every consumer of the group, over its lanes
        (pending summed, the shortest idle time)."""
        rows: dict[str, tuple[int, int]] = {}
        for stream in self._streams:
            try:
                reply = await self.transport.execute("XINFO", "CONSUMERS", stream, self.group)
            except RedisCommandError as exc:
                if "NOGROUP" in str(exc) or "no such key" in str(exc):
                    continue
                raise
            for flat in reply or ():
                info = {as_str(flat[i]): flat[i + 1] for i in range(0, len(flat) - 1, 2)}
                name, pending, idle = as_str(info["name"]), int(info["pending"]), int(info["idle"])
                if name in rows:
                    pending, idle = pending + rows[name][0], min(idle, rows[name][1])
                rows[name] = (pending, idle)
        return [(name, pending, idle) for name, (pending, idle) in rows.items()]

    async def trim_finished(self, leader: Leader, before_ms: int, limit: int) -> tuple[int, str]:
        """Trim finished messages with ids below ``before_ms`` (leader only):
        (entries trimmed, the id trimmed below). Undelivered and pending ones stay."""
        trimmed, below = 0, "0-0"
        for lane, stream in zip(self.lanes, self._streams, strict=True):
            reply = await leader.run_fenced(
                SCRIPTS.trim, [stream, self.keys.groups], [before_ms, limit]
            )
            trimmed += int(reply[0])
            if lane == DEFAULT_LANE:
                below = as_str(reply[1])
        return trimmed, below

    def _delayed_keys(self, own: bool) -> tuple[str, str, str]:
        """The delayed set, its messages and its unique hash: the queue's (delayed
        dispatches), or with ``own`` the group's (its retries; the same keys for a group
        reading its own queue)."""
        keys = self.keys
        if own:
            return keys.retries, keys.retry_messages, keys.retry_unique
        return keys.delayed, keys.delayed_messages, keys.delayed_unique

    async def move_due(
        self, leader: Leader, now_ms: int, limit: int, *, own: bool = False
    ) -> tuple[int, float | None, list[str]]:
        """Move up to ``limit`` due tasks: (moved, earliest remaining due ms, due unique ids)
        of the queue's delayed set, or with ``own`` of the group's retries.

        Due unique tasks are left for :meth:`move_unique` (their locks must be in KEYS).
        """
        keys = self.keys
        delayed, messages, unique = self._delayed_keys(own)
        reply = await leader.run_fenced(
            SCRIPTS.move_due,
            [delayed, messages, keys.stream, unique, keys.where],
            [now_ms, limit],
        )
        moved = int(reply[0])
        nxt = float(reply[1]) if reply[1] is not None else None
        return moved, nxt, [as_str(i) for i in reply[2]]

    async def move_unique(
        self, leader: Leader, task_ids: Sequence[str], *, own: bool = False
    ) -> tuple[int, int, list[tuple[str, bytes, str]]]:
        """Move due unique tasks, each taking its lock.

        Returns (moved, dropped because their lock was held, bad): ``bad`` holds (task id,
        stored lock, why it cannot be read) of the tasks whose lock is not what
        :class:`~trunner._wire.keys.UniqueLock` writes; they are not moved (set them aside).
        """
        keys = self.keys
        delayed, messages, unique = self._delayed_keys(own)
        specs = await self.transport.execute("HMGET", unique, *task_ids)
        locks: list[str] = []
        args: list[Arg] = []
        bad: list[tuple[str, bytes, str]] = []
        for task_id, spec in zip(task_ids, specs, strict=True):
            if spec is None:
                continue  # cancelled meanwhile
            try:
                lock = UniqueLock.decode(spec)
            except ValueError as exc:
                bad.append((task_id, spec, f"its unique lock cannot be read: {exc}"))
                continue
            locks.append(lock.key)
            args += [task_id, lock.token, lock.ttl_ms]
        if not locks:
            return 0, 0, bad
        reply = await leader.run_fenced(
            SCRIPTS.move_unique,
            [
                delayed,
                messages,
                keys.stream,
                unique,
                keys.where,
                keys.quarantine,
                *locks,
            ],
            args,
        )
        return int(reply[0]), int(reply[1]), bad

    async def set_aside_delayed(
        self, leader: Leader, task_id: str, record: Sequence[tuple[str, Arg]], maxlen: int
    ) -> bool:
        """Move a delayed task out of the delayed keys into a quarantine record (with its
        message); False when it was no longer delayed."""
        keys = self.keys
        flat: list[Arg] = [x for pair in record for x in pair]
        reply = await leader.run_fenced(
            SCRIPTS.set_aside_delayed,
            [keys.delayed, keys.delayed_messages, keys.delayed_unique, keys.quarantine],
            [task_id, maxlen, *flat],
        )
        return bool(reply)

    async def fire_cron(
        self,
        leader: Leader,
        name: str,
        tick_ms: int,
        data: bytes,
        lock: UniqueLock | None = None,
        task_id: str | None = None,
    ) -> int:
        """Enqueue one tick of a cron schedule unless it was already fired.

        ``lock``: the lock of a unique task; ``task_id``: the tick's (default
        ``cron:<name>:<tick ms>``). Returns 1 when fired, 0 when the tick was already
        fired, -1 when its key was locked (the tick is skipped).
        """
        keys = [
            self.keys.cron,
            self.keys.stream,
            self.keys.where,
            self.keys.quarantine,
            *([lock.key] if lock else []),
        ]
        tick_id = task_id or f"cron:{name}:{tick_ms}"
        args: list[Arg] = [name, tick_ms, data, tick_id]
        args += [lock.token, lock.ttl_ms] if lock else []
        return int(await leader.run_fenced(SCRIPTS.cron_fire, keys, args))

    async def cron_last_fired(self) -> tuple[dict[str, int], list[tuple[str, bytes]]]:
        """The last tick fired per schedule (ms), and the (name, value) of the entries
        that are not a tick (left in place: the next tick fired replaces them)."""
        reply = await self.transport.execute("HGETALL", self.keys.cron)
        fired: dict[str, int] = {}
        bad: list[tuple[str, bytes]] = []
        for i in range(0, len(reply or ()), 2):
            name, value = as_str(reply[i]), reply[i + 1]
            # What cron_fire.lua reads as a tick: ASCII digits, at most 15 (int() also
            # takes ' 7', '+7' and '1_000', which the script does not).
            if value.isdigit() and len(value) <= 15:
                fired[name] = int(value)
            else:
                bad.append((name, value))
        return fired, bad
