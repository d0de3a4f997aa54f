"""A cron scheduler is responsible for firing each tick of each cron schedule once
group-wide: at every tick it adds the schedule's task to the group's stream.

It runs as a leader chore (in a nursery that lives exactly as long as one leadership) and
fires only through a fenced script, so a deposed leader cannot fire a tick. Every instance
has one ready: a new leader fires the latest tick it missed (once), then goes on; followers
do not touch Redis for it at all.

Bad data: a schedule whose next tick cannot be computed, or whose unique key cannot be made,
is set aside (no tick of it is fired by this leader; the quarantine says why) and the other
schedules go on; a stored last tick that is not a number counts as none.

Logging: each tick fired (or skipped because the previous run of its unique task is not
finished) is logged at DEBUG; at INFO, one summary counts the ticks of each schedule: at
the first tick of a leadership, then at the first tick :data:`SUMMARY_INTERVAL` seconds or
more after the last summary, and when the leadership ends. A cron of every second so
writes one INFO line per 10 minutes, not 600; an hourly one, one per tick.
"""

from __future__ import annotations

import collections
import math
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from .._engine.quarantine import Quarantine
from .._redis import Broker
from .._util import ErrorLog, LoopBackoff, logger
from .._wire.envelope import encode_message
from .._wire.keys import UniqueLock
from .._wire.names import DEFAULT_LANE
from ..errors import BackendError, InvalidPayload
from ..registry import TaskRegistry
from ..schedule import CronSchedule
from .election import Elector

__all__ = ["CronScheduler", "TickLog"]

T = TypeVar("T")

#: A last tick fired later than this (ms) after now was not written by trunner: it counts
#: as none (``cron_fire.lua`` says the same).
MAX_AHEAD_MS = 86_400_000
#: Seconds between two INFO summaries of the ticks fired (at the first tick after).
SUMMARY_INTERVAL = 600.0


class TickLog:
    """The log of the ticks of one leadership: each at DEBUG, and summaries at INFO.

    A summary (``cron ticks since ...: 'a' fired 600, 'b' fired 1, skipped 2``) is written
    at the first tick, then at the first tick ``interval`` seconds or more after the last
    summary, and by :meth:`close` (the leadership ended) if ticks came since. ``clock``:
    monotonic seconds.
    """

    def __init__(
        self, interval: float = SUMMARY_INTERVAL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._interval = interval
        self._clock = clock
        self._since = clock()
        self._summarized: float = -math.inf
        self._fired: collections.Counter[str] = collections.Counter()
        self._skipped: collections.Counter[str] = collections.Counter()

    def fired(self, name: str, tick: float) -> None:
        logger.debug("cron %r fired its %s tick", name, time.ctime(tick))
        self._fired[name] += 1
        self._maybe_summarize()

    def skipped(self, name: str, tick: float, task: str) -> None:
        logger.debug(
            "cron %r: %s tick skipped, the previous run of unique task %r is not finished",
            name,
            time.ctime(tick),
            task,
        )
        self._skipped[name] += 1
        self._maybe_summarize()

    def close(self) -> None:
        """The leadership ended: summarize the ticks not summarized yet."""
        if self._fired or self._skipped:
            self._summarize(self._clock(), "until the leadership ended")

    def _maybe_summarize(self) -> None:
        now = self._clock()
        if now - self._summarized >= self._interval:
            first = self._summarized == -math.inf
            self._summarize(now, "since this instance took the lead" if first else "")

    def _summarize(self, now: float, when: str) -> None:
        counts = []
        for name in dict.fromkeys([*self._fired, *self._skipped]):
            count = f"{name!r} fired {self._fired[name]}"
            if self._skipped[name]:
                count += f", skipped {self._skipped[name]} (previous run not finished)"
            counts.append(count)
        when = when or f"in the last {now - self._since:.0f} s"
        logger.info("cron ticks %s: %s", when, "; ".join(counts))
        self._fired.clear()
        self._skipped.clear()
        self._since = self._summarized = now


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
        self._log = TickLog()

    async def run(self, elector: Elector) -> None:
        if not self._schedules:
            return
        self._log = TickLog()  # a summary per leadership term, from its first tick
        try:
            await self._run(elector)
        finally:
            self._log.close()

    async def _run(self, elector: Elector) -> None:
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
            self._log.fired(schedule.name, tick)
        elif outcome == -1:
            self.skipped += 1
            self._log.skipped(schedule.name, tick, schedule.task_name)

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
