"""The leader's clean-up: consumers of instances that are gone, and old finished messages.

Every ``janitor_interval`` seconds the leader

* deletes the consumers of instances that are gone: not among the live instances, idle
  for longer than twice ``max(instance_ttl, block_duration)``, and holding no pending
  entries (the check and the deletion are one script, so an entry claimed in between
  keeps its consumer). Consumers that still hold entries stay until the reclaim pass of
  some instance has taken them over; a later round deletes them;
* with ``delete_on_ack=False``, trims finished messages older than ``stream_retention``
  from the stream, never past a message that is undelivered or still pending.

Instances that stop gracefully delete their own consumers; the janitor is for those that
were killed, or lost Redis while stopping.
"""

from __future__ import annotations

import re

import trio

from ._redis import Broker
from ._util import ErrorLog, LoopBackoff, logger, wall_ms
from .config import RunnerConfig
from .election import Elector
from .errors import BackendError
from .keys import RELEASED_CONSUMER
from .quarantine import Quarantine

__all__ = ["Janitor", "instance_of"]

#: The most stream entries one trim call removes; a round repeats calls up to 100 times.
TRIM_LIMIT = 10_000
_FETCHER_SUFFIX = re.compile(r"/\d+$")


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
    ) -> None:
        self._broker = broker
        self._config = config
        self._errors = errors
        self._quarantine = quarantine
        self._own = set(own)
        self.rounds = 0
        #: Consumers deleted, and stream entries trimmed, since the runner started.
        self.consumers_deleted = 0
        self.entries_trimmed = 0
        self._lot = trio.lowlevel.ParkingLot()

    async def run(self, elector: Elector) -> None:
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
        if not self._config.delete_on_ack:  # finished messages stay: see record_floor
            await self._broker.record_floor()
        self.rounds += 1
        self.consumers_deleted += deleted
        self.entries_trimmed += trimmed
        self._lot.unpark_all()
        if deleted or trimmed:
            logger.info(
                "janitor: deleted %d consumers of instances that are gone, trimmed %d "
                "finished messages",
                deleted,
                trimmed,
            )

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
        seen_since = wall_ms() - int(config.instance_ttl * 1000)
        live = {row[0] for row in await broker.live_instances(seen_since)}
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

    async def _trim(self, elector: Elector) -> int:
        config = self._config
        if config.delete_on_ack or config.stream_retention is None:
            return 0
        before_ms = wall_ms() - int(config.stream_retention * 1000)
        total = 0
        for _ in range(100):  # bounded per round; the next round goes on
            trimmed, _ = await self._broker.trim_finished(elector, before_ms, TRIM_LIMIT)
            total += trimmed
            if trimmed < TRIM_LIMIT:
                break
            await trio.lowlevel.checkpoint()
        return total
