"""Each state-transition script on its own, on both tiers: atomic, idempotent, capped."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from trunner._redis import (
    RELEASED_IDLE_MS,
    Arg,
    Broker,
    LeaseStore,
    Owner,
    Script,
)
from trunner._wire.keys import RELEASED_CONSUMER, Keys, UniqueLock
from trunner.errors import LeadershipLost


async def deliver(broker: Broker, consumer: str, count: int) -> list[str]:
    reader = broker.open_reader()
    try:
        entries = await broker.read(reader, consumer, count, 0.01)
    finally:
        await reader.aclose()
    return [e.message_id for e in entries]


#: The first delivery of a message to consumer c1 (what :func:`deliver` gives it).
C1 = Owner("c1")


def owned(ids: Sequence[str], owner: Owner = C1) -> dict[str, Owner]:
    """The deliveries of ``ids``, all ``owner``'s (for :meth:`Broker.ack`)."""
    return dict.fromkeys(ids, owner)


class KeyLeader:
    """The leader ``owner`` of the group's lease key: runs fenced scripts as it."""

    def __init__(self, broker: Broker, owner: str) -> None:
        self._store = LeaseStore(broker.transport, broker.keys.leader)
        self._owner = owner

    async def run_fenced(self, script: Script, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        return await self._store.fenced(script, self._owner, keys, args)


async def test_enqueue_many_splits_large_batches(broker: Broker) -> None:
    ids = await broker.enqueue_many([b"m%d" % i for i in range(2500)])
    assert len(ids) == len(set(ids)) == 2500
    assert await broker.queue_length() == 2500
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))


async def test_ack_acknowledges_and_deletes(broker: Broker) -> None:
    await broker.enqueue_many([b"a", b"b", b"c"])
    ids = await deliver(broker, "c1", 3)
    assert await broker.ack(ids[:2], owners=owned(ids)) == (2, [])
    assert await broker.ack(ids[:2], owners=owned(ids)) == (0, ids[:2]), "twice: nothing"
    assert await broker.pending_count() == 1
    assert await broker.queue_length() == 1


async def test_retry_is_atomic_and_idempotent(broker: Broker, raw: Any, keys: Keys) -> None:
    await broker.enqueue(b"first")
    (message_id,) = await deliver(broker, "c1", 1)
    assert await broker.retry(message_id, "task-1", 5000, b"second", owner=C1) is True
    again = await broker.retry(message_id, "task-1", 5000, b"second", owner=C1)
    assert again is False, "not pending"
    assert await broker.pending_count() == 0
    assert await broker.queue_length() == 0
    assert raw.zrange(keys.delayed, 0, -1, withscores=True) == [(b"task-1", 5000.0)]
    assert raw.hgetall(keys.delayed_messages) == {b"task-1": b"second"}


async def test_dead_letter_writes_once(broker: Broker, raw: Any, keys: Keys) -> None:
    await broker.enqueue(b"poison")
    (message_id,) = await deliver(broker, "c1", 1)
    fields: list[tuple[str, str | bytes]] = [("payload", b"poison"), ("reason", "undecodable")]
    dead_id = await broker.dead_letter(message_id, fields, maxlen=10, owner=C1)
    assert dead_id is not None
    assert await broker.dead_letter(message_id, fields, maxlen=10, owner=C1) is None
    ((entry_id, entry),) = raw.xrange(keys.dead)
    assert entry_id.decode() == dead_id
    assert entry == {b"payload": b"poison", b"reason": b"undecodable"}
    assert await broker.pending_count() == 0


async def test_dead_letter_stream_is_capped(broker: Broker) -> None:
    await broker.enqueue_many([b"x"] * 300)
    ids = await deliver(broker, "c1", 300)
    for message_id in ids:
        await broker.dead_letter(message_id, [("reason", "r")], maxlen=100, owner=C1)
    # Approximate trimming (MAXLEN ~) keeps at least 100 and far fewer than 300.
    assert 100 <= await broker.dead_count() < 300


