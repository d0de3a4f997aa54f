"""The quarantine sets bad data aside, so that one bad value costs that value, never a loop.

Every loop of a runner that reads data from Redis or from the user's configuration (the
delayed mover, cron, the aggregator, the janitor, the reporter, the elector, the fetchers
and the pool) contains an error to the item that caused it: the item is *set aside* with
its reason, and the loop goes on. Setting aside means, at once:

* a record in the group's quarantine stream (:attr:`Keys.quarantine
  <trunner._wire.keys.Keys.quarantine>`): where the item was read, which one, why it is bad, what
  was done with it, and its value as read (so nothing is lost); ``trunner inspect`` counts
  them, ``trunner quarantine list`` shows them, :meth:`Admin.quarantined
  <trunner.admin.Admin.quarantined>` reads them;
* one more in ``statistics().quarantined``;
* a :class:`~trunner.errors.BadData` through ``Runner.errors()``;
* one log line at ERROR, once per item and reason in the life of the runner (a bad value
  left in place and read again every round is recorded and logged once).

Messages that cannot run (undecodable entries, unknown tasks) go to the dead-letter stream
instead, where they can be replayed.
"""

from __future__ import annotations

import collections

import trio

from .._redis import Broker
from .._util import ErrorLog, logger, wall_ms
from .._wire.quarantine import QUARANTINE_MAXLEN, record_fields
from ..errors import BackendError, BadData, RedisCommandError
from .counters import Counters

__all__ = ["MAX_REMEMBERED", "REPAIR_INTERVAL", "Quarantine"]

#: How many (source, item, reason) a runner remembers to record and log each only once.
MAX_REMEMBERED = 10_000
#: The least time between two looks for keys of the wrong type (seconds, Trio clock).
REPAIR_INTERVAL = 1.0


class Quarantine:
    """Sets bad items aside for one runner (see the module docs)."""

    def __init__(self, broker: Broker, counters: Counters, errors: ErrorLog, instance: str) -> None:
        self._broker = broker
        self._counters = counters
        self._errors = errors
        self._instance = instance
        self._seen: collections.OrderedDict[tuple[str, str, str], None]
        self._seen = collections.OrderedDict()
        self._repaired_at = -REPAIR_INTERVAL

    def fields(
        self, source: str, item: str, reason: str, value: bytes | str = b"", action: str = ""
    ) -> list[tuple[str, bytes | str | int]]:
        """The record's fields, for a script that sets the item aside atomically (then
        call :meth:`noted`)."""
        return record_fields(source, item, reason, value, action, self._instance)

    def noted(self, source: str, item: str, reason: str, action: str) -> bool:
        """Count, report and log an item a script already set aside; False (nothing done)
        when this runner already noted the same item and reason."""
        key = (source, item, reason)
        if key in self._seen:
            self._seen.move_to_end(key)
            return False
        self._seen[key] = None
        while len(self._seen) > MAX_REMEMBERED:
            self._seen.popitem(last=False)
        self._counters.quarantined += 1
        error = BadData(source, item, reason)
        self._errors.capture(error)
        logger.error("%s; %s (see the quarantine: trunner quarantine list)", error, action)
        return True

    async def set_aside(
        self,
        source: str,
        item: str,
        reason: str,
        value: bytes | str = b"",
        action: str = "left in place",
    ) -> None:
        """Record a bad item (once per item and reason), count it, report it, log it.

        The record is best effort: if Redis does not take it, the error is captured and
        the loop goes on (the item is counted and logged all the same). A quarantine
        stream of the wrong type is set aside first, and the record written again.
        """
        if not self.noted(source, item, reason, action):
            return
        fields = self.fields(source, item, reason, value, action)
        for _ in range(2):  # again after setting aside a quarantine of the wrong type
            try:
                await self._broker.quarantine(fields, QUARANTINE_MAXLEN)
                return
            except BackendError as exc:
                self._errors.capture(exc)
                logger.warning("recording bad data in the quarantine failed: %s", exc)
                if not await self.after_error(exc):
                    return

    async def after_error(self, error: BaseException) -> bool:
        """Call it with a Redis error a loop got: when it says a key holds a value of the
        wrong type (someone else wrote there), every fixed key of the group with a wrong
        type is renamed aside and recorded, so the loop works again. Returns whether
        anything was set aside. At most one look per :data:`REPAIR_INTERVAL`."""
        if not isinstance(error, RedisCommandError) or "WRONGTYPE" not in str(error):
            await trio.lowlevel.checkpoint()
            return False
        now = trio.current_time()
        if now - self._repaired_at < REPAIR_INTERVAL:
            await trio.lowlevel.checkpoint()
            return False
        self._repaired_at = now
        try:
            aside = await self._broker.set_aside_wrong_types(
                self._instance, wall_ms(), QUARANTINE_MAXLEN
            )
        except BackendError as exc:
            self._errors.capture(exc)
            logger.warning("setting aside keys of the wrong type failed: %s", exc)
            return False
        for key, had, to in aside:
            self.noted(key, key, f"a {had}, not what trunner writes there", f"renamed to {to}")
        return bool(aside)
