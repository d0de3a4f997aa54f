"""The Redis boundary under cancellation, on a real redis-server.

A blocked XREADGROUP cancelled at a random moment must leave the connection sane (the next
reply belongs to the command that asked), must never lose an entry (what Redis delivered to a
cancelled read stays pending although nobody saw it: a "ghost delivery"), and the runner must
execute every ghost. Cancellations the bridge drops (redis-py disconnects on a cancel and
reconnects on the next command; a cancel landing during that reconnect is lost, and the
read runs its whole BLOCK) are counted, not assumed away.

Crosses both socket transports (_redis/transports/native.py and bridged.py: each test runs
on both), _redis/broker/, and, for the ghosts, the runner's fetcher.py.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest
import trio

import trunner
from trunner._redis import Broker, Owner, Reader, Transport, open_transport
from trunner._wire.envelope import PAYLOAD_FIELD, encode_message
from trunner.testing import run_until_idle

from ..conftest import config, open_checked_runner, redis_state
from ..support.proxy import open_proxy
from ..support.servers import RedisServer

PREFIX = "trunner"
CONSUMER = "bridge-reader"
TASK = "record"
#: Cancelled reads in the main test; each is cancelled 0-15 ms after it starts.
READS = 300
READ_COUNT = 5
READ_BLOCK = 1.0
ENTRY_ID = re.compile(rb"\d+-\d+")


class RecordingReader(Reader):
    """A reader that keeps every raw reply of the wrapped one, to check its shape."""

    def __init__(self, inner: Reader) -> None:
        self.inner = inner
        self.replies: list[Any] = []

    async def xreadgroup(
        self, group: str, consumer: str, stream: str | Sequence[str], count: int, block: float
    ) -> Any:
        reply = await self.inner.xreadgroup(group, consumer, stream, count, block)
        self.replies.append(reply)
        return reply

    async def interrupt(self) -> None:
        await self.inner.interrupt()

    async def aclose(self) -> None:
        await self.inner.aclose()


class Executions:
    """Payloads the runner's task executed; tests await a condition instead of sleeping."""

    def __init__(self) -> None:
        self.payloads: list[int] = []
        self._lot = trio.lowlevel.ParkingLot()

    async def record(self, payload: int) -> None:
        self.payloads.append(payload)
        self._lot.unpark_all()
        await trio.lowlevel.checkpoint()

    async def wait_for(self, done: Callable[[], bool]) -> None:
        while not done():
            await self._lot.park()


@attrs.define
class ReadLog:
    """What the cancelled reads saw."""

    returned: list[str] = attrs.Factory(list)  # entry ids, in delivery order
    cancelled: int = 0  # reads that raised Cancelled
    empty: int = 0  # reads that returned nothing before their deadline
    with_entries: int = 0  # reads that returned entries before their deadline
    dropped_empty: int = 0  # returned normally (no entries) although cancelled: dropped
    dropped_entries: int = 0  # returned normally with entries although cancelled
    dropped_late: list[float] = attrs.Factory(list)  # how late each dropped cancel returned


@attrs.define
class Produced:
    """Entries the producer added: id -> (payload number, stored data)."""

    entries: dict[str, tuple[int, bytes]] = attrs.Factory(dict)
    next_number: int = 0
    stop: bool = False

    def data(self) -> tuple[int, bytes]:
        number = self.next_number
        self.next_number += 1
        return number, encode_message(TASK, number, enqueued_at=time.time(), max_bytes=1 << 20)

    async def add(self, broker: Broker) -> str:
        number, data = self.data()
        message_id = await broker.enqueue(data)
        assert ENTRY_ID.fullmatch(message_id.encode()), f"XADD replied {message_id!r}"
        assert message_id not in self.entries
        if self.entries:
            assert _id_key(message_id) > _id_key(max(self.entries, key=_id_key))
        self.entries[message_id] = (number, data)
        return message_id


def _id_key(message_id: str) -> tuple[int, int]:
    ms, seq = message_id.split("-")
    return int(ms), int(seq)


@pytest.fixture(params=[False, True], ids=["native", "bridged"])
def bridge(request: pytest.FixtureRequest) -> bool:
    """Each transport-level test runs on Trio sockets and on the bridged redis-py client."""
    value: bool = request.param
    return value


def _open(server_url: str, name: str, bridge: bool) -> Any:
    return open_transport(
        server_url, client_name=name, max_connections=10, connect_timeout=5.0, bridge=bridge
    )