async def test_move_due_is_capped_and_reports_the_next_due_time(broker: Broker, raw: Any) -> None:
    raw.set(broker.keys.leader, "leader")
    leader = KeyLeader(broker, "leader")
    for i in range(450):
        assert await broker.schedule(f"t{i}", 1000 + i, b"due-%d" % i) is True
    await broker.schedule("later", 10_000, b"later")
    assert await broker.move_due(leader, 5000, 200) == (200, 1200.0, [])
    assert await broker.move_due(leader, 5000, 200) == (200, 1400.0, [])
    assert await broker.move_due(leader, 5000, 200) == (50, 10_000.0, [])
    assert await broker.move_due(leader, 5000, 200) == (0, 10_000.0, [])
    assert await broker.queue_length() == 450
    assert await broker.move_due(leader, 10_000, 200) == (1, None, [])
    assert await broker.delayed_count() == 0
    assert raw.hlen(broker.keys.delayed_messages) == 0


async def test_only_the_lease_holder_moves_due_tasks(broker: Broker, raw: Any) -> None:
    raw.set(broker.keys.leader, "the-real-leader")
    await broker.schedule("t", 1000, b"m")
    with pytest.raises(LeadershipLost):
        await broker.move_due(KeyLeader(broker, "a-stale-leader"), 5000, 10)
    assert await broker.queue_length() == 0
    assert await broker.delayed_count() == 1


async def test_schedule_and_cancel(broker: Broker, raw: Any) -> None:
    assert await broker.schedule("t", 2000, b"one") is True
    assert await broker.schedule("t", 3000, b"two") is False, "the same id replaces"
    assert raw.zscore(broker.keys.delayed, "t") == 3000.0
    assert await broker.cancel_delayed("t") is True
    assert await broker.cancel_delayed("t") is False
    assert await broker.delayed_count() == 0
    assert raw.hlen(broker.keys.delayed_messages) == 0


async def test_a_cron_tick_fires_once(broker: Broker, raw: Any) -> None:
    raw.set(broker.keys.leader, "leader")
    leader = KeyLeader(broker, "leader")
    assert await broker.fire_cron(leader, "report", 60_000, b"m1") == 1
    assert await broker.fire_cron(leader, "report", 60_000, b"m1") == 0, "same tick"
    assert await broker.fire_cron(leader, "report", 30_000, b"m0") == 0, "an older tick"
    assert await broker.fire_cron(leader, "report", 120_000, b"m2") == 1
    assert await broker.cron_last_fired() == ({"report": 120_000}, [])
    assert await broker.queue_length() == 2
    raw.set(broker.keys.unique("lock"), "held", px=60_000)  # as a dispatch takes it
    lock = UniqueLock(broker.keys.unique("lock"), "token", 60_000)
    assert await broker.fire_cron(leader, "report", 180_000, b"m3", lock) == -1, "locked: skip"
    assert await broker.cron_last_fired() == ({"report": 180_000}, []), "the tick is used up"
    raw.delete(lock.key)
    assert await broker.fire_cron(leader, "report", 240_000, b"m4", lock) == 1
    assert raw.get(lock.key) == b"token"
    assert await broker.queue_length() == 3


async def test_heartbeat_keeps_own_entries_and_reports_lost_ones(
    broker: Broker, raw: Any, group: str, keys: Keys
) -> None:
    await broker.enqueue_many([b"a", b"b"])
    mine, stolen = await deliver(broker, "c1", 2)
    raw.xclaim(keys.stream, group, "c2", 0, [stolen])
    assert await broker.heartbeat("c1", [mine, stolen, "0-1"]) == [stolen, "0-1"]
    pending = {
        p["message_id"].decode(): p for p in raw.xpending_range(keys.stream, group, "-", "+", 10)
    }
    assert pending[mine]["consumer"] == b"c1"
    assert pending[mine]["times_delivered"] == 1, "a heartbeat is not a delivery"
    assert pending[stolen]["consumer"] == b"c2"


