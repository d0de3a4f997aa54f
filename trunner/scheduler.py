"""The leader's scheduler: due delayed tasks into the stream, and cron ticks.

Both run as leader chores (in a nursery that lives exactly as long as one leadership) and
write only through fenced scripts, so a deposed leader can neither move a delayed task nor
fire a tick. Every instance has them ready: a new leader starts moving at once; followers
do not touch Redis for them at all.

Precision: the mover sleeps until the earliest due time (at most ``MAX_SLEEP``), and is
woken early when a task due sooner is scheduled — by this instance directly, by any other
instance or client through the group's wake-up channel.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from ._redis import Broker
from ._util import ErrorLog, LoopBackoff, logger, wall_ms
from .election import Elector
from .errors import BackendError, InvalidPayload
from .message import encode_message
from .task import CronSchedule, TaskRegistry

__all__ = ["CronScheduler", "DelayedMover"]

T = TypeVar("T")

#: The most tasks one move call takes: a backlog drains batch after batch.
MOVE_BATCH = 500
#: The longest the mover sleeps without looking (a missed wake-up is caught by then).
MAX_SLEEP = 5.0


class DelayedMover:
    def __init__(
        self,
        broker: Broker,
        errors: ErrorLog,
        on_pass: Callable[[float], None] = lambda _seconds: None,
    ) -> None:
        self._broker = broker
        self._errors = errors
        self._on_pass = on_pass
        self._wake = trio.Event()
        self._next_due_ms: float | None = None
        self.passes = 0
        self.pass_seconds = 0.0
        self.moved = 0
        self.unique_dropped = 0

    def due_at(self, due_ms: int) -> None:
        """A task was scheduled for ``due_ms``: wake the mover if it is due first."""
        if self._next_due_ms is None or due_ms < self._next_due_ms:
            self._next_due_ms = due_ms
            self._wake.set()

    async def run(self, elector: Elector) -> None:
        """Move due tasks for as long as this leadership lasts (a leader chore)."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self._listen)
            await self._move(elector)

    async def _move(self, elector: Elector) -> None:
        backoff = LoopBackoff()
        while True:
            self._wake = trio.Event()
            begin = time.perf_counter()
            try:
                moved, next_due, unique = await self._broker.move_due(
                    elector, wall_ms(), MOVE_BATCH
                )
                if unique:
                    moved_unique, dropped = await self._broker.move_unique(elector, unique)
                    moved += moved_unique
                    self.unique_dropped += dropped
                    if dropped:
                        logger.warning(
                            "dropped %d of the due unique delayed tasks %s: their keys were locked",
                            dropped,
                            ", ".join(unique[:10]) + (" ..." if len(unique) > 10 else ""),
                        )
            except BackendError as exc:
                self._errors.capture(exc)
                logger.warning("moving due delayed tasks failed: %s", exc)
                await trio.sleep(backoff.next_delay())
                continue
            backoff.reset()
            self.passes += 1
            seconds = time.perf_counter() - begin
            self.pass_seconds += seconds
            self._on_pass(seconds)
            self.moved += moved
            if moved:
                logger.debug("moved %d due delayed tasks into the stream", moved)
            if moved + len(unique) >= MOVE_BATCH:
                await trio.lowlevel.checkpoint()
                continue
            self._next_due_ms = next_due
            delay = MAX_SLEEP if next_due is None else (next_due - wall_ms()) / 1000
            with trio.move_on_after(min(MAX_SLEEP, max(delay, 0.0))):
                await self._wake.wait()

    async def _listen(self, *, task_status: trio.TaskStatus[None]) -> None:
        """Wake-ups from other instances: a task due sooner than any other was scheduled."""
        subscriber = self._broker.open_wake_subscriber()
        backoff = LoopBackoff()
        try:
            try:
                await subscriber.subscribe()
            except BackendError as exc:
                logger.debug("subscribing to delayed wake-ups failed (retrying): %s", exc)
            task_status.started()
            while True:
                try:
                    data = await subscriber.next_message()
                except BackendError:
                    await trio.sleep(backoff.next_delay())
                    continue
                backoff.reset()
                try:
                    self.due_at(int(data))
                except ValueError:
                    self._wake.set()
        finally:
            with trio.CancelScope(shield=True):
                await subscriber.aclose()


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
