"""A cron scheduler is responsible for firing each tick of each cron schedule once
group-wide: at every tick it adds the schedule's task to the group's stream.

It runs as a leader chore (in a nursery that lives exactly as long as one leadership) and
fires only through a fenced script, so a deposed leader cannot fire a tick. Every instance
has one ready: a new leader fires the latest tick it missed (once), then goes on; followers
do not touch Redis for it at all.
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
from .message import encode_message
from .task import CronSchedule, TaskRegistry

__all__ = ["CronScheduler"]

T = TypeVar("T")


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
        max_payload_bytes: int,
    ) -> None:
        self._broker = broker
        self._tasks = tasks
        self._schedules = {s.name: s for s in tasks.crons}
        self._errors = errors
        self._max_bytes = max_payload_bytes
        self.fired = 0
        self.skipped = 0

    async def run(self, elector: Elector) -> None:
        if not self._schedules:
            return
        last = await self._retrying("reading the cron state", self._broker.cron_last_fired)
        now = time.time()
        plan: dict[str, float] = {}
        for name, schedule in self._schedules.items():
            missed = schedule.prev_tick(now)
            if name in last and last[name] < int(missed * 1000):
                await self._fire(elector, schedule, missed)
            plan[name] = schedule.next_tick(now)
        while True:
            name = min(plan, key=plan.__getitem__)
            tick = plan[name]
            await trio.sleep(max(0.0, tick - time.time()))
            await self._fire(elector, self._schedules[name], tick)
            plan[name] = self._schedules[name].next_tick(max(tick, time.time()))

    async def _fire(self, elector: Elector, schedule: CronSchedule, tick: float) -> None:
        tick_ms = int(tick * 1000)
        task = self._tasks.get(schedule.task_name) if schedule.task_name in self._tasks else None
        unique_key = token = None
        lock: tuple[str, str, int] | None = None
        if task is not None and task.unique:
            unique_key, token = task.key_for(schedule.payload), secrets.token_hex(16)
            lock = (self._broker.keys.unique(unique_key), token, task.unique_for_ms)
        try:
            data = encode_message(
                schedule.task_name,
                schedule.payload,
                enqueued_at=tick,
                task_id=f"cron:{schedule.name}:{tick_ms}",
                unique_key=unique_key,
                unique_token=token,
                max_bytes=self._max_bytes,
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
            await trio.sleep(backoff.next_delay())
