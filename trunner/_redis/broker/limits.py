"""Admission of limited tasks: their rate and concurrency verdicts, and the slots of the
concurrency limits in use."""

from __future__ import annotations

from collections.abc import Sequence

from ..._wire.names import DEFAULT_LANE, lane_suffix, split_entry_id
from ..transports.base import Arg
from ..transports.resp import as_str
from ._base import MAX_ADMITS_PER_CALL, Admit, BrokerBase, Slot, chunks

__all__ = ["Limits"]


class Limits(BrokerBase):
    """Admitting messages of limited tasks, and the slots of their concurrency limits."""

    async def admit(
        self,
        message_id: str,
        task_id: str,
        now_ms: float,
        deferred: bytes,
        rate: tuple[str, float, float] | None,
        slot: Slot | None,
        slot_key: str = "",
    ) -> tuple[str, int]:
        """Admit one message of a limited task, or defer it: see :meth:`admit_many`."""
        request = Admit(message_id, task_id, deferred, rate, slot, slot_key)
        return (await self.admit_many([request], now_ms))[0]

    async def admit_many(self, requests: Sequence[Admit], now_ms: float) -> list[tuple[str, int]]:
        """Admit messages of limited tasks, or defer them (``admit.lua``, one call per
        :data:`MAX_ADMITS_PER_CALL`, in order): per message ``("run", 0)``,
        ``("rate", due ms)``, ``("wait", position)`` or ``("lost", 0)``."""
        if not self._multi:
            return await self._admit_lane(DEFAULT_LANE, requests, now_ms)
        verdicts: dict[str, tuple[str, int]] = {}
        for lane, chosen in self._by_lane(requests, lambda r: r.message_id):
            lane_verdicts = await self._admit_lane(lane, chosen, now_ms)
            verdicts.update(zip((r.message_id for r in chosen), lane_verdicts, strict=True))
        return [verdicts[r.message_id] for r in requests]

    async def _admit_lane(
        self, lane: str, requests: Sequence[Admit], now_ms: float
    ) -> list[tuple[str, int]]:
        keys = self.keys
        suffix = lane_suffix(lane)
        verdicts: list[tuple[str, int]] = []
        for chunk in chunks(requests, MAX_ADMITS_PER_CALL):
            call_keys = [
                keys.lane_stream(lane),
                keys.retries,
                keys.retry_messages,
                keys.where,
                keys.quarantine,
                keys.groups,
                keys.concurrency_keys,
                keys.stream,
            ]
            args: list[Arg] = [self.group, self._delete, repr(now_ms), keys.delayed_wake, suffix]
            for r in chunk:
                rate, slot = r.rate, r.slot
                call_keys += [
                    rate[0] if rate else keys.stream,
                    slot[0] if slot else keys.stream,
                    slot[1] if slot else keys.stream,
                ]
                args += [
                    split_entry_id(r.message_id)[1],
                    r.task_id,
                    r.deferred,
                    repr(rate[1]) if rate else "0",
                    repr(rate[2]) if rate else "0",
                    slot[2] if slot else 0,
                    r.slot_key,
                ]
            reply = await self._script("admit", call_keys, args)
            verdicts += [(as_str(v[0]), int(v[1])) for v in reply]
        return verdicts

    async def concurrency_limits(self, cursor: int, count: int) -> tuple[int, list[str]]:
        """One page of the keys of the concurrency limits in use (``SSCAN``): (next
        cursor, 0 when done; the keys)."""
        reply = await self.transport.execute(
            "SSCAN", self.keys.concurrency_keys, cursor, "COUNT", count
        )
        return int(reply[0]), [as_str(key) for key in reply[1] or ()]

    async def concurrency_usage(self, count: int = 100) -> dict[str, tuple[int, int]]:
        """Up to ``count`` concurrency limits in use: key -> (slots held, waiting); a
        holders or waiting key of another type counts as 0 (the admission script sets it
        aside)."""
        _, limits = await self.concurrency_limits(0, count)
        limits = sorted(limits)[:count]
        if not limits:
            return {}
        keys = self.keys
        commands: list[tuple[Arg, ...]] = []
        for key in limits:
            commands += [
                ("ZCARD", keys.concurrency_holders(key)),
                ("LLEN", keys.concurrency_waiting(key)),
            ]
        replies = await self.transport.pipeline(commands)
        counts = [r if isinstance(r, int) else 0 for r in replies]
        return {key: (counts[2 * i], counts[2 * i + 1]) for i, key in enumerate(limits)}

    async def reconcile_slots(self, key: str, limit: int) -> tuple[int, int, int]:
        """Free the slots of the concurrency limit ``key`` whose holder entry is gone (see
        ``reconcile_slots.lua``), granting them to its waiters when ``limit`` is known
        (> 0): (freed, held now, waiting now)."""
        keys = self.keys
        reply = await self._script(
            "reconcile_slots",
            [
                keys.stream,
                keys.concurrency_keys,
                keys.concurrency_holders(key),
                keys.concurrency_waiting(key),
                keys.where,
                keys.quarantine,
            ],
            [self.group, key, limit],
        )
        return int(reply[0]), int(reply[1]), int(reply[2])