def check_read_reply(reply: Any, stream: str, count: int) -> list[tuple[str, list[Any]]]:
    """Check one raw XREADGROUP reply is well-formed for ``stream``; return its entries."""
    if reply is None or reply == []:
        return []
    assert isinstance(reply, list), f"XREADGROUP replied {reply!r}"
    assert len(reply) == 1, f"XREADGROUP replied {reply!r}"
    name, raw_entries = reply[0]
    assert name == stream.encode(), f"a reply for another stream: {reply!r}"
    assert isinstance(raw_entries, list)
    assert 1 <= len(raw_entries) <= count, f"{len(raw_entries)} entries for COUNT {count}"
    entries = []
    for message_id, fields in raw_entries:
        assert isinstance(message_id, bytes)
        assert ENTRY_ID.fullmatch(message_id), f"not an entry id: {message_id!r}"
        assert isinstance(fields, list)
        entries.append((message_id.decode(), fields))
    return entries


async def producer(broker: Broker, produced: Produced) -> None:
    """XADD through the control side at random moments, until told to stop (never cancelled)."""
    while not produced.stop:
        await trio.sleep(random.uniform(0, 0.012))
        await produced.add(broker)


async def echoer(transport: Transport, index: int, counts: dict[str, int]) -> None:
    """ECHO unique tokens on the control side, some cancelled; each reply must be its own."""
    n = 0
    while True:
        token = f"echo-{index}-{n}-{random.getrandbits(32):08x}"
        n += 1
        reply: Any = None
        # Deadlines from a few µs (a native round trip takes ~0.1 ms) to 1 s.
        deadline = random.choice([random.uniform(0, 0.0004), 0.0005, 0.002, 0.01, 1.0])
        with trio.move_on_after(deadline) as scope:
            reply = await transport.execute("ECHO", token)
        if reply is None:
            assert scope.cancelled_caught
            counts["cancelled"] += 1
        else:
            assert reply == token.encode(), f"ECHO {token!r} got {reply!r}"
            counts["answered"] += 1
        await trio.sleep(random.uniform(0, 0.005))


async def cancelled_reads(broker: Broker, reader: RecordingReader, log: ReadLog) -> None:
    """``READS`` blocked reads, each cancelled at a random moment 0-15 ms after it starts."""
    stream = broker.keys.stream
    for _ in range(READS):
        start = trio.current_time()
        deadline = start + random.uniform(0, 0.015)
        replies_before = len(reader.replies)
        entries: list[Any] | None = None
        with trio.CancelScope(deadline=deadline) as scope:
            entries = await broker.read(reader, CONSUMER, READ_COUNT, READ_BLOCK)
        if entries is None:
            assert scope.cancelled_caught
            log.cancelled += 1
            continue
        # The read returned: its raw reply was recorded, is well-formed, and matches.
        assert len(reader.replies) == replies_before + 1
        raw = check_read_reply(reader.replies[-1], stream, READ_COUNT)
        assert [e.message_id for e in entries] == [mid for mid, _ in raw]
        for entry in entries:
            assert entry.fields is not None
            log.returned.append(entry.message_id)
        if scope.cancel_called:
            late = trio.current_time() - deadline
            log.dropped_late.append(late)
            if entries:
                log.dropped_entries += 1
            else:
                log.dropped_empty += 1
        elif entries:
            log.with_entries += 1
        else:
            log.empty += 1


async def pending_ids(broker: Broker, consumer: str) -> list[str]:
    reply = await broker.transport.execute(
        "XPENDING", broker.keys.stream, broker.group, "-", "+", 100_000, consumer
    )
    return [e[0].decode() for e in reply]


async def drain(broker: Broker, reader: Reader, log: ReadLog) -> None:
    """Read (uncancelled) until nothing is left for the group."""
    while entries := await broker.read(reader, CONSUMER, 100, 0.05):
        log.returned.extend(e.message_id for e in entries)


async def _blocked_clients(transport: Transport, name: str) -> list[dict[str, str]]:
    """CLIENT LIST entries of connections called ``name`` that are blocked in a command."""
    listing = (await transport.execute("CLIENT", "LIST")).decode()
    clients = [
        dict(field.split("=", 1) for field in line.split(" ") if "=" in field)
        for line in listing.splitlines()
    ]
    return [c for c in clients if c.get("name") == name and "b" in c.get("flags", "")]


