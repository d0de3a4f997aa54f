"""The acknowledgement buffer (trunner/_engine/acks.py) on its own."""

from __future__ import annotations

from typing import Any

import trio

from trunner._engine.acks import AckBuffer
from trunner._engine.holdings import Holdings
from trunner._redis import SCRIPTS, Broker, open_transport
from trunner._util import ErrorLog
from trunner._wire.keys import Keys
from trunner.message import encode_message
from trunner.statistics import Counters

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