async def test_release_hands_entries_back_for_immediate_reclaim(
    broker: Broker, raw: Any, group: str, keys: Keys
) -> None:
    await broker.enqueue_many([b"a", b"b", b"c"])
    a, b, c = await deliver(broker, "c1", 3)
    raw.xclaim(keys.stream, group, "c2", 0, [c])
    released = await broker.release("c1", [(a, True), (b, False), (c, True)])
    assert released == 2, "only the consumer's own entries"
    pending = {
        p["message_id"].decode(): p for p in raw.xpending_range(keys.stream, group, "-", "+", 10)
    }
    assert pending[a]["consumer"].decode() == RELEASED_CONSUMER
    assert pending[a]["times_delivered"] == 0, "the delivery is given back"
    assert pending[b]["times_delivered"] == 1, "a delivery that ran is kept"
    assert pending[a]["time_since_delivered"] >= RELEASED_IDLE_MS - 1000
    # A reclaim with any reasonable min-idle takes them at once, counting a delivery.
    cursor, entries = await broker.reclaim("c3", 300_000, "0-0", 10)
    assert cursor == "0-0"
    assert sorted((e.message_id, e.deliveries) for e in entries) == sorted([(a, 1), (b, 2)])
    assert entries[0].fields == [b"payload", b"a" if entries[0].message_id == a else b"b"]


async def test_pending_ids_pages_through_a_consumer(broker: Broker) -> None:
    await broker.enqueue_many([b"x"] * 5)
    ids = await deliver(broker, "c1", 5)
    assert await broker.pending_ids("c1") == ids
    assert await broker.pending_ids("c1", start=ids[2], count=2) == ids[2:4]
    assert await broker.pending_ids("nobody") == []


async def test_delete_consumer_only_when_it_has_nothing_pending(
    broker: Broker, raw: Any, group: str, keys: Keys
) -> None:
    await broker.enqueue(b"x")
    (message_id,) = await deliver(broker, "c1", 1)
    await deliver(broker, "c2", 1)  # c2 exists, with nothing pending
    assert await broker.delete_consumer_if_idle("c1") is False
    assert await broker.delete_consumer_if_idle("c2") is True
    consumers = {c["name"] for c in raw.xinfo_consumers(keys.stream, group)}
    assert consumers == {b"c1"}
    await broker.ack([message_id], owners=owned([message_id]))
    assert await broker.delete_consumer_if_idle("c1") is True


RECORD_VALUES: list[tuple[str, Arg]] = [
    ("state", "succeeded"),
    ("task", "t\udc80\ud800-é-\x00-\u2028"),  # a surrogate escape, a lone surrogate, NUL
    ("attempt", 2**40),
    ("instance", ""),
    ("enqueued_at", 1764614413.123),
    ("started_at", 1e16),
    ("finished_at", 1764614413.0000002),
    ("keep", 0.1),
    ("progress", -0.0),
    ("progress_message", '"\\\n\t\x7f/</script>'),
    ("result", b'{"x":"' + 'é\u2028😀\\"'.encode() * 2000 + b'"}'),
]


