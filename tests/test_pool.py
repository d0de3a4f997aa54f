"""Pieces of the pool on their own."""

from __future__ import annotations

from typing import Any

import trio

from trunner._redis import Broker, open_transport
from trunner._redis.scripts import SCRIPTS
from trunner._util import ErrorLog
from trunner.keys import Keys
from trunner.pool import AckBuffer
from trunner.stats import Counters

from .conftest import config
from .faults import FaultyTransport, script_call


async def test_a_cancelled_or_failed_flush_keeps_its_acknowledgements(
    url: str, group: str, raw: Any
) -> None:
    async with open_transport(url, client_name="t", max_connections=2, connect_timeout=5) as t:
        faulty = FaultyTransport(t)
        broker = Broker(faulty, Keys("trunner", group))
        await broker.ensure_group()
        ids = await broker.enqueue_many([b"a", b"b"])
        raw.xreadgroup(group, "c", {f"trunner:{{{group}}}:stream": ">"})
        acks = AckBuffer(broker, config(group), Counters(), ErrorLog())
        for message_id in ids:
            acks.add(message_id)

        faulty.hold(script_call(SCRIPTS.ack))
        with trio.move_on_after(0.05):
            await acks.flush()  # cancelled while Redis "does not answer"
        assert all(acks.holds(i) for i in ids)
        assert len(acks) == 2

        faulty.release_held()
        faulty.fail(script_call(SCRIPTS.ack))
        assert await acks.flush() is False
        assert all(acks.holds(i) for i in ids)

        faulty.fail(None)
        assert await acks.flush() is True
        assert not any(acks.holds(i) for i in ids)
        assert len(acks) == 0
        assert await broker.pending_count() == 0
