"""The heartbeater (trunner/_engine/heartbeat.py), with a pool running one message."""

from __future__ import annotations

import time
from typing import Any

import trio

import trunner
from trunner._redis import SCRIPTS, Arg, Broker, RawEntry, open_transport
from trunner._wire.envelope import encode_message
from trunner.keys import Keys

from ..conftest import config
from ..support.faults import FaultyTransport, script_call
from ..support.pools import pool_parts, pool_running_one


def long_task() -> tuple[trunner.TaskRegistry, trio.Event, trio.Event]:
    """A registry whose one task runs until told: (registry, started, finish)."""
    tasks = trunner.TaskRegistry()
    started, finish = trio.Event(), trio.Event()

    @tasks.task
    async def long(_: Any) -> None:
        started.set()
        await finish.wait()

    return tasks, started, finish


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


async def test_a_finished_task_keeps_its_reservation_while_its_ack_fails(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    """Finished, acknowledgement refused for longer than reclaim_delay: the heartbeat keeps
    the entry fresh, so no other instance reclaims it and runs it again."""
    tasks = trunner.TaskRegistry()
    done = trio.Event()

    @tasks.task
    async def quick(_: Any) -> None:
        done.set()

    stream = keys.stream
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


async def test_a_heartbeat_whose_reply_is_lost_is_retried_in_time(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    """One heartbeat never gets its reply (dropped on the way): the next one must come
    within the beat interval, not after the command timeout, or the running task would
    go stale and be reclaimed while it runs."""
    tasks, started, finish = long_task()
    stream = keys.stream
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


async def test_a_heartbeat_sent_before_a_claim_of_its_own_instance_does_not_lose_the_job(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    """Another fetch loop of the same instance (consumer ``c/1``) claimed the running
    message while a heartbeat for ``c`` was on the way: the job holds the claim's delivery
    (``Job.reclaimed``), so that heartbeat's answer (no longer ``c``'s) is not the job's.
    Marked lost, its failure was neither retried nor dead-lettered (discarded)."""
    tasks = trunner.TaskRegistry()
    started, finish = trio.Event(), trio.Event()

    @tasks.task(max_retry=1, retry_backoff=3600)
    async def long(_: Any) -> None:
        started.set()
        await finish.wait()
        raise RuntimeError("to be retried")

    heartbeats = 0

    def first_heartbeat(args: Any) -> bool:
        nonlocal heartbeats
        if script_call(SCRIPTS.heartbeat)(args):
            heartbeats += 1
            return heartbeats == 1
        return False

    cfg = config(group, reclaim_delay=0.6)
    async with open_transport(url, client_name="t", max_connections=4, connect_timeout=5) as t:
        faulty = FaultyTransport(t)
        broker = Broker(faulty, Keys("trunner", group))
        await broker.ensure_group()
        data = encode_message("long", None, enqueued_at=0.0, max_bytes=1000)
        [message_id] = await broker.enqueue_many([data])
        reader = broker.open_reader()
        entries = await broker.read(reader, "c", 1, 0.1)
        await reader.aclose()
        parts = pool_parts(broker, tasks, cfg)
        pool = parts.pool
        faulty.hold(first_heartbeat)
        async with trio.open_nursery() as nursery:
            pool.bind(nursery)
            await nursery.start(parts.acks.run)
            await nursery.start(parts.heartbeater.run)
            pool.submit(entries, pool.slots.take_nowait(1), "c")
            await started.wait()
            while not faulty.held:  # noqa: ASYNC110 - the first heartbeat is on the way
                await trio.sleep(0.01)
            raw.xclaim(keys.stream, group, "c/1", 0, [message_id])
            claimed = RawEntry(message_id, [b"payload", data], 2)
            pool.submit([claimed], pool.slots.take_nowait(1), "c/1")
            faulty.release_held()
            faulty.hold(first_heartbeat)  # counts the next ones, holds none
            # the held one's answer was read: the job beats again, or it was called lost
            while heartbeats < 2 and not parts.counters.reservations_lost:  # noqa: ASYNC110
                await trio.sleep(0.01)
            finish.set()
            await pool.wait_idle()
            nursery.cancel_scope.cancel()
    assert parts.counters.reservations_lost == 0
    assert parts.counters.discarded == 0
    assert parts.counters.retried == 1
    assert raw.xpending(keys.stream, group)["pending"] == 0