def stored(value: Arg) -> bytes:
    """What the separate-argument form stores for ``value``."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace")
    if isinstance(value, float):
        return repr(value).encode()
    return b"%d" % value if isinstance(value, int) else value


@pytest.mark.parametrize(
    "result",
    [b'{"x":1}', b"\xff not UTF-8", "\ud800".encode("utf-8", "surrogatepass")],
    ids=["json", "not-utf8", "utf8-of-a-surrogate"],
)
async def test_ack_writes_a_record_byte_exact(
    broker: Broker, raw: Any, keys: Keys, result: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record goes to ack.lua as one JSON argument, or as separate arguments when a value
    cannot go through JSON: either way it holds the bytes the separate arguments hold."""
    fields = [*RECORD_VALUES, ("result", result)] if result != b'{"x":1}' else RECORD_VALUES
    await broker.enqueue(b"m")
    (message_id,) = await deliver(broker, "c1", 1)
    kept, started = keys.task("kept"), keys.task("started")
    start = ((started, 60_000, fields), message_id, C1)
    assert await broker.record_started([start]) == 1  # separate arguments
    sent: list[Sequence[Arg]] = []
    evalsha = broker.transport.evalsha

    async def spy(script: Script, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        sent.append(args)
        return await evalsha(script, keys, args)

    monkeypatch.setattr(broker.transport, "evalsha", spy)
    records = {message_id: (kept, 60_000, fields)}
    assert await broker.ack([message_id], records=records, owners=owned([message_id])) == (1, [])
    json = fields is RECORD_VALUES
    # group, delete, channel, lane suffix, consumer, 1, the id, its deliveries, 0 locks,
    # 0 moved, 0 marks, 1 record, its entry's index
    fixed = 13
    assert len(sent[0]) == fixed + (1 if json else 2 + 2 * len(fields)), (
        "one JSON argument, or pairs"
    )
    expected = {name.encode(): stored(value) for name, value in fields}
    assert raw.hgetall(kept) == raw.hgetall(started) == expected
    assert 0 < raw.pttl(kept) <= 60_000


async def test_a_start_is_recorded_only_for_the_pending_delivery(
    broker: Broker, raw: Any, keys: Keys, group: str
) -> None:
    """A late attempt's start (its message claimed by another consumer meanwhile) wrote
    'running' with its own attempt and instance over the live attempt's record."""
    await broker.enqueue(b"m")
    (message_id,) = await deliver(broker, "c1", 1)
    raw.xclaim(keys.stream, group, "c2", 0, [message_id])
    record = keys.task("t")
    fields: list[tuple[str, Arg]] = [("state", "running"), ("attempt", 1), ("instance", "c1")]
    assert await broker.record_started([((record, 60_000, fields), message_id, C1)]) == 0
    assert not raw.exists(record), "the late attempt wrote nothing"
    live: list[tuple[str, Arg]] = [("state", "running"), ("attempt", 1), ("instance", "c2")]
    assert await broker.record_started([((record, 60_000, live), message_id, Owner("c2", 2))]) == 1
    assert raw.hget(record, "instance") == b"c2"


# -- keys holding what trunner does not write there ---------------------------------------


def quarantined(raw: Any, keys: Keys) -> list[dict[bytes, bytes]]:
    return [fields for _, fields in raw.xrange(keys.quarantine)]


def foreign_lock(raw: Any, key: str, kind: str) -> None:
    """``key`` holding what trunner never writes at a lock: another type, or a string
    without a time-to-live."""
    if kind == "hash":
        raw.hset(key, "owner", "someone else")
    else:
        raw.set(key, "no ttl")


@pytest.mark.parametrize("kind", ["hash", "string-without-ttl"])
async def test_a_lock_key_holding_something_else_is_set_aside_and_the_lock_taken(
    broker: Broker, raw: Any, kind: str
) -> None:
    """It blocked its key for ever: no time-to-live, and SET NX never takes it."""
    keys = broker.keys
    lock = keys.unique("k")
    foreign_lock(raw, lock, kind)
    before = raw.dump(lock)
    [entry] = await broker.enqueue_unique([(lock, "token", b"m")], 60_000)
    assert entry is not None, "enqueued"
    assert raw.get(lock) == b"token"
    assert 0 < raw.pttl(lock) <= 60_000
    [record] = quarantined(raw, keys)
    assert record[b"source"] == b"unique"
    assert record[b"item"] == lock.encode()
    why = b"a hash" if kind == "hash" else b"a string without a time-to-live"
    assert record[b"reason"] == why + b", not a unique lock"
    aside = record[b"action"].decode().removeprefix("renamed to ")
    assert aside.startswith(f"{lock}:bad:")
    assert raw.dump(aside) == before, "nothing lost"
    # A lock trunner wrote (a string with a time-to-live) is held, never touched.
    assert await broker.enqueue_unique([(lock, "other", b"n")], 60_000) == [None]
    assert raw.get(lock) == b"token"
    assert len(quarantined(raw, keys)) == 1


async def test_a_foreign_value_is_never_renamed_over_another_set_aside(
    broker: Broker, raw: Any
) -> None:
    """Two set aside in one millisecond would get one name: the second takes a suffix."""
    keys = broker.keys
    lock = keys.unique("k")
    now = int(raw.time()[0]) * 1000
    taken = [f"{lock}:bad:{ms}" for ms in range(now - 1000, now + 10_000)]
    with raw.pipeline(transaction=False) as pipe:
        for name in taken:
            pipe.set(name, "set aside before")
        pipe.execute()
    raw.hset(lock, "n", "1")
    await broker.enqueue_unique([(lock, "a", b"m")], 60_000)
    [record] = quarantined(raw, keys)
    aside = record[b"action"].decode().removeprefix("renamed to ")
    assert aside.endswith(".1")
    assert aside.removesuffix(".1") in taken
    assert raw.hget(aside, "n") == b"1"
    assert all(value == b"set aside before" for value in raw.mget(taken))


async def test_a_cron_tick_takes_a_foreign_lock_and_a_wrong_type_loses_no_tick(
    broker: Broker, raw: Any
) -> None:
    keys = broker.keys
    raw.set(keys.leader, "leader")
    leader = KeyLeader(broker, "leader")
    lock = UniqueLock(keys.unique("cron"), "token", 60_000)
    foreign_lock(raw, lock.key, "hash")
    assert await broker.fire_cron(leader, "report", 60_000, b"m1", lock=lock) == 1
    assert raw.get(lock.key) == b"token"
    # The stream holds another type: the tick fails before anything is written, so that
    # once the stream is set aside the same tick fires (it was not marked fired).
    raw.delete(keys.stream)
    raw.set(keys.stream, "not a stream")
    with pytest.raises(Exception, match="WRONGTYPE") as info:
        await broker.fire_cron(leader, "report", 120_000, b"m2")
    assert keys.stream in str(info.value), "the error names the key"
    assert await broker.cron_last_fired() == ({"report": 60_000}, [])
    raw.delete(keys.stream)
    assert await broker.fire_cron(leader, "report", 120_000, b"m2") == 1


async def test_a_due_unique_task_takes_a_foreign_lock(broker: Broker, raw: Any) -> None:
    keys = broker.keys
    raw.set(keys.leader, "leader")
    leader = KeyLeader(broker, "leader")
    lock = UniqueLock(keys.unique("k"), "token", 60_000)
    await broker.schedule("t", 1000, b"m", unique=lock)
    foreign_lock(raw, lock.key, "string-without-ttl")
    assert await broker.move_unique(leader, ["t"]) == (1, 0, [])
    assert await broker.queue_length() == 1
    assert raw.get(lock.key) == b"token"


async def test_a_delayed_task_is_written_whole_or_not_at_all(broker: Broker, raw: Any) -> None:
    """The delayed set took the id before the message hash refused the message: a task in
    the delayed set without its message."""
    keys = broker.keys
    for key in (keys.delayed_messages, keys.delayed_unique):
        raw.set(key, "not a hash")
        lock = UniqueLock(keys.unique("k"), "token", 60_000)
        with pytest.raises(Exception, match="WRONGTYPE") as info:
            await broker.schedule("t", 1000, b"m", unique=lock)
        assert key in str(info.value)
        assert raw.exists(keys.delayed) == 0
        assert raw.get(key) == b"not a hash"
        raw.delete(key)


async def test_replaying_onto_a_stream_of_another_type_keeps_the_dead_letter(
    broker: Broker, raw: Any
) -> None:
    """The replay deleted the dead letter, then failed to add it to the stream: lost."""
    keys = broker.keys
    await broker.enqueue(b"m")
    (message_id,) = await deliver(broker, "c1", 1)
    dead_id = await broker.dead_letter(message_id, [("reason", "r")], maxlen=None, owner=C1)
    assert dead_id is not None
    raw.delete(keys.stream)
    raw.set(keys.stream, "not a stream")
    with pytest.raises(Exception, match="WRONGTYPE"):
        await broker.replay_dead([(dead_id, b"m", None, "t")])
    assert await broker.dead_count() == 1
    raw.delete(keys.stream)
    lock = UniqueLock(keys.unique("k"), "token", 60_000)
    foreign_lock(raw, lock.key, "hash")
    [new_id] = await broker.replay_dead([(dead_id, b"m", lock, "t")])
    assert isinstance(new_id, str), "replayed, taking the lock over the foreign value"
    assert await broker.dead_count() == 0
    assert await broker.queue_length() == 1
    assert raw.get(lock.key) == b"token"
