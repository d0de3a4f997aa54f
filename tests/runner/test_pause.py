"""Pausing a group: its runners fetch nothing until it is resumed; running tasks, the
delayed mover and the bookkeeping go on; the pause is seen in statistics, inspect, the
group statistics, /readyz and the metrics; a pause mark trunner did not write is contained.

Crosses _engine/pausing.py (the gate and the pauser), pause.lua and resume.lua, cancellation.py
(the notices ride the cancel channel), fetcher.py (the loops wait at the gate), and the
inspection (admin.py, group_stats.py, serve.py, prometheus.py).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

import trunner
from trunner._engine.pausing import RESYNC_INTERVAL, Pauser
from trunner._redis import RawEntry
from trunner._wire.keys import RELEASED_CONSUMER
from trunner._wire.pause import PAUSE_NOTICE
from trunner._worker.serve import _ready
from trunner.errors import RedisUnavailable
from trunner.keys import Keys

from ..conftest import Gate, config, open_checked_runner, parts, redis_state

#: Enough for two resyncs of the pause mark (one a second) beside the default deadline.
RESYNCS = pytest.mark.deadline(30 + 4 * RESYNC_INTERVAL)


def registry(gate: Gate, ran: list[Any]) -> trunner.TaskRegistry:
    tasks = gate.registry()

    @tasks.task
    async def record(payload: Any) -> None:
        ran.append(payload)

    return tasks


async def reads_twice(pauser: Pauser) -> None:
    """Wait until the runner read the pause mark twice more: time passed, and the runner
    looked at Redis again (so a test can say what did *not* happen meanwhile)."""
    target = pauser.reads + 2
    while pauser.reads < target:  # noqa: ASYNC110 - a counter another task advances
        await trio.sleep(RESYNC_INTERVAL / 10)


@RESYNCS
async def test_a_paused_group_fetches_nothing_until_resumed(url: str, group: str) -> None:
    gate, ran = Gate(), list[Any]()
    async with (
        open_checked_runner(url, config(group), registry(gate, ran)) as runner,
        trunner.open_client(url, group) as client,
    ):
        assert runner.statistics().paused is False
        assert await client.admin.pause() is True
        await runner.wait_paused()
        assert runner.statistics().paused is True
        fetched = runner.statistics().fetched
        await client.dispatch("record", "held")
        await reads_twice(parts(runner).pauser)
        assert ran == []
        assert runner.statistics().fetched == fetched
        assert await client.admin.pending_count() == 0
        assert await client.admin.queue_length() == 1
        assert parts(runner).holdings.cancelled == {}, "a notice is no cancelled task id"
        assert await client.admin.resume() is True
        await runner.wait_resumed()
        assert runner.statistics().paused is False
        await redis_state(lambda: _ran(ran, ["held"]))


async def _ran(ran: list[Any], expected: list[Any]) -> bool:
    await trio.lowlevel.checkpoint()
    return ran == expected


async def test_running_tasks_finish_and_are_acknowledged_while_paused(url: str, group: str) -> None:
    gate, ran = Gate(), list[Any]()
    async with (
        open_checked_runner(url, config(group), registry(gate, ran)) as runner,
        trunner.open_client(url, group) as client,
    ):
        await client.dispatch("gated", "running")
        await gate.wait_started()
        assert await client.admin.pause() is True
        await runner.wait_paused()
        gate.open.set()

        async def acknowledged() -> bool:
            return (
                await client.admin.pending_count() == 0 and await client.admin.queue_length() == 0
            )

        await redis_state(acknowledged)
        assert gate.finished == ["running"]
        stats = runner.statistics()
        assert (stats.paused, stats.succeeded, stats.acked) == (True, 1, 1)
        assert await client.admin.resume() is True


async def test_a_runner_started_while_paused_stays_paused(url: str, group: str) -> None:
    gate, ran = Gate(), list[Any]()
    async with trunner.open_client(url, group) as client:
        assert await client.admin.pause() is True  # before the group exists
        await client.dispatch("record", "queued before the start")
        async with open_checked_runner(url, config(group), registry(gate, ran)) as runner:
            assert runner.statistics().paused is True, "read before the first fetch"
            await runner.wait_paused()
            assert runner.statistics().fetched == 0
            assert ran == []
            assert await client.admin.resume() is True
            await redis_state(lambda: _ran(ran, ["queued before the start"]))


async def test_pause_and_resume_are_idempotent_and_say_what_they_changed(
    url: str, group: str
) -> None:
    async with trunner.open_client(url, group) as client:
        info = await client.admin.inspect()
        assert (info.paused, info.paused_since) == (False, None)
        assert (await client.admin.group_stats()).paused is False
        assert await client.admin.resume() is False, "not paused: nothing to resume"
        assert await client.admin.pause() is True
        since = (await client.admin.inspect()).paused_since
        assert since is not None
        assert await client.admin.pause() is False, "paused already"
        info = await client.admin.inspect()
        assert info.paused
        assert info.paused_since == since, "the first pause's time is kept"
        assert (await client.admin.group_stats()).paused is True
        assert await client.admin.resume() is True
        assert await client.admin.resume() is False
        assert (await client.admin.inspect()).paused_since is None


async def test_the_delayed_mover_keeps_moving_while_paused(url: str, group: str) -> None:
    gate, ran = Gate(), list[Any]()
    async with (
        open_checked_runner(url, config(group), registry(gate, ran)) as runner,
        trunner.open_client(url, group) as client,
    ):
        assert runner.is_leader
        await client.admin.pause()
        await runner.wait_paused()
        await client.dispatch_delayed("record", "due", 0.05)

        async def moved() -> bool:
            return (
                await client.admin.delayed_count() == 0 and await client.admin.queue_length() == 1
            )

        await redis_state(moved)
        assert runner.statistics().delayed_moved == 1
        assert ran == []
        await client.admin.resume()
        await redis_state(lambda: _ran(ran, ["due"]))


@RESYNCS
async def test_a_runner_that_missed_the_notices_follows_the_mark(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    """The mark alone (written without a notice, as after a dropped subscription) pauses
    and resumes a runner within its resync interval."""
    gate, ran = Gate(), list[Any]()
    async with open_checked_runner(url, config(group), registry(gate, ran)) as runner:
        raw.set(keys.paused, "1700000000000")
        await runner.wait_paused()
        assert parts(runner).pauser.since_ms == 1_700_000_000_000
        raw.delete(keys.paused)
        await runner.wait_resumed()
        await runner.dispatch("record", "after")
        await redis_state(lambda: _ran(ran, ["after"]))


async def test_statistics_inspect_health_and_metrics_show_it(url: str, group: str) -> None:
    gate, ran = Gate(), list[Any]()
    async with open_checked_runner(url, config(group), registry(gate, ran)) as runner:
        assert await _ready(runner) == (200, "text/plain", b"ready\n")
        assert await runner.admin.pause() is True  # a runner pauses its whole group
        await runner.wait_paused()
        assert await _ready(runner) == (200, "text/plain", b"ready (paused)\n")
        assert runner.statistics().paused is True
        info = await runner.admin.inspect()
        assert info.paused
        assert info.paused_since is not None
        assert (await runner.admin.group_stats()).paused is True
        prometheus = pytest.importorskip("trunner.prometheus")
        text = prometheus.collect(runner).decode()
        assert f'trunner_paused{{group="{group}"}} 1.0' in text
        assert await runner.admin.resume() is True
        await runner.wait_resumed()
        assert f'trunner_paused{{group="{group}"}} 0.0' in prometheus.collect(runner).decode()


@RESYNCS
async def test_a_pause_mark_trunner_did_not_write_reads_as_not_paused(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    gate, ran = Gate(), list[Any]()
    raw.set(keys.paused, "soon")
    async with (
        open_checked_runner(url, config(group), registry(gate, ran)) as runner,
        trunner.open_client(url, group) as client,
    ):
        assert runner.statistics().paused is False
        await runner.dispatch("record", "runs")
        await redis_state(lambda: _ran(ran, ["runs"]))
        await reads_twice(parts(runner).pauser)
        assert runner.statistics().quarantined == 1, "recorded once, though read again"
        (record,) = await client.admin.quarantined()
        assert (record.source, record.item, record.value) == ("paused", keys.paused, b"soon")
        assert (await client.admin.inspect()).paused_since is None
        assert (await client.admin.group_stats()).paused is False

        raw.delete(keys.paused)
        raw.rpush(keys.paused, "a list")
        await reads_twice(parts(runner).pauser)
        assert runner.statistics().paused is False
        assert raw.type(keys.paused) == b"none", "renamed aside"
        assert (await client.admin.inspect()).paused_since is None
        raw.rpush(keys.paused, "a list again")
        assert (await client.admin.inspect()).paused_since is None, "inspection reads it too"
        assert await client.admin.pause() is True, "a pause replaces what it cannot read"
        await runner.wait_paused()
        assert await client.admin.resume() is True
        await runner.dispatch("record", "after")
        await redis_state(lambda: _ran(ran, ["runs", "after"]))


async def test_a_mark_of_too_many_digits_is_replaced_by_a_pause_not_kept(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    """The runners read a mark of more than 20 digits as not paused (not a time trunner
    wrote), so the scripts must too: ``pause()`` replaces it and says it paused the group
    (not "paused already", with no runner paused), and ``resume()`` says it was not."""
    gate, ran = Gate(), list[Any]()
    async with (
        open_checked_runner(url, config(group), registry(gate, ran)) as runner,
        trunner.open_client(url, group) as client,
    ):
        raw.set(keys.paused, "1" * 21)
        assert (await client.admin.inspect()).paused_since is None
        assert await client.admin.resume() is False, "it was not paused"
        raw.set(keys.paused, "9" * 25)
        assert await client.admin.pause() is True, "this call paused the group"
        assert len(raw.get(keys.paused)) <= 20
        await runner.wait_paused()
        assert (await client.admin.inspect()).paused
        assert await client.admin.resume() is True


async def test_a_message_read_as_the_pause_arrives_is_released_not_started(
    url: str, group: str, keys: Keys, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notice arrives while a read is under way and the read returns a message: the
    message is released for immediate reclaim, not started, and runs after the resume."""
    gate, ran = Gate(), list[Any]()
    async with (
        open_checked_runner(url, config(group), registry(gate, ran)) as runner,
        trunner.open_client(url, group) as client,
    ):
        c = parts(runner)
        read = c.broker.read
        patched = trio.Event()

        async def read_then_pause(*args: Any) -> Any:
            patched.set()
            entries = await read(*args)
            if entries:
                raw.set(keys.paused, "1700000000000")  # the mark, and its notice, meanwhile
                c.pauser.heard(PAUSE_NOTICE)
            return entries

        monkeypatch.setattr(c.broker, "read", read_then_pause)
        for fetcher in c.fetchers:
            fetcher.nudge()  # the blocked read returns; the next one is patched
        await patched.wait()
        await client.dispatch("record", "late")
        await runner.wait_paused()

        async def released() -> bool:
            await trio.lowlevel.checkpoint()
            return runner.statistics().released == 1

        await redis_state(released)
        assert ran == []
        assert (await client.admin.inspect()).pending == {RELEASED_CONSUMER: 1}
        monkeypatch.setattr(c.broker, "read", read)
        assert await client.admin.resume() is True
        await redis_state(lambda: _ran(ran, ["late"]))
        assert runner.statistics().reclaimed == 1