async def test_cancelled_blocked_reads_lose_nothing_and_ghosts_are_recovered(
    redis_server: RedisServer, group: str, bridge: bool
) -> None:
    keys = trunner.keys.Keys(PREFIX, group)
    produced = Produced()
    log = ReadLog()
    echoes = {"answered": 0, "cancelled": 0}
    async with _open(redis_server.url, f"bridge-{group}", bridge) as transport:
        broker = Broker(transport, keys)
        await broker.ensure_group()
        reader = RecordingReader(broker.open_reader())
        began = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(producer, broker, produced)
            async with trio.open_nursery() as echoers:
                for index in range(3):
                    echoers.start_soon(echoer, transport, index, echoes)
                await cancelled_reads(broker, reader, log)
                echoers.cancel_scope.cancel()
            produced.stop = True
        elapsed = trio.current_time() - began

        # Every reply after a cancellation was the read's own: entries of our stream, ids
        # that were really added, each delivered once, in stream order, with its own data.
        returned_before_drain = len(log.returned)
        await drain(broker, reader, log)
        assert len(set(log.returned)) == len(log.returned), "an entry was delivered twice"
        assert log.returned == sorted(log.returned, key=_id_key)
        assert set(log.returned) <= set(produced.entries)
        for reply in reader.replies:
            for message_id, fields in check_read_reply(reply, keys.stream, 100):
                assert fields == [PAYLOAD_FIELD, produced.entries[message_id][1]]
        assert echoes["answered"] >= 50, echoes
        assert echoes["cancelled"] >= 20, echoes

        # Nothing was lost: every added entry was returned by a read, or is still pending
        # for the reader's consumer although no read returned it (a ghost delivery).
        pending = await pending_ids(broker, CONSUMER)
        assert set(pending) == set(produced.entries)
        ghosts = sorted(set(pending) - set(log.returned), key=_id_key)

        # One more ghost for sure, so that recovery is exercised in every run: a read whose
        # reply is thrown away, as if its caller were cancelled after Redis answered.
        seeded = [await produced.add(broker) for _ in range(3)]
        await transport.execute(
            "XREADGROUP", "GROUP", group, CONSUMER, "COUNT", 10, "STREAMS", keys.stream, ">"
        )
        assert set(await pending_ids(broker, CONSUMER)) == set(produced.entries)
        ghosts += seeded

        print(
            f"\n{READS} cancelled reads in {elapsed:.2f} s: {log.cancelled} raised Cancelled, "
            f"{log.empty} returned empty and {log.with_entries} with entries before their "
            f"deadline; {log.dropped_empty + log.dropped_entries} returned normally although "
            f"cancelled (dropped: {log.dropped_empty} empty, {log.dropped_entries} with "
            f"entries; late by up to {max(log.dropped_late, default=0.0) * 1000:.0f} ms)"
            f"\n{len(produced.entries)} entries added, {returned_before_drain} returned by the "
            f"cancelled reads, {len(log.returned) - returned_before_drain} by the final drain,"
            f" {len(ghosts) - len(seeded)} ghost deliveries (+{len(seeded)} seeded); "
            f"ECHO: {echoes['answered']} answered, {echoes['cancelled']} cancelled"
        )

        # The entries the application saw are finished; only the ghosts remain pending.
        owners = dict.fromkeys(log.returned, Owner(CONSUMER))
        assert await broker.ack(log.returned, owners=owners) == (len(log.returned), [])
        assert await pending_ids(broker, CONSUMER) == ghosts
        ghost_numbers = {produced.entries[mid][0] for mid in ghosts}

    # The ghosts are recovered: a real runner reclaims and executes every one of them.
    executions = Executions()
    tasks = trunner.TaskRegistry()
    # A ghost reclaimed from a consumer that is gone counts as a delivery (the runner cannot
    # tell it from a crash mid-task): one retry lets it run.
    tasks.register(trunner.Task(TASK, executions.record, max_retry=1))
    cfg = config(group, reclaim_delay=0.2, reclaim_interval=0.05)
    async with open_checked_runner(redis_server.url, cfg, tasks) as runner:
        started = trio.current_time()
        await executions.wait_for(lambda: ghost_numbers <= set(executions.payloads))
        recovered_in = trio.current_time() - started
        await run_until_idle(runner)
        assert await runner.admin.dead_letter_count() == 0
    print(f"{len(ghosts)} ghosts executed by a runner {recovered_in * 1000:.0f} ms after start")
    assert sorted(executions.payloads) == sorted(ghost_numbers)
    assert runner.statistics().reclaimed >= len(ghosts)


