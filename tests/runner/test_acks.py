"""The acknowledgement buffer (trunner/_engine/acks.py) on its own."""

from __future__ import annotations

from typing import Any

import trio

from trunner._engine.acks import AckBuffer
from trunner._engine.counters import Counters
from trunner._engine.holdings import Holdings
from trunner._redis import SCRIPTS, Broker, open_transport
from trunner._util import ErrorLog
from trunner._wire.envelope import encode_message
from trunner._wire.keys import Keys

from ..conftest import config
from ..support.faults import FaultyTransport, script_call
from ..support.pools import job_of


async def test_a_cancelled_or_failed_flush_keeps_its_acknowledgements(
    url: str, group: str, raw: Any
) -> None:
    async with open_transport(url, client_name="t", max_connections=2, connect_timeout=5) as t:
        faulty = FaultyTransport(t)
        broker = Broker(faulty, Keys("trunner", group))
        await broker.ensure_group()
        datas = [encode_message(n, None, enqueued_at=0.0, max_bytes=1000) for n in "ab"]
        ids = await broker.enqueue_many(datas)
        raw.xreadgroup(group, "c", {broker.keys.stream: ">"})
        holdings = Holdings()
        acks = AckBuffer(broker, config(group), holdings, Counters(), ErrorLog())
        for message_id, data in zip(ids, datas, strict=True):
            acks.add(job_of(message_id, data))

        faulty.hold(script_call(SCRIPTS.ack))
        with trio.move_on_after(0.05):
            await acks.flush()  # cancelled while Redis "does not answer"
        assert all(holdings.holds(i) for i in ids)
        assert len(holdings.finished) == 2

        faulty.release_held()
        faulty.fail(script_call(SCRIPTS.ack))
        assert await acks.flush() is False
        assert all(holdings.holds(i) for i in ids)

        faulty.fail(None)
        assert await acks.flush() is True
        assert not any(holdings.holds(i) for i in ids)
        assert len(holdings.finished) == 0
        assert await broker.pending_count() == 0


async def test_an_acknowledgement_lost_to_a_claim_of_its_own_instance_is_written_again(
    url: str, group: str, raw: Any
) -> None:
    """The instance's own reclaim claimed the message while its acknowledgement was on
    the way (after a stall): the script refused it, fenced to the delivery it was sent
    for, but the held job took the claim's delivery meanwhile (``Job.reclaimed``). The
    next flush writes it for that delivery; it is not discarded (left pending with nobody
    holding it, it would run again once reclaimed)."""
    async with open_transport(url, client_name="t", max_connections=2, connect_timeout=5) as t:
        faulty = FaultyTransport(t)
        broker = Broker(faulty, Keys("trunner", group))
        await broker.ensure_group()
        data = encode_message("a", None, enqueued_at=0.0, max_bytes=1000)
        [message_id] = await broker.enqueue_many([data])
        raw.xreadgroup(group, "c", {broker.keys.stream: ">"})
        holdings, counters = Holdings(), Counters()
        acks = AckBuffer(broker, config(group), holdings, counters, ErrorLog())
        job = job_of(message_id, data)
        acks.add(job)

        faulty.hold(script_call(SCRIPTS.ack))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(acks.flush)
            while not faulty.held:  # noqa: ASYNC110 - the fake Redis has no event
                await trio.sleep(0.001)
            raw.xclaim(broker.keys.stream, group, "c", 0, [message_id])  # its own reclaim
            job.reclaimed("c", 2)
            faulty.release_held()
        faulty.hold(None)
        assert counters.discarded == 0
        assert holdings.holds(message_id)
        assert await acks.flush() is True
        assert not holdings.holds(message_id)
        assert await broker.pending_count() == 0
