"""Pieces of the pool on their own."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from trio.testing import wait_all_tasks_blocked

import trunner
from trunner._redis import SCRIPTS, Arg, Broker, Transport, open_transport
from trunner._slots import WorkerSlots
from trunner._util import ErrorLog
from trunner.keys import Keys
from trunner.message import encode_message
from trunner.pool import AckBuffer, WorkerPool
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


async def test_a_fetch_never_starts_tasks_beyond_a_lowered_capacity(
    memory_url: str, group: str
) -> None:
    """Slots were reserved for 4, then the capacity dropped to 2 while the read blocked."""
    from trunner._redis import RawEntry  # noqa: PLC0415

    tasks = trunner.TaskRegistry()
    hold = trio.Event()

    @tasks.task
    async def slow(_: Any) -> None:
        await hold.wait()

    async with (
        bare_pool(memory_url, group, tasks, num_workers=4) as pool,
        trio.open_nursery() as nursery,
    ):
        pool.bind(nursery)
        slots = pool.try_reserve(4)
        assert slots == 4
        pool.limiter.total_tokens = 2
        data = b'{"task":"slow","payload":null,"attempt":1,"enqueued_at":0}'
        entries = [RawEntry(f"{i}-0", [b"payload", data]) for i in range(1, 5)]
        queued = pool.submit(entries, slots, "c")
        assert (pool.in_flight, queued) == (2, 2), "two started, two handed back"
        assert [mid for _, mid, _ in pool.take_releases()] == ["3-0", "4-0"]
        assert pool.limiter.borrowed_tokens == 2
        hold.set()


@asynccontextmanager
async def bare_pool(
    url: str, group: str, tasks: trunner.TaskRegistry, **overrides: Any
) -> AsyncIterator[WorkerPool]:
    """A pool on its own (no fetcher, heartbeats or ack flusher), over a fresh group."""
    async with open_transport(url, client_name="t", max_connections=2, connect_timeout=5) as t:
        broker = Broker(t, Keys("trunner", group))
        await broker.ensure_group()
        cfg = config(group, **overrides)
        counters, errors = Counters(), ErrorLog()
        acks = AckBuffer(broker, cfg, counters, errors)
        yield WorkerPool(broker, tasks, cfg, counters, errors, acks, lambda _due: None)


@asynccontextmanager
async def pool_running_one(
    transport: Transport, group: str, tasks: trunner.TaskRegistry, cfg: trunner.RunnerConfig
) -> AsyncIterator[Counters]:
    """A pool with its ack buffer and heartbeat loop, running one message of the registry's
    only task (delivered to consumer "c"); the block ends once it is acknowledged."""
    broker = Broker(transport, Keys("trunner", group))
    await broker.ensure_group()
    [name] = tasks.names
    await broker.enqueue_many([encode_message(name, None, enqueued_at=0.0, max_bytes=1000)])
    reader = broker.open_reader()
    entries = await broker.read(reader, "c", 1, 0.1)
    await reader.aclose()
    counters, errors = Counters(), ErrorLog()
    acks = AckBuffer(broker, cfg, counters, errors)
    pool = WorkerPool(broker, tasks, cfg, counters, errors, acks, lambda _due: None)
    async with trio.open_nursery() as nursery:
        pool.bind(nursery)
        nursery.start_soon(acks.run)
        await nursery.start(pool.heartbeat_loop)
        pool.submit(entries, pool.try_reserve(1), "c")
        yield counters
        while await broker.pending_count():  # noqa: ASYNC110 - acknowledged soon
            await trio.sleep(0.05)
        nursery.cancel_scope.cancel()


async def test_a_finished_task_keeps_its_reservation_while_its_ack_fails(
    url: str, group: str, raw: Any
) -> None:
    """Finished, acknowledgement refused for longer than reclaim_delay: the heartbeat keeps
    the entry fresh, so no other instance reclaims it and runs it again."""
    tasks = trunner.TaskRegistry()
    done = trio.Event()

    @tasks.task
    async def quick(_: Any) -> None:
        done.set()

    stream = f"trunner:{{{group}}}:stream"
    cfg = config(group, reclaim_delay=0.6)
    async with open_transport(url, client_name="t", max_connections=4, connect_timeout=5) as t:
        faulty = FaultyTransport(t)
        faulty.fail(script_call(SCRIPTS.ack))
        async with pool_running_one(faulty, group, tasks, cfg) as counters:
            await done.wait()
            await trio.sleep(3 * cfg.reclaim_delay)  # acknowledgements keep failing
            assert faulty.failed >= 2
            [pending] = raw.xpending_range(stream, group, "-", "+", 10)
            assert pending["time_since_delivered"] < cfg.reclaim_delay * 1000, (
                "the entry went stale: another instance would run the task again"
            )
            faulty.fail(None)  # the next retry writes it
        assert counters.acked == 1


def long_task() -> tuple[trunner.TaskRegistry, trio.Event, trio.Event]:
    """A registry whose one task runs until told: (registry, started, finish)."""
    tasks = trunner.TaskRegistry()
    started, finish = trio.Event(), trio.Event()

    @tasks.task
    async def long(_: Any) -> None:
        started.set()
        await finish.wait()

    return tasks, started, finish


async def test_a_heartbeat_whose_reply_is_lost_is_retried_in_time(
    url: str, group: str, raw: Any
) -> None:
    """One heartbeat never gets its reply (dropped on the way): the next one must come
    within the beat interval, not after the command timeout, or the running task would
    go stale and be reclaimed while it runs."""
    tasks, started, finish = long_task()
    stream = f"trunner:{{{group}}}:stream"
    cfg = config(group, reclaim_delay=0.6, command_timeout=30.0)
    heartbeats = 0

    def first_heartbeat(args: Any) -> bool:
        nonlocal heartbeats
        if script_call(SCRIPTS.heartbeat)(args):
            heartbeats += 1
            return heartbeats == 1
        return False

    async with open_transport(url, client_name="t", max_connections=4, connect_timeout=5) as t:
        faulty = FaultyTransport(t)
        faulty.hold(first_heartbeat)
        async with pool_running_one(faulty, group, tasks, cfg) as counters:
            await started.wait()
            await trio.sleep(3 * cfg.reclaim_delay)
            assert heartbeats >= 3, "beats went on after the lost one"
            [pending] = raw.xpending_range(stream, group, "-", "+", 10)
            assert pending["time_since_delivered"] < cfg.reclaim_delay * 1000
            faulty.release_held()
            finish.set()
        assert counters.reservations_lost == 0


class StallingTransport(FaultyTransport):
    """The event loop blocks (``time.sleep``) right after the first heartbeat's reply came:
    its deadline passes while the process is not running."""

    def __init__(self, inner: Any, stall: float) -> None:
        super().__init__(inner)
        self.stall = stall
        self.heartbeats: list[float] = []  # trio clock at each heartbeat call
        self.stalled_until = 0.0

    async def execute(self, *args: Arg) -> Any:
        reply = await super().execute(*args)
        if script_call(SCRIPTS.heartbeat)(args):
            self.heartbeats.append(trio.current_time())
            if len(self.heartbeats) == 1:
                time.sleep(self.stall)  # noqa: ASYNC251 - the stall under test
                self.stalled_until = trio.current_time()
                await trio.lowlevel.checkpoint()  # the passed deadline strikes here
        return reply


async def test_a_heartbeat_cut_off_by_an_event_loop_stall_beats_again_at_once(
    url: str, group: str
) -> None:
    """A task blocked the loop while a heartbeat was in flight: the beat's deadline passed
    while nothing ran. The next beat goes out at once, not after a backoff (another stall
    may begin meanwhile and age the reservations past reclaim_delay)."""
    tasks, started, finish = long_task()
    cfg = config(group, reclaim_delay=0.6, command_timeout=30.0)  # beats every 0.2 s
    async with open_transport(url, client_name="t", max_connections=4, connect_timeout=5) as t:
        stalling = StallingTransport(t, stall=0.5)
        async with pool_running_one(stalling, group, tasks, cfg):
            await started.wait()
            while len(stalling.heartbeats) < 2:  # noqa: ASYNC110 - the second beat comes soon
                await trio.sleep(0.01)
            finish.set()
    after_stall = stalling.heartbeats[1] - stalling.stalled_until
    # A backoff would wait at least 50 ms (LoopBackoff's first delay, 0.1 s x 0.5..1).
    assert after_stall < 0.03, f"the next beat came {after_stall * 1000:.0f} ms after the stall"


# -- worker slots ---------------------------------------------------------------------------


async def test_slots_are_taken_up_to_the_capacity_and_waited_for_beyond_it() -> None:
    slots = WorkerSlots(3)
    assert slots.take_nowait(2) == 2
    assert slots.take_nowait(5) == 1
    assert slots.take_nowait(1) == 0
    assert (slots.borrowed_tokens, slots.available_tokens) == (3, 0)
    got: list[int] = []

    async def waiter() -> None:
        got.append(await slots.take(10))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await wait_all_tasks_blocked()
        assert got == [], "no slot is free: the taker waits"
        slots.give(2)
    assert got == [2], "woken by the slots given back, takes what is free"
    assert slots.borrowed_tokens == 3


async def test_a_lowered_capacity_refuses_slots_until_enough_are_given_back() -> None:
    slots = WorkerSlots(4)
    assert slots.take_nowait(4) == 4
    slots.total_tokens = 2
    slots.give(1)
    assert slots.take_nowait(1) == 0, "3 held, capacity 2"
    slots.give(2)
    assert slots.take_nowait(5) == 1
    with pytest.raises(ValueError, match="integer >= 1"):
        slots.total_tokens = 0
    with pytest.raises(RuntimeError, match="more worker slots given back"):
        slots.give(3)


async def test_a_raised_capacity_wakes_every_waiting_taker() -> None:
    slots = WorkerSlots(1)
    assert slots.take_nowait(1) == 1
    got: list[int] = []

    async def waiter() -> None:
        got.append(await slots.take(1))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        nursery.start_soon(waiter)
        await wait_all_tasks_blocked()
        slots.total_tokens = 3
    assert got == [1, 1]


async def test_a_cancelled_taker_takes_nothing_and_the_next_one_is_served() -> None:
    slots = WorkerSlots(1)
    assert slots.take_nowait(1) == 1
    got: list[str] = []

    async def waiter(name: str, scope: trio.CancelScope) -> None:
        with scope:
            await slots.take(1)
            got.append(name)

    first, second = trio.CancelScope(), trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter, "first", first)
        await wait_all_tasks_blocked()
        nursery.start_soon(waiter, "second", second)
        await wait_all_tasks_blocked()
        first.cancel()
        await wait_all_tasks_blocked()
        assert slots.borrowed_tokens == 1
        slots.give(1)
    assert got == ["second"]
    assert slots.borrowed_tokens == 1


async def test_takers_that_give_back_and_take_again_at_once_share_the_slots() -> None:
    """Two fetch loops: each takes, reads (a checkpoint), gives back, and takes again with
    no checkpoint in between. A slot given back while the other waits goes to it."""
    slots = WorkerSlots(2)
    turns = {"a": 0, "b": 0}

    async def loop(name: str) -> None:
        while sum(turns.values()) < 200:
            taken = await slots.take(2)
            turns[name] += 1
            await trio.lowlevel.checkpoint()  # the read
            slots.give(taken)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(loop, "a")
        nursery.start_soon(loop, "b")
    assert min(turns.values()) >= 50, turns


async def test_workers_cancelled_while_their_jobs_wait_leave_the_pool_able_to_start_more(
    memory_url: str, group: str
) -> None:
    """Jobs that waited, then were cancelled with their workers (the runner crashed): the
    pool's count of busy workers must come back to zero, or a message submitted later
    (a read that returned during the crash) would never get a worker."""
    tasks = trunner.TaskRegistry()
    started = 0
    both = trio.Event()
    ran = trio.Event()

    @tasks.task
    async def stuck(_: Any) -> None:
        nonlocal started
        started += 1
        if started == 2:
            both.set()
        await trio.sleep_forever()

    @tasks.task
    async def quick(_: Any) -> None:
        ran.set()

    def entry(i: int, name: str) -> Any:
        from trunner._redis import RawEntry  # noqa: PLC0415

        return RawEntry(
            f"{i}-0", [b"payload", encode_message(name, None, enqueued_at=0.0, max_bytes=1000)]
        )

    async with bare_pool(memory_url, group, tasks, num_workers=4) as pool:
        async with trio.open_nursery() as nursery:
            pool.bind(nursery)
            pool.submit([entry(1, "stuck"), entry(2, "stuck")], pool.try_reserve(2), "c")
            await both.wait()
            nursery.cancel_scope.cancel()
        assert pool.in_flight == 0
        async with trio.open_nursery() as nursery:
            pool.bind(nursery)
            pool.submit([entry(3, "quick")], pool.try_reserve(1), "c")
            await ran.wait()