async def test_a_message_whose_release_failed_during_the_pause_runs_after_it_as_attempt_1(
    url: str, group: str, keys: Keys, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message read as the pause arrives is released; if that release fails (Redis
    blinked), it is released again after the resume: it runs then, as its first attempt,
    not after ``reclaim_delay`` as a redelivery (a task without retries would be given up
    on, never having run)."""
    attempts: list[int] = []
    tasks = trunner.TaskRegistry()

    @tasks.task(max_retry=0)
    async def once(payload: Any) -> None:
        attempts.append(trunner.current_message().attempt)

    async with (
        open_checked_runner(url, config(group, reclaim_delay=3600.0), tasks) as runner,
        trunner.open_client(url, group) as client,
    ):
        c = parts(runner)
        read, release = c.broker.read, c.broker.release
        patched, refused = trio.Event(), trio.Event()

        async def read_then_pause(*args: Any) -> Any:
            patched.set()
            entries = await read(*args)
            if entries:
                raw.set(keys.paused, "1700000000000")  # the mark, and its notice, meanwhile
                c.pauser.heard(PAUSE_NOTICE)
            return entries

        async def release_fails_once(*args: Any) -> int:
            if not refused.is_set():
                refused.set()
                raise RedisUnavailable("Redis blinked")
            return await release(*args)

        monkeypatch.setattr(c.broker, "read", read_then_pause)
        monkeypatch.setattr(c.broker, "release", release_fails_once)
        for fetcher in c.fetchers:
            fetcher.nudge()  # the blocked read returns; the next one is patched
        await patched.wait()
        await client.dispatch(once, "late")
        await runner.wait_paused()
        await refused.wait()
        assert attempts == []
        monkeypatch.setattr(c.broker, "read", read)
        assert await client.admin.resume() is True

        async def ran() -> bool:
            await trio.lowlevel.checkpoint()
            return bool(attempts)

        await redis_state(ran)
        assert attempts == [1]
        assert runner.statistics().dead_lettered == 0


async def test_a_claim_that_returns_a_message_running_here_as_the_pause_arrives_keeps_it(
    url: str, group: str, keys: Keys, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reclaim pass can return a message that runs on this very instance (its
    heartbeat was late). If the pause arrives meanwhile, the claimed messages are handed
    back: but not that one, which the pool keeps running, as it does without a pause.
    Released, any instance would claim it at once and run it a second time."""
    gate, ran = Gate(), list[Any]()
    async with open_checked_runner(url, config(group), registry(gate, ran)) as runner:
        c = parts(runner)
        await runner.dispatch("gated", "long")
        await gate.wait_started()
        ((entry_id, fields),) = raw.xrange(keys.stream)
        (mine,) = raw.xpending_range(keys.stream, group, "-", "+", 10)
        reclaim = c.broker.reclaim
        claimed = trio.Event()

        async def claim_own_then_pause(*args: Any) -> Any:
            if claimed.is_set():
                return await reclaim(*args)
            claimed.set()
            raw.set(keys.paused, "1700000000000")  # the mark, and its notice, meanwhile
            c.pauser.heard(PAUSE_NOTICE)
            flat = [x for pair in fields.items() for x in pair]
            return "0-0", [RawEntry(entry_id.decode(), flat, 2)]

        monkeypatch.setattr(c.broker, "reclaim", claim_own_then_pause)
        for fetcher in c.fetchers:
            fetcher._schedule.due_now()
            fetcher.nudge()
        await claimed.wait()
        await runner.wait_paused()
        assert runner.statistics().released == 0
        (still,) = raw.xpending_range(keys.stream, group, "-", "+", 10)
        assert still["consumer"] == mine["consumer"] != RELEASED_CONSUMER.encode()
        gate.open.set()
        await redis_state(lambda: _ran(gate.finished, ["long"]))
        assert runner.statistics().reservations_lost == 0
        assert gate.started == ["long"]
