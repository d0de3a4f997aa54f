"""The limit scripts on their own (admit.lua, and the slot release in ack/retry/dead_letter):
GCRA admission with reservation, slots held by entry id, FIFO waiters granted with the
release, bad data set aside. Both tiers."""

from __future__ import annotations

import json
from typing import Any

from trunner._redis import Broker, Slot
from trunner._wire.decode import rate_reserved_at
from trunner._wire.envelope import encode_message
from trunner._wire.keys import Keys

from .test_broker import C1, deliver, owned


def message(n: int, task_id: str | None = None) -> bytes:
    task_id = task_id or f"task-{n}"
    return encode_message("t", n, enqueued_at=1.0, task_id=task_id, max_bytes=1 << 20)


def marked(n: int) -> bytes:
    return message(n)[:-1] + b',"rate_reserved":true}'


def slot_of(keys: Keys, limit: int = 2) -> Slot:
    return keys.concurrency_holders("1:t"), keys.concurrency_waiting("1:t"), limit


async def fetched(broker: Broker, count: int) -> list[str]:
    for n in range(count):
        await broker.enqueue(message(n))
    return await deliver(broker, "c1", count)


async def test_rate_gcra_reserves_and_defers_to_exact_times(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    ids = await fetched(broker, 4)
    rate = (keys.rate_limit("1:t"), 100.0, 100.0)  # 10/s, burst 2
    now = 1_000_000.0
    verdicts = [
        await broker.admit(i, f"task-{n}", now, marked(n), rate, None) for n, i in enumerate(ids)
    ]
    # Burst 2: two at once; then one every 100 ms, each reserved (tat moves on).
    assert verdicts == [("run", 0), ("run", 0), ("rate", 1_000_100), ("rate", 1_000_200)]
    assert float(raw.get(keys.rate_limit("1:t"))) == now + 400
    assert raw.zrange(keys.delayed, 0, -1, withscores=True) == [
        (b"task-2", 1_000_100.0),
        (b"task-3", 1_000_200.0),
    ]
    assert await broker.pending_count() == 2, "the deferred ones are acknowledged"
    stored = raw.hget(keys.delayed_messages, "task-3")
    assert rate_reserved_at(stored) == 1_000_200, "the mark says when it was reserved for"
    assert json.loads(stored)["payload"] == 3
    # Later, the limit admits again (its state is the theoretical arrival time).
    (late,) = await fetched(broker, 1)
    assert await broker.admit(late, "task-0", now + 400, message(0), rate, None) == ("run", 0)


async def test_concurrency_slot_held_by_entry_id_and_fifo(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    ids = await fetched(broker, 4)
    slot = slot_of(keys)
    got = [
        await broker.admit(i, f"task-{n}", 1.0, message(n), None, slot) for n, i in enumerate(ids)
    ]
    assert got == [("run", 0), ("run", 0), ("wait", 1), ("wait", 2)]
    assert sorted(raw.zrange(slot[0], 0, -1)) == sorted(x.encode() for x in ids[:2])
    # A holder delivered again (a reclaim) runs: it holds its slot already.
    assert await broker.admit(ids[0], "task-0", 2.0, message(0), None, slot) == ("run", 0)
    # The acknowledgement releases the slot and grants the oldest waiter, atomically.
    assert await broker.ack([ids[0]], slots={ids[0]: slot}, owners=owned(ids)) == (1, [])
    holders = raw.zrange(slot[0], 0, -1)
    assert len(holders) == 2
    assert ids[0].encode() not in holders
    granted = next(h.decode() for h in holders if h.decode() != ids[1])
    entry = raw.xrange(keys.stream, granted, granted)
    assert json.loads(entry[0][1][b"payload"])["payload"] == 2, "FIFO: the first waiter"
    assert raw.hget(keys.where, "task-2") == granted.encode()
    assert raw.llen(slot[1]) == 1
    # The granted message is admitted by its entry id.
    (again,) = await deliver(broker, "c1", 1)
    assert again == granted
    assert await broker.admit(granted, "task-2", 3.0, message(2), None, slot) == ("run", 0)


async def test_retry_and_dead_letter_release_the_slot(broker: Broker, raw: Any, keys: Keys) -> None:
    ids = await fetched(broker, 3)
    slot = slot_of(keys, limit=1)
    assert await broker.admit(ids[0], "task-0", 1.0, message(0), None, slot) == ("run", 0)
    assert await broker.admit(ids[1], "task-1", 1.0, message(1), None, slot) == ("wait", 1)
    assert await broker.admit(ids[2], "task-2", 1.0, message(2), None, slot) == ("wait", 2)
    assert await broker.retry(ids[0], "task-0", 5000, b"next", None, slot, owner=C1) is True
    (holder,) = raw.zrange(slot[0], 0, -1)
    (second,) = await deliver(broker, "c1", 1)
    assert holder.decode() == second
    fields: list[tuple[str, str | bytes]] = [("reason", "x")]
    dead_id = await broker.dead_letter(second, fields, 10, None, "task-1", None, slot, owner=C1)
    assert dead_id is not None
    (holder,) = raw.zrange(slot[0], 0, -1)
    (third,) = await deliver(broker, "c1", 1)
    assert holder.decode() == third
    assert raw.llen(slot[1]) == 0
    assert raw.xrange(keys.dead)[0][1] == {b"reason": b"x"}, "the limit is not a field"


async def test_bad_limit_data_is_set_aside_not_fatal(broker: Broker, raw: Any, keys: Keys) -> None:
    slot = slot_of(keys, limit=1)
    raw.set(slot[0], "junk")  # a holders key of the wrong type
    raw.set(keys.rate_limit("1:t"), "not a time")
    ids = await fetched(broker, 2)
    rate = (keys.rate_limit("1:t"), 10.0, 0.0)
    assert await broker.admit(ids[0], "task-0", 5.0, message(0), rate, slot) == ("run", 0)
    assert raw.type(slot[0]) == b"zset"
    records = raw.xrange(keys.quarantine)
    reasons = {e[1][b"item"].decode(): e[1][b"reason"].decode() for e in records}
    assert reasons[slot[0]].startswith("a string")
    assert "not a time" in reasons[keys.rate_limit("1:t")]
    # A garbage waiting-list item is quarantined, and the next waiter granted.
    raw.rpush(slot[1], "garbage", message(7))
    assert await broker.ack([ids[0]], slots={ids[0]: slot}, owners=owned(ids)) == (1, [])
    assert raw.llen(slot[1]) == 0
    (holder,) = raw.zrange(slot[0], 0, -1)
    entry = raw.xrange(keys.stream, holder, holder)
    assert json.loads(entry[0][1][b"payload"])["payload"] == 7
    values = [e[1][b"value"] for e in raw.xrange(keys.quarantine)]
    assert b"garbage" in values


async def test_a_rate_state_ahead_of_its_time_to_live_is_set_aside(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    """A state trunner wrote ends 1 s after its time; one hours further ahead than its
    time-to-live (or one that never expires) would defer the limit's tasks for as long."""
    state = keys.rate_limit("1:t")
    rate = (state, 100.0, 0.0)
    now = 1_000_000.0
    ids = await fetched(broker, 3)
    raw.set(state, f"{now + 500:.3f}", px=1500)  # as admit.lua writes it: kept, deferred
    assert await broker.admit(ids[0], "task-0", now, marked(0), rate, None) == ("rate", 1_000_500)
    raw.set(state, f"{now + 7_200_000:.3f}", px=60_000)
    assert await broker.admit(ids[1], "task-1", now, marked(1), rate, None) == ("run", 0)
    raw.set(state, f"{now + 500:.3f}")
    assert await broker.admit(ids[2], "task-2", now, marked(2), rate, None) == ("run", 0)
    reasons = [fields[b"reason"] for _, fields in raw.xrange(keys.quarantine)]
    assert reasons == [
        b"a time beyond its time-to-live, not a time in ms of a limit",
        b"a time that never expires, not a time in ms of a limit",
    ]


async def test_a_holder_whose_id_redis_refuses_is_freed(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    """A stream id part beyond 2^64 - 1 matched '^%d+-%d+$': XPENDING refused it, and the
    janitor's reconciliation of the limit failed at every round (its slot never freed)."""
    await fetched(broker, 1)  # the stream and the group exist
    holders = keys.concurrency_holders("1:t")
    bad = ["99999999999999999999-0", "1-18446744073709551616", "18446744073709551616-1@urgent"]
    raw.zadd(holders, dict.fromkeys(bad, 1))
    raw.zadd(holders, {"18446744073709551615-0": 1})  # the largest id: no such entry
    assert await broker.reconcile_slots("1:t", 1) == (4, 0, 0)


async def test_a_holder_of_a_lane_with_no_stream_is_freed_and_recorded(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    """A holder naming a lane whose stream does not exist kept its slot for ever (kept
    'while its lane has no stream'): no entry of it can be pending, nor on its way. It is
    freed and recorded in the quarantine; live holders of real lanes keep their slots."""
    holders, waiting, _ = slot_of(keys)
    (running,) = await fetched(broker, 1)  # pending in the default lane
    urgent = keys.lane_stream("urgent")
    raw.xgroup_create(urgent, keys.group, id="0", mkstream=True)
    on_its_way = raw.xadd(urgent, {"payload": message(1)}).decode() + "@urgent"
    unread = keys.lane_stream("later")  # a lane stream the group does not read (yet)
    no_group = raw.xadd(unread, {"payload": message(2)}).decode() + "@later"
    live = {running, on_its_way, no_group}
    raw.zadd(holders, {"1-0@ghost": 1, **dict.fromkeys(live, 2)})
    raw.rpush(waiting, message(3))
    assert await broker.reconcile_slots("1:t", 4) == (1, 4, 0)
    held = {h.decode() for h in raw.zrange(holders, 0, -1)}
    assert live < held, "live holders keep their slots"
    assert "1-0@ghost" not in held, "the ghost's slot went to the waiter"
    (record,) = [e[1] for e in raw.xrange(keys.quarantine)]
    assert record[b"source"] == b"concurrency:holders"
    assert record[b"item"] == holders.encode()
    assert record[b"value"] == b"1-0@ghost"
    assert b"no stream" in record[b"reason"]
    assert await broker.reconcile_slots("1:t", 4) == (0, 4, 0), "nothing more to free"
