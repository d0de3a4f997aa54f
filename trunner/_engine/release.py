"""The releaser hands messages back for immediate reclaim by any instance.

Released messages are moved, in one script, to the consumer ``trunner:released`` with an
idle time far above any reclaim delay, so the next reclaim pass of any instance takes them
at once. Two kinds:

* **queued** ones (:attr:`Holdings.to_release <trunner._engine.holdings.Holdings>`): fetched but
  not started at shutdown, fetched beyond a capacity lowered while the read was blocked,
  read or claimed after the group was paused, or interrupted past the drain timeout;
* **orphans**: entries pending for one of this instance's consumers that it never saw.
  A read or claim that failed or was cancelled after Redis sent its reply delivered them
  ("ghost deliveries"); they never ran.

A release that *gives back* the delivery (the message never ran) also lowers its delivery
count, so the crash-redelivery rule does not count it as an attempt.
"""

from __future__ import annotations

from .._redis import MAX_IDS_PER_CALL, Broker
from .._wire.names import split_entry_id
from .counters import Counters
from .holdings import Holdings

__all__ = ["Releaser"]


class Releaser:
    """Releases what :class:`~trunner._engine.holdings.Holdings` queued, and orphans."""

    def __init__(self, broker: Broker, holdings: Holdings, counters: Counters) -> None:
        self._broker = broker
        self._holdings = holdings
        self._counters = counters

    def hand_back(self, consumer: str, message_ids: list[str]) -> None:
        """Queue for release messages delivered to ``consumer`` that will not start (read
        or claimed after the group was paused); :meth:`release_queued` releases them.

        A message this instance holds (a claim can return one running here whose
        heartbeat was late) is left alone, as the pool leaves it when it is submitted:
        released, any instance would claim it at once and run it a second time.
        """
        holdings = self._holdings
        for message_id in message_ids:
            if not holdings.holds(message_id):
                holdings.release_later(consumer, message_id)

    async def release_queued(self) -> int:
        """Release the messages queued for release; return how many were released.

        If a release fails, what it did not release is queued again (the next call
        tries again) before the error propagates: dropped from the queue, a message that
        never ran would wait pending until reclaimed past ``reclaim_delay``, and that
        delivery would count as an attempt.
        """
        by_consumer: dict[str, list[tuple[str, int]]] = {}
        for consumer, message_id, give_back in self._holdings.take_releases():
            by_consumer.setdefault(consumer, []).append((message_id, give_back))
        released = 0
        done: list[str] = []
        try:
            for consumer, entries in by_consumer.items():
                released += await self._broker.release(consumer, entries)
                done.append(consumer)
        except BaseException:
            for consumer, entries in by_consumer.items():
                if consumer not in done:
                    for message_id, give_back in entries:
                        self._holdings.release_later(consumer, message_id, give_back)
            raise
        finally:
            self._counters.released += released
        return released

    async def release_orphans(self, consumer: str, *, final: bool = False) -> int:
        """Release entries pending for ``consumer`` that this instance never saw.

        Held messages (running, or finished with the acknowledgement not written yet) are
        left alone, and so are kept ones (they ran) unless ``final`` (at shutdown): then
        they are released too, keeping their attempt. Only call this while no read or
        claim into ``consumer`` is in progress.
        """
        holdings = self._holdings
        releases: list[tuple[str, int]] = []
        for lane in self._broker.lanes:
            last = ""  # the last id of the previous page, read again first
            while True:
                start = split_entry_id(last)[1] if last else "-"
                ids = await self._broker.pending_ids(consumer, start=start, lane=lane)
                fresh = [i for i in ids if i != last]
                for message_id in fresh:
                    if holdings.holds(message_id):
                        continue
                    if message_id in holdings.kept:
                        if final:
                            releases.append((message_id, 0))
                        continue
                    releases.append((message_id, 1))
                if not fresh or len(ids) < MAX_IDS_PER_CALL:
                    break
                last = ids[-1]
        released = await self._broker.release(consumer, releases) if releases else 0
        self._counters.released += released
        return released
