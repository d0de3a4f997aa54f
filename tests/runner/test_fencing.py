"""An attempt writes only while it owns its delivery (``lua/deliveries.lua``).

Another instance takes a running message over (as it does when this one stalled past
``reclaim_delay``): here the test claims it for a consumer ``other``, as that instance's
reclaim would. The first attempt then ends, and nothing it does may be written: no
acknowledgement (the other delivery is live), no outcome, no slot release, no retry, no
dead letter, no progress. Its work is discarded and counted.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

import trunner
from trunner._redis import SCRIPTS, Broker, RawEntry, open_transport
from trunner._wire.envelope import encode_message
from trunner.keys import Keys

from ..conftest import config, open_checked_runner
from ..support.faults import FaultyTransport, script_call
from ..support.pools import pool_parts

OTHER = "other"


class Late:
    """A task that waits to be told how to end: its started event, and how it ends."""

    def __init__(self) -> None:
        self.started = trio.Event()
        self.go = trio.Event()
        self.how = "return"

    async def body(self, payload: Any) -> str:
        self.started.set()
        await self.go.wait()
        if self.how == "progress":
            await trunner.report_progress(0.5, "from the late attempt")
        if self.how == "raise":
            raise RuntimeError("late failure")
        return "from-late"


def registry(late: Late, **options: Any) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()
    tasks.task(name="late", **options)(late.body)
    return tasks


def pending_for(raw: Any, keys: Keys, group: str, message_id: str) -> tuple[str, int] | None:
    found = raw.xpending_range(keys.stream, group, message_id, message_id, 1)
    if not found:
        return None
    return found[0]["consumer"].decode(), found[0]["times_delivered"]


async def take_over(raw: Any, keys: Keys, group: str, handle: trunner.TaskHandle[Any]) -> str:
    """Another consumer claims the running message, as its reclaim would."""
    message_id = str(handle)
    raw.xclaim(keys.stream, group, OTHER, 0, [message_id])
    assert pending_for(raw, keys, group, message_id) == (OTHER, 2)
    return message_id


async def until_discarded(runner: trunner.Runner) -> None:
    while runner.statistics().discarded == 0:  # noqa: ASYNC110 - a counter, no event
        await trio.sleep(0.01)


async def test_a_late_acknowledgement_writes_nothing(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    """Without the fence the late attempt acknowledged the other instance's live delivery,
    wrote its result over, and freed the concurrency slot while the other still ran."""
    late = Late()
    tasks = registry(late, keep_result=60, concurrency=1)
    async with open_checked_runner(url, config(group), tasks) as runner:
        handle = await runner.dispatch("late", {})
        await late.started.wait()
        message_id = await take_over(raw, keys, group, handle)
        holders = keys.concurrency_holders("4:late")
        assert raw.zrange(holders, 0, -1) == [message_id.encode()]
        late.go.set()
        await until_discarded(runner)
        assert pending_for(raw, keys, group, message_id) == (OTHER, 2), "still the other's"
        assert raw.zrange(holders, 0, -1) == [message_id.encode()], "the slot is still held"
        assert (await handle.status()).state is not trunner.TaskState.SUCCEEDED
        assert runner.statistics().discarded == 1
        raw.xack(keys.stream, group, message_id)  # the other instance's attempt ends it


@pytest.mark.parametrize("max_retry", [0, 2])
async def test_a_late_failure_neither_retries_nor_dead_letters(
    url: str, group: str, keys: Keys, raw: Any, max_retry: int
) -> None:
    late = Late()
    late.how = "raise"
    tasks = registry(late, max_retry=max_retry, keep_result=60)
    async with open_checked_runner(url, config(group), tasks) as runner:
        handle = await runner.dispatch("late", {})
        await late.started.wait()
        message_id = await take_over(raw, keys, group, handle)
        late.go.set()
        await until_discarded(runner)
        assert pending_for(raw, keys, group, message_id) == (OTHER, 2)
        assert raw.zcard(keys.retries) == 0, "no retry scheduled"
        assert raw.xlen(keys.dead) == 0, "not dead-lettered"
        ended = {trunner.TaskState.RETRYING, trunner.TaskState.FAILED, trunner.TaskState.DEAD}
        assert (await handle.status()).state not in ended
        raw.xack(keys.stream, group, message_id)


async def test_a_heartbeat_that_finds_its_delivery_lost_stops_its_writes(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    """The heartbeat marks the attempt lost: its progress and its outcome go nowhere."""
    late = Late()
    late.how = "progress"
    tasks = registry(late, keep_result=60, reservation_timeout=0.3)
    async with open_checked_runner(url, config(group), tasks) as runner:
        handle = await runner.dispatch("late", {})
        await late.started.wait()
        message_id = await take_over(raw, keys, group, handle)
        while runner.statistics().reservations_lost == 0:  # noqa: ASYNC110 - a counter
            await trio.sleep(0.01)
        late.go.set()
        await until_discarded(runner)
        status = await handle.status()
        assert status.state is not trunner.TaskState.SUCCEEDED
        assert status.progress_message != "from the late attempt"
        assert pending_for(raw, keys, group, message_id) == (OTHER, 2)
        raw.xack(keys.stream, group, message_id)


async def reclaimed_by_itself(
    raw: Any, keys: Keys, group: str, runner: trunner.Runner, message_id: str
) -> None:
    """This instance's own reclaim pass claims the message it holds (as after a stall of
    its process past ``reclaim_delay``): its idle time is set past the delay (again, in
    case a heartbeat reset it) until the reclaim counted it."""
    while runner.statistics().reclaimed == 0:
        raw.xclaim(
            keys.stream, group, runner.consumer_name, 0, [message_id], idle=10**9, justid=True
        )
        await trio.sleep(0.01)
    assert pending_for(raw, keys, group, message_id) == (runner.consumer_name, 2)


async def test_a_message_reclaimed_by_its_own_runner_while_it_runs_is_not_discarded(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    """The claim is the running attempt's delivery now: its outcome is written, and the
    task does not run again. (The attempt's writes, fenced to the delivery it began with,
    were discarded, and the message ran again once reclaimed.)"""
    late = Late()
    tasks = registry(late, keep_result=60)
    cfg = config(group, reclaim_delay=60.0, reclaim_interval=0.05)
    async with open_checked_runner(url, cfg, tasks) as runner:
        handle = await runner.dispatch("late", {})
        await late.started.wait()
        await reclaimed_by_itself(raw, keys, group, runner, str(handle))
        late.go.set()
        while not runner.statistics().discarded and pending_for(raw, keys, group, str(handle)):  # noqa: ASYNC110
            await trio.sleep(0.01)
        assert runner.statistics().discarded == 0
        assert pending_for(raw, keys, group, str(handle)) is None
        assert await handle.result(timeout=5) == "from-late"


async def test_a_message_reclaimed_by_its_own_runner_before_its_ack_is_written(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    """Finished, its acknowledgement buffered, when its own runner claims it: it is not run
    a second time, and the acknowledgement is written for the claim's delivery. (It ran
    again, and the two acknowledgements of one message crashed the runner.)"""
    late = Late()
    late.go.set()
    runs = 0

    async def counted(payload: Any) -> str:
        nonlocal runs
        runs += 1
        return await late.body(payload)

    tasks = trunner.TaskRegistry()
    tasks.task(name="late")(counted)
    cfg = config(group, reclaim_delay=60.0, reclaim_interval=0.05, ack_flush_interval=3600.0)
    async with open_checked_runner(url, cfg, tasks) as runner:
        handle = await runner.dispatch("late", {})
        parts = runner._components
        assert parts is not None
        while str(handle) not in parts.holdings.finished:  # noqa: ASYNC110 - no event
            await trio.sleep(0.01)
        await reclaimed_by_itself(raw, keys, group, runner, str(handle))
    assert runs == 1
    assert runner.statistics().discarded == 0
    assert pending_for(raw, keys, group, str(handle)) is None


async def test_a_retry_refused_because_its_own_instance_claimed_the_message_is_written(
    url: str, group: str, raw: Any
) -> None:
    """The instance's own reclaim claimed the failed attempt's message while its retry was
    on the way: the script refused it (sent for the old delivery), but the job holds the
    claim's delivery now; the retry is written for it, not discarded."""
    tasks = trunner.TaskRegistry()

    @tasks.task(max_retry=3, retry_backoff=3600)
    async def flaky(_: Any) -> None:
        raise RuntimeError("later")

    async with open_transport(url, client_name="t", max_connections=4, connect_timeout=5) as t:
        faulty = FaultyTransport(t)
        broker = Broker(faulty, Keys("trunner", group))
        await broker.ensure_group()
        data = encode_message("flaky", None, enqueued_at=1.0, max_bytes=1000)
        [message_id] = await broker.enqueue_many([data])
        reader = broker.open_reader()
        entries = await broker.read(reader, "c", 1, 0.1)
        await reader.aclose()
        parts = pool_parts(broker, tasks, config(group))
        pool = parts.pool
        faulty.hold(script_call(SCRIPTS.retry))
        async with trio.open_nursery() as nursery:
            pool.bind(nursery)
            pool.submit(entries, pool.slots.take_nowait(1), "c")
            while not faulty.held:  # noqa: ASYNC110 - the retry reached Redis
                await trio.sleep(0.01)
            [(_, fields)] = raw.xclaim(broker.keys.stream, group, "c", 0, [message_id])
            claimed = RawEntry(message_id, [x for pair in fields.items() for x in pair], 2)
            pool.submit([claimed], pool.slots.take_nowait(1), "c")  # its own reclaim
            faulty.release_held()
            await pool.wait_idle()
        assert parts.counters.discarded == 0
        assert parts.counters.retried == 1
        assert raw.zcard(broker.keys.retries) == 1
        assert pending_for(raw, broker.keys, group, message_id) is None