async def test_ghosts_are_reclaimed_with_the_default_pool_size(
    redis_server: RedisServer, group: str
) -> None:
    """Entries pending for a consumer that is gone run soon after reclaim_delay.

    With the default num_workers (10) and batch_size (10), an idle fetch loop blocked in
    XREADGROUP holds every worker slot; reclaiming must not wait for a slot to be free
    (at commit 7b91725 the separate reclaimer never got one, and nothing was reclaimed).
    """
    keys = trunner.keys.Keys(PREFIX, group)
    produced = Produced()
    async with _open(redis_server.url, f"bridge-{group}", bridge=False) as transport:
        broker = Broker(transport, keys)
        await broker.ensure_group()
        ghosts = [await produced.add(broker) for _ in range(5)]
        await transport.execute(
            "XREADGROUP", "GROUP", group, "gone", "COUNT", 10, "STREAMS", keys.stream, ">"
        )
    executions = Executions()
    tasks = trunner.TaskRegistry()
    tasks.register(trunner.Task(TASK, executions.record, max_retry=1))
    cfg = config(group, reclaim_delay=0.2, reclaim_interval=0.05)
    assert cfg.num_workers <= cfg.batch_size  # the defaults
    expected = {produced.entries[mid][0] for mid in ghosts}
    async with open_checked_runner(redis_server.url, cfg, tasks) as runner:
        with trio.move_on_after(5.0):
            await executions.wait_for(lambda: expected <= set(executions.payloads))
        stats = runner.statistics()
        assert set(executions.payloads) == expected, (
            f"entries idle for 5 s with reclaim_delay=0.2 s were not reclaimed: {stats}"
        )
        await run_until_idle(runner)


async def test_interrupt_ends_a_blocked_read_at_once_and_the_reader_goes_on(
    redis_server: RedisServer, group: str, bridge: bool
) -> None:
    name = f"bridge-{group}"
    async with _open(redis_server.url, name, bridge) as transport:
        broker = Broker(transport, trunner.keys.Keys(PREFIX, group))
        await broker.ensure_group()
        reader = broker.open_reader()
        results: list[tuple[list[str], float]] = []
        finished = trio.Event()

        async def read(block: float) -> None:
            start = trio.current_time()
            entries = await broker.read(reader, CONSUMER, 10, block)
            results.append(([e.message_id for e in entries], trio.current_time() - start))
            finished.set()

        async def blocked() -> bool:
            """Whether the read is blocked in Redis (or, wrongly, already returned)."""
            return finished.is_set() or len(await _blocked_clients(transport, name)) == 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read, 10.0)
            await redis_state(blocked)
            interrupted_at = trio.current_time()
            await reader.interrupt()
            await finished.wait()
            returned_in = trio.current_time() - interrupted_at
        (entries, _took) = results[0]
        assert entries == []
        assert returned_in < 0.5, f"the interrupted read returned after {returned_in:.3f} s"

        # The next read on the same reader blocks, and returns what is added meanwhile.
        finished = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read, 10.0)
            await redis_state(blocked)
            added = await broker.enqueue(encode_message(TASK, 1, enqueued_at=0, max_bytes=1000))
            await finished.wait()
        (entries, took) = results[1]
        assert entries == [added], f"the read after an interrupt returned {entries} in {took:.3f} s"
        assert took < 5.0
        assert await broker.ack([added], owners={added: Owner(CONSUMER)}) == (1, [])
        await reader.aclose()
    print(f"\ninterrupted read returned in {returned_in * 1000:.1f} ms")


async def test_cancelled_commands_with_replies_in_flight_leave_no_stale_reply(
    redis_server: RedisServer, group: str, bridge: bool
) -> None:
    """Cancel control commands while their reply is held back by a slow network.

    Each reply that arrives afterwards must still be the reply of the command that asked.
    """
    counts = {"answered": 0, "cancelled": 0}
    async with (
        open_proxy(redis_server.port) as proxy,
        _open(proxy.url, f"slow-{group}", bridge) as t,
    ):
        proxy.delay = 0.02

        async def one(index: int) -> None:
            for n in range(40):
                token = f"{index}-{n}-{random.getrandbits(32):08x}"
                reply: Any = None
                with trio.move_on_after(random.choice([0.005, 0.015, 0.03, 1.0])):
                    reply = await t.execute("ECHO", token)
                if reply is None:
                    counts["cancelled"] += 1
                else:
                    assert reply == token.encode(), f"ECHO {token!r} got {reply!r}"
                    counts["answered"] += 1

        async with trio.open_nursery() as nursery:
            for index in range(8):
                nursery.start_soon(one, index)
        # Uncancelled commands after all that: every one gets its own reply.
        proxy.delay = 0.0
        for n in range(50):
            assert await t.execute("ECHO", f"after-{n}") == f"after-{n}".encode()
    print(f"\nECHO with replies delayed 20 ms: {counts}")
    assert counts["answered"] > 20
    assert counts["cancelled"] > 20
