"""The leader's clean-up: consumers of instances that are gone, and old finished messages.

Every ``janitor_interval`` seconds the leader

* deletes the consumers of instances that are gone: not among the live instances, idle
  for longer than twice ``max(instance_ttl, block_duration)``, and holding no pending
  entries (the check and the deletion are one script, so an entry claimed in between
  keeps its consumer). Consumers that still hold entries stay until the reclaim pass of
  some instance has taken them over; a later round deletes them;
* with ``delete_on_ack=False``, trims finished messages older than ``stream_retention``
  from the stream, never past a message that is undelivered or still pending;
* on a queue that several groups read, where acknowledging deletes nothing, trims what
  every group has finished (with ``delete_on_ack=True``, every ``SHARED_TRIM_INTERVAL``
  seconds), and forgets the groups of the queue's registry that are gone (destroyed by
  hand);
* frees the concurrency slots whose holder is gone (see ``reconcile_slots.lua``), a page
  of limits per round;
* forgets what outlived its use, a page of each per round: cancel marks past their time
  (a cancelled task that nobody fetched again within a day), and where-map entries of
  moved tasks whose stream entry is gone. A value that is not what trunner writes there
  is deleted too, and set aside in the quarantine with its reason;
* looks at a page of the group's index of live workflows (see
  :mod:`trunner._leader.workflows`): a workflow whose producer stopped between the chunks
  of its start is cancelled; an entry whose workflow is gone leaves the index; a bad one
  is set aside with its reason.

Apart from the rounds, and whatever ``janitor_interval`` is, the leader records the group's
floor every ``FLOOR_INTERVAL`` seconds wherever the stream keeps finished messages
(``delete_on_ack=False``, or a queue that several groups read): a consumer group that is
lost is recreated from it (see ``Broker.record_floor``), so what it runs again is bounded
by that interval, not by ``janitor_interval``.

Instances that stop gracefully delete their own consumers; the janitor is for those that
were killed, or lost Redis while stopping.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

import trio

from .._engine.quarantine import Quarantine
from .._redis import Broker
from .._util import ErrorLog, LoopBackoff, logger, wall_ms
from .._wire.keys import RELEASED_CONSUMER
from .._wire.names import is_lane_entry_id
from ..config import RunnerConfig
from ..errors import BackendError
from .election import Elector
from .workflows import WorkflowIndex

__all__ = ["Janitor", "instance_of"]

#: The most stream entries one trim call removes; a round repeats calls up to 100 times.
TRIM_LIMIT = 10_000
#: How often the leader trims a queue that several groups read (seconds), where
#: acknowledging deletes nothing (with ``delete_on_ack=True``).
SHARED_TRIM_INTERVAL = 2.0
#: How often the leader records the group's floor (seconds), where the stream keeps
#: finished messages: a lost group runs again what finished since the last record.
FLOOR_INTERVAL = 1.0
#: How many cancel marks, and where-map entries, one round looks at (HSCAN COUNT).
SWEEP_PAGE = 500
#: The most digits of a time in ms (int64).
MAX_MS_DIGITS = 19
_FETCHER_SUFFIX = re.compile(r"/\d+$")


def _is_time_ms(value: str) -> bool:
    """Whether a cancel mark holds what trunner writes: a time in ms, in ASCII digits
    (``str.isdigit`` also takes ``²`` and other digits ``int`` refuses, and ``int`` refuses
    more than 4300 digits)."""
    return value.isascii() and value.isdigit() and len(value) <= MAX_MS_DIGITS


def instance_of(consumer: str) -> str:
    """The instance a consumer name belongs to (fetchers after the first add ``/<n>``)."""
    return _FETCHER_SUFFIX.sub("", consumer)


class Janitor:
    def __init__(
        self,
        broker: Broker,
        config: RunnerConfig,
        errors: ErrorLog,
        quarantine: Quarantine,
        own: list[str],
        limits: Mapping[str, int] | None = None,
        marks: Callable[[], Iterable[str]] = tuple,
    ) -> None:
        self._broker = broker
        #: The concurrency limit of each task this runner knows (task name -> limit).
        self._limits = dict(limits or {})
        #: Concurrency slots freed because their holder was gone (see reconcile_slots.lua).
        self.slots_freed = 0
        self._config = config
        self._errors = errors
        self._quarantine = quarantine
        self._own = set(own)
        self.rounds = 0
        #: Consumers deleted, and stream entries trimmed, since the runner started.
        self.consumers_deleted = 0
        self.entries_trimmed = 0
        #: Passes of the trim of a queue that several groups read (see _trim_shared).
        self.shared_passes = 0
        #: Cancel marks and where-map entries forgotten since the runner started.
        self.forgotten = 0
        #: Floors recorded by the floor loop (see FLOOR_INTERVAL) since the runner started.
        self.floors_recorded = 0
        #: The page of the group's index of live workflows each round looks at.
        self.workflows = WorkflowIndex(broker, errors, quarantine, marks)
        self._cursors = {"cancelled": 0, "where": 0}
        self._lot = trio.lowlevel.ParkingLot()

    async def run(self, elector: Elector) -> None:
        async with trio.open_nursery() as nursery:
            if self._config.delete_on_ack:
                nursery.start_soon(self._trim_shared, elector)
            nursery.start_soon(self._keep_floor)
            nursery.start_soon(self.workflows.sweep_marked)
            await self._rounds(elector)

    async def _keep_floor(self) -> None:
        """Keep the group's floor current where the stream keeps finished messages, so
        that a group lost and recreated from it runs again only what finished in the last
        ``FLOOR_INTERVAL`` (and after a message still pending then): one short script per
        lane and second, on the leader alone."""
        backoff = LoopBackoff()
        while True:
            await trio.sleep(FLOOR_INTERVAL)
            try:
                if not self._config.delete_on_ack or await self._broker.shared():
                    await self._broker.record_floor()
                    self.floors_recorded += 1
            except BackendError as exc:
                self._errors.capture(exc)
                logger.warning("recording the group's floor failed: %s", exc)
                await self._quarantine.after_error(exc)
                await trio.sleep(backoff.next_delay())
            else:
                backoff.reset()

    async def _trim_shared(self, elector: Elector) -> None:
        """While several groups read the queue, trim what they all finished, often: their
        acknowledgements delete nothing."""
        backoff = LoopBackoff()
        while True:
            await trio.sleep(SHARED_TRIM_INTERVAL)
            try:
                if await self._broker.shared():
                    self.entries_trimmed += await self._trim_below(elector, wall_ms())
                    self.shared_passes += 1
            except BackendError as exc:
                self._errors.capture(exc)
                logger.warning("trimming the shared queue failed: %s", exc)
                await trio.sleep(backoff.next_delay())
            else:
                backoff.reset()

    async def _rounds(self, elector: Elector) -> None:
        interval = self._config.janitor_interval
        if interval is None:
            return
        backoff = LoopBackoff()
        while True:
            await trio.sleep(interval)
            try:
                await self.round(elector)
            except BackendError as exc:
                self._errors.capture(exc)
                logger.warning("the janitor's round failed: %s", exc)
                await self._quarantine.after_error(exc)
                await trio.sleep(backoff.next_delay())
            else:
                backoff.reset()

    async def round(self, elector: Elector) -> None:
        """One round: delete gone instances' consumers, trim old finished messages."""
        deleted = await self._delete_gone_consumers()
        trimmed = await self._trim(elector)
        if not self._config.delete_on_ack or await self._broker.shared():
            await self._broker.record_floor()  # finished messages stay: see record_floor
            if gone := await self._broker.forget_gone_groups():
                logger.info(
                    "janitor: groups %s no longer read the queue %s: forgotten",
                    ", ".join(gone),
                    self._broker.keys.queue,
                )
        forgotten = await self._forget_stale()
        await self._reconcile_slots()
        try:
            await self.workflows.page()
        except BackendError as exc:  # its own: the round's other duties are done
            self._errors.capture(exc)
            logger.warning("janitor: the page of workflows failed: %s", exc)
            await self._quarantine.after_error(exc)
        self.rounds += 1
        self.consumers_deleted += deleted
        self.entries_trimmed += trimmed
        self.forgotten += forgotten
        self._lot.unpark_all()
        if deleted or trimmed:
            logger.info(
                "janitor: deleted %d consumers of instances that are gone, trimmed %d "
                "finished messages",
                deleted,
                trimmed,
            )

    async def _reconcile_slots(self) -> None:
        """Free the concurrency slots whose holder is gone (a granted waiter cancelled
        before anyone fetched it, an entry deleted by hand ...), a page of limits per
        round; see ``reconcile_slots.lua``."""
        broker = self._broker
        cursor, keys = await broker.concurrency_limits(self._cursors.get("slots", 0), SWEEP_PAGE)
        self._cursors["slots"] = cursor
        for key in keys:
            try:
                freed, held, waiting = await broker.reconcile_slots(key, self._limit_of(key))
            except BackendError as exc:  # this limit's keys: the others are still looked at
                self._errors.capture(exc)
                logger.warning("janitor: reconciling the slots of %s failed: %s", key, exc)
                await self._quarantine.after_error(exc)
                continue
            if freed:
                self.slots_freed += freed
                logger.warning(
                    "janitor: freed %d concurrency slots of %s whose holder was gone "
                    "(%d held, %d waiting now)",
                    freed,
                    key,
                    held,
                    waiting,
                )

    def _limit_of(self, key: str) -> int:
        """The limit of a concurrency limit's key ``<len>:<task>[:<key>]``; 0 when the task
        is not one this runner knows (its slots are freed, and granted by the next
        admission or release)."""
        length, _, rest = key.partition(":")
        if not length.isdigit():
            return 0
        return self._limits.get(rest[: int(length)], 0)

    async def wait_rounds(self, count: int) -> None:
        """Wait until ``count`` rounds have completed since the runner started."""
        while self.rounds < count:
            await self._lot.park()

    async def _delete_gone_consumers(self) -> int:
        config = self._config
        broker = self._broker
        consumers = await broker.consumers()
        if not consumers:
            return 0
        now_ms = wall_ms()
        seen_since = now_ms - int(config.instance_ttl * 1000)
        live = {row[0] for row in await broker.live_instances(seen_since, now_ms)}
        idle_ms = int(2000 * max(config.instance_ttl, config.block_duration))
        deleted = 0
        for name, pending, idle in consumers:
            if (
                pending
                or idle <= idle_ms
                or name in self._own
                or name == RELEASED_CONSUMER
                or instance_of(name) in live
            ):
                continue
            if await broker.delete_consumer_if_idle(name):
                deleted += 1
        return deleted

    async def _forget_stale(self) -> int:
        """One page each of the cancel marks and the where-map: those past their use go."""
        broker = self._broker
        keys = broker.keys
        now = wall_ms()
        pages: dict[str, list[tuple[str, str]]] = {}
        for name, key in (("cancelled", keys.cancelled), ("where", keys.where)):
            cursor, pairs = await broker.scan_hash(key, self._cursors[name], SWEEP_PAGE)
            self._cursors[name] = cursor
            pages[name] = pairs
        marks = []
        for task_id, until in pages["cancelled"]:
            if not _is_time_ms(until):
                await self._set_aside("cancelled", task_id, until, "not a time in ms")
                marks.append(task_id)
            elif int(until) <= now:
                marks.append(task_id)
        moved = []
        for task_id, entry in pages["where"]:
            if not is_lane_entry_id(entry):
                await self._set_aside("where", task_id, entry, "not a stream entry id")
            moved.append(task_id)  # the script deletes those whose entry is gone
        if not (marks or moved):
            return 0
        gone_marks, gone_moved = await broker.forget_stale(now, marks, moved)
        if gone_marks or gone_moved:
            logger.info(
                "janitor: forgot %d cancel marks past their time and %d where-map entries "
                "of messages that are gone",
                gone_marks,
                gone_moved,
            )
        return gone_marks + gone_moved

    async def _set_aside(self, source: str, task_id: str, value: str, reason: str) -> None:
        await self._quarantine.set_aside(
            source, task_id, f"{reason}: {value[:100]!r}", value, action="deleted"
        )

    async def _trim(self, elector: Elector) -> int:
        config = self._config
        if config.delete_on_ack or config.stream_retention is None:
            return 0
        return await self._trim_below(elector, wall_ms() - int(config.stream_retention * 1000))

    async def _trim_below(self, elector: Elector, before_ms: int) -> int:
        """Trim the finished messages older than ``before_ms`` (ms since the epoch)."""
        total = 0
        for _ in range(100):  # bounded per round; the next round goes on
            trimmed, _ = await self._broker.trim_finished(elector, before_ms, TRIM_LIMIT)
            total += trimmed
            if trimmed < TRIM_LIMIT:
                break
            await trio.lowlevel.checkpoint()
        return total
