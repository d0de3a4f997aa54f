"""A cron scheduler is responsible for firing each tick of each cron schedule once
group-wide: at every tick it adds the schedule's task to the group's stream.

It runs as a leader chore (in a nursery that lives exactly as long as one leadership) and
fires only through a fenced script, so a deposed leader cannot fire a tick. Every instance
has one ready: a new leader fires the latest tick it missed (once), then goes on; followers
do not touch Redis for it at all.

Bad data: a schedule whose next tick cannot be computed, or whose unique key cannot be made,
is set aside (no tick of it is fired by this leader; the quarantine says why) and the other
schedules go on; a stored last tick that is not a number counts as none.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from ._redis import Broker
from ._util import ErrorLog, LoopBackoff, logger
from .election import Elector
from .errors import BackendError, InvalidPayload
from .keys import DEFAULT_LANE, UniqueLock
from .message import encode_message
from .quarantine import Quarantine
from .task import CronSchedule, TaskRegistry

__all__ = ["CronScheduler"]

T = TypeVar("T")

#: A last tick fired later than this (ms) after now was not written by trunner: it counts
#: as none (``cron_fire.lua`` says the same).
MAX_AHEAD_MS = 86_400_000


class CronScheduler:
    """Fires each tick of each cron schedule once group-wide (a leader chore).

    A tick's task id is ``cron:<schedule>:<tick ms>``; the group keeps the last tick fired
    per schedule, and firing is a fenced script that refuses a tick not after it. A new
    leader fires the latest tick it missed (once, not every missed one), then goes on.
    """

    def __init__(
        self,
        broker: Broker,
        tasks: TaskRegistry,
        errors: ErrorLog,
        quarantine: Quarantine,
        max_payload_bytes: int,
    ) -> None:
        self._broker = broker
        self._tasks = tasks
        self._schedules = {s.name: s for s in tasks.crons}
        self._errors = errors
        self._quarantine = quarantine
        self._max_bytes = max_payload_bytes
        self.fired = 0
        self.skipped = 0

    async def run(self, elector: Elector) -> None:
        if not self._schedules:
            return
        last = await self._retrying("reading the cron state", self._last_fired)
        now = time.time()
        plan: dict[str, float] = {}
        for name, schedule in self._schedules.items():
            try:
                missed, upcoming = schedule.prev_tick(now), schedule.next_tick(now)
            except ValueError as exc:  # croniter found no tick (a zone or its data changed)
                await self._set_aside(schedule, f"its ticks cannot be computed: {exc}")
                continue
            if name in last and last[name] < int(missed * 1000):
                await self._fire(elector, schedule, missed)
            plan[name] = upcoming
        while plan:
            name = min(plan, key=plan.__getitem__)
            tick = plan[name]
            await trio.sleep(max(0.0, tick - time.time()))
            schedule = self._schedules[name]
            await self._fire(elector, schedule, tick)
            try:
                plan[name] = schedule.next_tick(max(tick, time.time()))
            except ValueError as exc:
                del plan[name]
                await self._set_aside(schedule, f"its next tick cannot be computed: {exc}")

    async def _last_fired(self) -> dict[str, int]:
        fired, bad = await self._broker.cron_last_fired()
        action = "left in place: the next tick fired replaces it"
        for name, value in bad:
            reason = "the last tick fired is not a number"
            await self._quarantine.set_aside("cron", name, reason, value, action)
        latest = int(time.time() * 1000) + MAX_AHEAD_MS
        for name, tick in list(fired.items()):
            if tick > latest:  # cron_fire.lua fires over it too
                del fired[name]
                reason = "the last tick fired is more than a day ahead"
                await self._quarantine.set_aside("cron", name, reason, str(tick), action)
        return fired

    async def _set_aside(self, schedule: CronSchedule, reason: str) -> None:
        await self._quarantine.set_aside(
            "cron",
            schedule.name,
            reason,
            schedule.expression,
            "not fired by this leader: correct the schedule and restart the runners",
        )

    async def _fire(self, elector: Elector, schedule: CronSchedule, tick: float) -> None:
        tick_ms = int(tick * 1000)
        task = self._tasks.get(schedule.task_name) if schedule.task_name in self._tasks else None
        unique_key = token = None
        lock: UniqueLock | None = None
        if task is not None and task.unique:
            try:
                unique_key = task.key_for(schedule.payload)
            except Exception as exc:  # noqa: BLE001 - the user's unique_key function
                await self._set_aside(schedule, f"its unique key cannot be made: {exc!r}")
                return
            token = secrets.token_hex(16)
            lock = UniqueLock(self._broker.keys.unique(unique_key), token, task.unique_for_ms)
        try:
            data = encode_message(
                schedule.task_name,
                schedule.payload,
                enqueued_at=tick,
                task_id=f"cron:{schedule.name}:{tick_ms}",
                unique_key=unique_key,
                unique_token=token,
                headers=schedule.headers,
                group=self._broker.keys.group,
                max_bytes=self._max_bytes,
                lane=task.priority if task is not None else DEFAULT_LANE,
            )
        except InvalidPayload as exc:  # too large for this runner's max_payload_bytes
            self._errors.capture(exc)
            logger.error(
                "cron %r: tick skipped, its payload cannot be sent: %s", schedule.name, exc
            )
            return

        async def fire() -> int:
            return await self._broker.fire_cron(elector, schedule.name, tick_ms, data, lock)

        outcome = await self._retrying(f"firing cron {schedule.name!r}", fire)
        if outcome == 1:
            self.fired += 1
            logger.info("cron %r fired its %s tick", schedule.name, time.ctime(tick))
        elif outcome == -1:
            self.skipped += 1
            logger.info(
                "cron %r: %s tick skipped, the previous run of unique task %r is not finished",
                schedule.name,
                time.ctime(tick),
                schedule.task_name,
            )

    async def _retrying(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """Call until it succeeds: Redis errors are reported and retried with backoff.

        (A refused fenced write raises LeadershipLost, and a demotion cancels the chore.)
        """
        backoff = LoopBackoff()
        while True:
            try:
                return await call()
            except BackendError as exc:
                self._errors.capture(exc)
                logger.warning("%s failed: %s", what, exc)
                await self._quarantine.after_error(exc)
            await trio.sleep(backoff.next_delay())
