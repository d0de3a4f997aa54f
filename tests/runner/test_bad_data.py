"""Bad data in Redis and in the registry costs that item, never a runner or the group.

Crosses the quarantine (trunner/_engine/quarantine.py), the leadership's supervision of its chores
(leadership.py), the mover, cron, the aggregator and reporter, the elector, the fetcher
(a lost consumer group), and the runner's bounded shutdown (runner.py, _jobhost.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

import trunner
from trunner._wire.envelope import encode_message
from trunner._wire.keys import Keys
from trunner.election import Elector
from trunner.schedule import CronSchedule
from trunner.status import TaskState

from ..conftest import config, parts, redis_state

#: Timings that make the leader's chores, reports and elections come fast.
FAST = {
    "leader_ttl": 0.5,
    "leader_wait": 0.6,
    "leader_jitter": 0.01,
    "report_interval": 0.1,
    "stats_interval": 0.2,
    "instance_ttl": 1.0,
    "block_duration": 0.2,
    "janitor_interval": 0.2,
}


def records(raw: Any, keys: Keys) -> list[dict[bytes, bytes]]:
    """The quarantine records, oldest first."""
    return [fields for _, fields in raw.xrange(keys.quarantine)]


class Runs:
    """Task runs by payload; tests await them."""

    def __init__(self) -> None:
        self.payloads: list[Any] = []
        self._lot = trio.lowlevel.ParkingLot()

    def add(self, payload: Any) -> None:
        self.payloads.append(payload)
        self._lot.unpark_all()

    async def wait_for(self, payload: Any) -> None:
        while payload not in self.payloads:
            await self._lot.park()


def registry(runs: Runs, *names: str) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()
    for name in names or ("record",):

        async def record(payload: Any) -> None:
            runs.add(payload)

        tasks.task(name)(record)
    return tasks


def add_delayed(raw: Any, keys: Keys, task_id: str, data: bytes, unique: bytes | None) -> None:
    """A delayed task due now, written as the schedule script writes one."""
    raw.zadd(keys.delayed, {task_id: 1000})
    raw.hset(keys.delayed_messages, task_id, data)
    if unique is not None:
        raw.hset(keys.delayed_unique, task_id, unique)


async def test_a_delayed_unique_lock_of_another_layout_is_set_aside_and_no_runner_fails(
    url: str, group: str, raw: Any
) -> None:
    """The documentation once described this index as three lines; the code reads JSON.
    Such an entry made every leader in turn crash; now it is set aside with its message,
    and the other delayed tasks move on."""
    keys = Keys("trunner", group)
    runs = Runs()
    data = encode_message("record", "locked", enqueued_at=0.0, task_id="t1", max_bytes=10_000)
    lines = f"{keys.unique('6:record')}\ntoken\n600000".encode()
    add_delayed(raw, keys, "t1", data, lines)
    good = encode_message("record", "fine", enqueued_at=0.0, task_id="t2", max_bytes=10_000)
    add_delayed(raw, keys, "t2", good, None)
    cfg = config(group, **FAST)
    async with (
        trunner.open_runner(url, cfg, registry(runs)) as a,
        trunner.open_runner(url, cfg, registry(runs)) as b,
    ):
        await runs.wait_for("fine")

        async def set_aside() -> bool:
            return bool(records(raw, keys))

        await redis_state(set_aside)
        [record] = records(raw, keys)
        assert record[b"source"] == b"delayed:unique"
        assert record[b"item"] == b"t1"
        assert b"cannot be read" in record[b"reason"]
        assert record[b"value"] == lines
        assert record[b"message"] == data, "the task is kept in the record: nothing is lost"
        assert raw.zscore(keys.delayed, "t1") is None
        assert raw.hget(keys.delayed_unique, "t1") is None
        leader = a if a.is_leader else b
        assert leader.statistics().quarantined == 1
        later = await a.dispatch_delayed("record", "later", 0)
        assert later
        await runs.wait_for("later")
        assert a.state is b.state is trunner.RunnerState.STARTED
    assert "locked" not in runs.payloads


async def test_a_task_name_ending_in_b_and_a_bad_metrics_field_leave_the_leader_running(
    url: str, group: str, raw: Any
) -> None:
    keys = Keys("trunner", group)
    runs = Runs()
    tasks = registry(runs, "shard:b")
    raw.hset(keys.metrics, "t:other:n", "not a number")
    async with trunner.open_runner(url, config(group, **FAST), tasks) as runner:
        await runner.dispatch("shard:b", 1)
        await runs.wait_for(1)
        aggregator = parts(runner).aggregator
        # A window with the task in it: its name's ':b' is not read as a bucket.
        while True:
            await runner.dispatch("shard:b", 2)
            await runs.wait_for(2)
            runs.payloads.remove(2)
            rounds = aggregator.rounds
            while aggregator.rounds == rounds:  # noqa: ASYNC110 - a round is a few 100 ms
                await trio.sleep(0.05)
            stats = raw.get(keys.stats)
            if stats and "shard:b" in json.loads(stats)["tasks"]:
                break
        reasons = {(r[b"source"], r[b"item"]) for r in records(raw, keys)}
        assert (b"metrics", b"t:other:n") in reasons
        assert runner.state is trunner.RunnerState.STARTED
        assert runner.statistics().chores_restarted == 0


async def test_a_metrics_field_holding_no_number_is_replaced_by_the_next_report(
    url: str, group: str, raw: Any
) -> None:
    keys = Keys("trunner", group)
    runs = Runs()
    raw.hset(keys.metrics, "t:record:n", "garbage")
    cfg = config(group, **{**FAST, "stats_interval": 60.0})  # no aggregation meanwhile
    async with trunner.open_runner(url, cfg, registry(runs)) as runner:
        await runner.dispatch("record", 1)
        await runs.wait_for(1)

        async def replaced() -> bool:
            value = raw.hget(keys.metrics, "t:record:n")
            recorded = any(r[b"source"] == b"metrics" for r in records(raw, keys))
            return value is not None and value != b"garbage" and recorded  # (written after)

        await redis_state(replaced)
        assert float(raw.hget(keys.metrics, "t:record:n")) == 1.0
        [record] = [r for r in records(raw, keys) if r[b"source"] == b"metrics"]
        assert record[b"value"] == b"garbage"
        assert runner.statistics().quarantined == 1


def test_a_cron_expression_that_never_fires_is_refused_when_registered() -> None:
    with pytest.raises(ValueError, match=r"never fires"):
        CronSchedule("leap", "0 0 30 2 *", "report")
    tasks = trunner.TaskRegistry()
    with pytest.raises(ValueError, match=r"never fires"):

        @tasks.cron("0 0 31 4 *")  # 31 April
        async def report(_: Any) -> None: ...

    CronSchedule("leap-day", "0 0 29 2 *", "report")  # every four years: it does fire


async def test_a_cron_schedule_that_fails_at_run_time_is_set_aside_and_the_others_fire(
    url: str, group: str, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = Keys("trunner", group)
    runs = Runs()
    tasks = registry(runs)
    tasks.cron("* * * * * *", "record", "every second", name="ok")
    tasks.cron("* * * * * *", "record", "broken", name="broken")
    raw.hset(keys.cron, "ok", "not a tick")
    original = CronSchedule.next_tick

    def next_tick(self: CronSchedule, after: float) -> float:
        if self.name == "broken":
            raise ValueError("no tick: the zone's data changed")
        return original(self, after)

    monkeypatch.setattr(CronSchedule, "next_tick", next_tick)
    async with trunner.open_runner(url, config(group, **FAST), tasks) as runner:
        await runs.wait_for("every second")

        async def noted() -> bool:
            return len(records(raw, keys)) >= 2

        await redis_state(noted)
        by_item = {r[b"item"]: r for r in records(raw, keys)}
        assert by_item[b"broken"][b"source"] == b"cron"
        assert by_item[b"broken"][b"value"] == b"* * * * * *"
        assert by_item[b"ok"][b"reason"] == b"the last tick fired is not a number"
        assert runner.state is trunner.RunnerState.STARTED
    assert "broken" not in runs.payloads


async def test_a_failing_leader_chore_is_restarted_and_the_runner_goes_on(
    url: str, group: str
) -> None:
    calls = 0
    again = trio.Event()

    async def chore(_: Elector) -> None:
        nonlocal calls
        calls += 1
        if calls >= 2:
            again.set()
            await trio.sleep_forever()
        raise ZeroDivisionError("a defect in a chore")

    runner = trunner.Runner(url, config(group, **FAST), trunner.TaskRegistry())
    runner._leader_chores.append(chore)
    errors: list[BaseException] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)

        async def collect() -> None:
            async for error in runner.errors():
                errors.append(error)

        nursery.start_soon(collect)
        await again.wait()
        assert runner.statistics().chores_restarted == 1
        assert runner.state is trunner.RunnerState.STARTED
        runner.stop()
    assert any(isinstance(e, ZeroDivisionError) for e in errors)


@pytest.mark.parametrize(
    "corrupt",
    [
        "a list as the lease",
        "a lease that never expires",
        "a fence that is not a number",
        "a fence below 0",
    ],
)
async def test_a_corrupted_lease_does_not_keep_the_group_without_a_leader(
    url: str, group: str, raw: Any, corrupt: str
) -> None:
    keys = Keys("trunner", group)
    if corrupt == "a list as the lease":
        raw.rpush(keys.leader, "x")
    elif corrupt == "a lease that never expires":
        raw.set(keys.leader, "a-holder-long-gone")
    elif corrupt == "a fence below 0":  # INCR gave 0 (no fence: not led) or a negative one
        raw.set(keys.fence, "-1")
    else:
        raw.set(keys.fence, "garbage")
    async with trunner.open_runner(url, config(group, **FAST), trunner.TaskRegistry()) as r:
        elector = r.elector
        assert elector is not None
        await elector.wait_promoted()
        assert elector.fence is not None
        assert elector.fence > 0
        assert raw.get(keys.leader) == r.consumer_name.encode()
        [record] = records(raw, keys)
        assert record[b"source"] == b"leader"
        assert r.statistics().quarantined == 1
    assert int(raw.get(keys.fence)) > 0


async def test_a_key_of_the_wrong_type_is_renamed_aside_and_the_loop_goes_on(
    url: str, group: str, raw: Any
) -> None:
    keys = Keys("trunner", group)
    runs = Runs()
    raw.set(keys.delayed_unique, "not a hash")
    async with trunner.open_runner(url, config(group, **FAST), registry(runs)) as runner:
        await runner.dispatch_delayed("record", "moved", 0)
        await runs.wait_for("moved")
        [record] = records(raw, keys)
        assert record[b"source"] == keys.delayed_unique.encode()
        assert record[b"reason"].startswith(b"a string")
        renamed = record[b"action"].decode().removeprefix("renamed to ")
        assert raw.get(renamed) == b"not a hash", "set aside, not deleted"
        assert raw.type(keys.delayed_unique) in (b"none", b"hash")


async def test_a_lost_group_keeping_finished_messages_is_recreated_from_its_floor(
    url: str, group: str, raw: Any
) -> None:
    """With delete_on_ack=False, a group recreated from the stream's start would run every
    finished message it kept again."""
    keys = Keys("trunner", group)
    runs = Runs()
    cfg = config(group, **FAST, delete_on_ack=False)
    async with trunner.open_runner(url, cfg, registry(runs)) as runner:
        for i in range(3):
            await runner.dispatch("record", i)
        for i in range(3):
            await runs.wait_for(i)
        janitor = parts(runner).janitor
        await janitor.wait_rounds(janitor.rounds + 2)  # the floor is recorded
        assert raw.get(keys.floor) is not None
        raw.xgroup_destroy(keys.stream, group)
        await runner.dispatch("record", "after")
        await runs.wait_for("after")
        assert sorted(map(str, runs.payloads)) == ["0", "1", "2", "after"], "none ran again"
        [record] = [r for r in records(raw, keys) if r[b"source"] == b"group"]
        assert record[b"action"].startswith(b"recreated from id ")


def _id(entry_id: str | bytes) -> tuple[int, int]:
    ms, _, seq = (entry_id.decode() if isinstance(entry_id, bytes) else entry_id).partition("-")
    return int(ms), int(seq)


async def test_the_floor_is_kept_current_between_janitor_rounds(
    url: str, group: str, raw: Any
) -> None:
    """The floor was recorded only by the janitor's rounds (every 60 s by default): a group
    lost before the next round ran again every message finished since the last one. The
    leader records it every second, whatever ``janitor_interval`` is."""
    keys = Keys("trunner", group)
    runs = Runs()
    cfg = config(group, **{**FAST, "janitor_interval": 3600.0}, delete_on_ack=False)
    async with trunner.open_runner(url, cfg, registry(runs)) as runner:
        ids = [str(await runner.dispatch("record", i)) for i in range(3)]
        for i in range(3):
            await runs.wait_for(i)

        async def floor_past_the_last() -> bool:
            floor = raw.get(keys.floor)
            return floor is not None and _id(floor) > _id(ids[-1])

        await redis_state(floor_past_the_last)  # every one acknowledged, then recorded
        assert parts(runner).janitor.rounds == 0, "no janitor round recorded it"
        raw.xgroup_destroy(keys.stream, group)
        await runner.dispatch("record", "after")
        await runs.wait_for("after")
        assert sorted(map(str, runs.payloads)) == ["0", "1", "2", "after"], "none ran again"
    assert raw.xlen(keys.stream) == 4, "the finished messages were kept (nothing trimmed)"


async def test_a_task_ignoring_cancellation_cannot_hold_the_runner_past_its_grace(
    url: str, group: str, raw: Any
) -> None:
    keys = Keys("trunner", group)
    started, finish, ended = trio.Event(), trio.Event(), trio.Event()
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def stubborn(_: Any) -> None:
        started.set()
        try:
            with trio.CancelScope(shield=True):
                await finish.wait()
        finally:
            ended.set()

    cfg = config(group, drain_timeout=0.2, cancel_grace=0.2)
    async with trunner.open_runner(url, cfg, tasks) as runner:
        message_id = await runner.dispatch("stubborn")
        await started.wait()
    # open_runner returned while the task still runs: it was abandoned.
    assert not ended.is_set()
    assert runner.statistics().abandoned == 1
    [pending] = raw.xpending_range(keys.stream, group, message_id, message_id, 1)
    assert pending["consumer"] == b"trunner:released", "its message is released"
    finish.set()
    await ended.wait()


async def test_stop_without_drain_bounds_the_exit_by_the_grace_alone(url: str, group: str) -> None:
    started, finish = trio.Event(), trio.Event()
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def stubborn(_: Any) -> None:
        started.set()
        with trio.CancelScope(shield=True):
            await finish.wait()

    cfg = config(group, drain_timeout=600.0, cancel_grace=0.2)  # the test's deadline is 30 s
    async with trunner.open_runner(url, cfg, tasks) as runner:
        await runner.dispatch("stubborn")
        await started.wait()
        runner.stop(drain=False)
    assert runner.statistics().abandoned == 1
    finish.set()


async def test_a_failed_task_whose_handler_is_cut_off_by_the_drain_never_runs_again(
    url: str, group: str
) -> None:
    """max_retry=0: the one attempt failed; its handler outlived the drain timeout. The
    message is released keeping its attempt, so its next delivery gives it up."""
    ran = 0
    handled: list[str] = []
    in_handler = trio.Event()
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def fails(_: Any) -> None:
        nonlocal ran
        ran += 1
        raise RuntimeError("boom")

    async def slow_handler(message: trunner.TaskMessage, error: BaseException) -> None:
        handled.append(type(error).__name__)
        if len(handled) == 1:
            in_handler.set()
            await trio.sleep_forever()

    cfg = config(group, drain_timeout=0.1, reclaim_interval=0.1, failed_task_handler=slow_handler)
    async with trunner.open_runner(url, cfg, tasks) as first:
        await first.dispatch("fails")
        await in_handler.wait()
    assert first.statistics().interrupted == 1
    async with trunner.open_runner(url, cfg, tasks) as second:

        async def dead() -> bool:
            return await second.admin.dead_letter_count() == 1

        await redis_state(dead)
        [letter] = await second.admin.dead_letters()
        assert letter.reason == "max retries exceeded (redelivered)"
    assert ran == 1, "the task never ran again"
    assert handled == ["MaxRetryExceeded", "MaxRetryExceeded"]


async def test_a_dead_letter_stream_of_the_wrong_type_loses_no_message(
    url: str, group: str, raw: Any
) -> None:
    """The dead-letter script acknowledged the message and then failed on the key's type:
    Redis keeps what a failing script wrote, so the message was gone, never dead-lettered.
    Now the script checks its keys first, and the runner sets the key aside."""
    keys = Keys("trunner", group)
    raw.rpush(keys.dead, "not a stream")
    async with trunner.open_runner(url, config(group, **FAST), registry(Runs())) as runner:
        data = encode_message("nobody", None, enqueued_at=0.0, task_id="t", max_bytes=10_000)
        entry = raw.xadd(keys.stream, {"payload": data}).decode()

        async def dead_lettered() -> bool:
            return raw.type(keys.dead) == b"stream" and bool(raw.xrange(keys.dead))

        await redis_state(dead_lettered)
        [(_, letter)] = raw.xrange(keys.dead)
        assert letter[b"message_id"] == entry.encode()
        [record] = records(raw, keys)
        assert record[b"source"] == keys.dead.encode()
        assert runner.state is trunner.RunnerState.STARTED


async def test_a_stream_of_the_wrong_type_does_not_keep_runners_from_starting(
    url: str, group: str, raw: Any
) -> None:
    keys = Keys("trunner", group)
    runs = Runs()
    raw.set(keys.stream, "not a stream")
    async with trunner.open_runner(url, config(group, **FAST), registry(runs)) as runner:
        await runner.dispatch("record", "runs")
        await runs.wait_for("runs")
        [record] = records(raw, keys)
        assert record[b"source"] == keys.stream.encode()
        renamed = record[b"action"].decode().removeprefix("renamed to ")
        assert raw.get(renamed) == b"not a stream", "set aside, not deleted"


async def test_a_quarantine_of_the_wrong_type_is_set_aside_and_the_record_written(
    url: str, group: str, raw: Any
) -> None:
    keys = Keys("trunner", group)
    raw.rpush(keys.quarantine, "not a stream")
    raw.hset(keys.metrics, "t:x:n", "not a number")
    async with trunner.open_runner(url, config(group, **FAST), registry(Runs())):

        async def recorded() -> bool:
            if raw.type(keys.quarantine) != b"stream":
                return False
            return any(r[b"source"] == b"metrics" for r in records(raw, keys))

        await redis_state(recorded)
    aside = [r for r in records(raw, keys) if r[b"source"] == keys.quarantine.encode()]
    assert aside, "the list was renamed aside, and said so"


async def test_instance_details_holding_1e400_are_listed_without_and_the_stats_go_on(
    url: str, group: str, raw: Any
) -> None:
    """JSON reads 1e400 as infinity, and int(inf) raised OverflowError, which the leader's
    statistics round did not expect: the chore was restarted, again and again."""
    keys = Keys("trunner", group)
    now_ms = raw.time()[0] * 1000
    raw.zadd(keys.instances, {"ghost": now_ms + 600_000})  # live for the whole test
    raw.hset(keys.instances_info, "ghost", '{"capacity": 1e400, "pid": 1}')
    async with trunner.open_runner(url, config(group, **FAST), registry(Runs())) as runner:
        aggregator = parts(runner).aggregator

        async def two_rounds() -> bool:
            await trio.lowlevel.checkpoint()
            return aggregator.rounds >= 2

        await redis_state(two_rounds)
        [record] = [r for r in records(raw, keys) if r[b"source"] == b"instances:info"]
        assert record[b"item"] == b"ghost"
        assert runner.statistics().chores_restarted == 0
        ghost = [i for i in await runner.admin.instances() if i.id == "ghost"]
        assert ghost[0].capacity == 0, "listed without its details"


async def test_an_instance_seen_years_ahead_is_not_listed_and_the_leader_drops_it(
    url: str, group: str, raw: Any
) -> None:
    """Its time was above every cut-off: listed as live for ever, its capacity counted."""
    keys = Keys("trunner", group)
    now_ms = raw.time()[0] * 1000
    raw.zadd(keys.instances, {"ghost": now_ms + 10 * 365 * 86_400_000})
    raw.hset(keys.instances_info, "ghost", '{"capacity": 1000, "pid": 1}')
    async with trunner.open_runner(url, config(group, **FAST), registry(Runs())) as runner:
        assert "ghost" not in {i.id for i in await runner.admin.instances()}

        async def dropped() -> bool:  # the round drops it, then records it
            await trio.lowlevel.checkpoint()
            recorded = any(r[b"source"] == b"instances" for r in records(raw, keys))
            return recorded and raw.zscore(keys.instances, "ghost") is None

        await redis_state(dropped)
        assert raw.hget(keys.instances_info, "ghost") is None
        [record] = [r for r in records(raw, keys) if r[b"source"] == b"instances"]
        assert record[b"item"] == b"ghost"
        assert record[b"reason"] == b"last seen more than an hour ahead of the leader's clock"
        assert runner.statistics().chores_restarted == 0
        assert [i.id for i in await runner.admin.instances()] == [runner.consumer_name]


async def test_dead_letters_whose_numbers_are_not_finite_can_be_read(
    url: str, group: str, raw: Any
) -> None:
    keys = Keys("trunner", group)
    raw.xadd(keys.dead, {"attempt": "inf", "failed_at": "1e400", "task": "x"})
    raw.xadd(keys.dead, {"attempt": "nan", "failed_at": "-inf"})
    async with trunner.open_runner(url, config(group, **FAST), registry(Runs())) as runner:
        letters = await runner.admin.dead_letters()
    assert [(d.attempt, d.failed_at) for d in letters] == [(0, 0.0), (0, 0.0)]
    assert letters[0].task == "x"


@pytest.mark.parametrize("mark", ["\u00b2", "9" * 5000, "1e400", " 5"])
async def test_a_cancel_mark_that_is_not_a_time_is_deleted_and_the_janitor_goes_on(
    url: str, group: str, raw: Any, mark: str
) -> None:
    """'²'.isdigit() is true and int('²') raises, as int() of 5000 digits does: the
    janitor's round failed at every round. Redis's tonumber() reads '1e400' as infinity:
    the mark was recorded as deleted and kept for ever."""
    keys = Keys("trunner", group)
    raw.hset(keys.cancelled, "ghost", mark)
    async with trunner.open_runner(url, config(group, **FAST), registry(Runs())) as runner:
        janitor = parts(runner).janitor
        await janitor.wait_rounds(2)
        [record] = records(raw, keys)
        assert record[b"source"] == b"cancelled"
        assert record[b"action"] == b"deleted"
        assert raw.hget(keys.cancelled, "ghost") is None
        assert runner.statistics().chores_restarted == 0


@pytest.mark.parametrize("decisions", [False, True], ids=["fixed", "decided"])
async def test_a_capacity_version_that_is_not_a_count_is_replaced(
    url: str, group: str, raw: Any, decisions: bool
) -> None:
    """The leader read the version back with int() (a fixed capacity: the statistics round
    failed, and the chore restarted, every round) or incremented it (HINCRBY failed:
    no statistics were published again)."""
    keys = Keys("trunner", group)
    raw.hset(keys.capacity, mapping={"value": "2", "version": "abc"})
    bounds = {"num_workers": 2, "min_workers": 1, "max_workers": 3, "long_queue_threshold": 30.0}
    cfg = config(group, **FAST, **(bounds if decisions else {}))
    async with trunner.open_runner(url, cfg, registry(Runs())) as runner:
        aggregator = parts(runner).aggregator

        async def two_rounds() -> bool:
            await trio.lowlevel.checkpoint()
            return aggregator.rounds >= 2

        await redis_state(two_rounds)
        assert runner.statistics().chores_restarted == 0
        version = raw.hget(keys.capacity, "version")
        assert version is None or version.isdigit()
        if decisions:
            assert int(raw.hget(keys.capacity, "version")) >= 1


@pytest.mark.parametrize("stored", ["1e400", "9" * 20, "a week ahead"])
async def test_a_last_cron_tick_that_cannot_have_fired_does_not_stop_the_schedule(
    url: str, group: str, raw: Any, stored: str
) -> None:
    """The fire script read the stored tick with tonumber(): '1e400' is infinity, and
    every tick was 'already fired'; so was one 20 digits long, or one in the future."""
    keys = Keys("trunner", group)
    runs = Runs()
    tasks = registry(runs)
    tasks.cron("* * * * * *", "record", "tick", name="tick")
    if stored == "a week ahead":
        stored = str((raw.time()[0] + 7 * 86400) * 1000)
    raw.hset(keys.cron, "tick", stored)
    async with trunner.open_runner(url, config(group, **FAST), tasks) as runner:
        await runs.wait_for("tick")
        [record] = records(raw, keys)
        assert (record[b"source"], record[b"item"]) == (b"cron", b"tick")
        assert runner.statistics().quarantined == 1
    assert int(raw.hget(keys.cron, "tick")) <= (raw.time()[0] + 1) * 1000, "replaced"


async def test_metrics_too_large_to_add_up_leave_the_capacity_decision_going(
    url: str, group: str, raw: Any
) -> None:
    """1e308 s over 1e-300 runs is a finite field each, and an infinite average: the
    capacity decision raised OverflowError at math.ceil, at every round with a queue."""
    keys = Keys("trunner", group)
    raw.hset(keys.metrics, mapping={"t:record:s": "1e308", "t:record:n": "1e-300"})
    started, release = trio.Event(), trio.Event()
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def hold(_: Any) -> None:
        started.set()
        await release.wait()

    bounds = {"num_workers": 2, "min_workers": 1, "max_workers": 3, "long_queue_threshold": 30.0}
    async with trunner.open_runner(url, config(group, **FAST, **bounds), tasks) as runner:
        await runner.dispatch("hold")  # the queue is not empty while it runs
        await started.wait()
        aggregator = parts(runner).aggregator

        async def two_rounds() -> bool:
            await trio.lowlevel.checkpoint()
            return aggregator.rounds >= 2

        await redis_state(two_rounds)
        assert runner.statistics().chores_restarted == 0
        assert raw.hget(keys.capacity, "value") == b"3"
        release.set()


@pytest.mark.parametrize("fails", [False, True], ids=["acknowledged", "dead-lettered"])
async def test_a_unique_lock_of_another_type_never_fails_the_end_of_its_task(
    url: str, group: str, raw: Any, fails: bool
) -> None:
    """The acknowledgement and the dead-letter scripts read the task's lock after they
    had acknowledged it: a lock of another type failed them midway, and Redis keeps what a
    failing script wrote, so a given-up message was lost, never dead-lettered, and an
    acknowledgement batch failed at every try. A lock of another type is nobody's lock."""
    keys = Keys("trunner", group)
    tasks = trunner.TaskRegistry()
    started, release = trio.Event(), trio.Event()

    @tasks.task(unique=True, unique_key=lambda _: "k", unique_for=60, max_retry=0)
    async def once(_: Any) -> None:
        started.set()
        await release.wait()
        if fails:
            raise RuntimeError("failed")

    async with trunner.open_runner(url, config(group), tasks) as runner:
        await runner.dispatch(once, None)
        await started.wait()
        lock = keys.unique(tasks.get("once").key_for(None))
        assert raw.type(lock) == b"string"
        raw.delete(lock)
        raw.rpush(lock, "not a lock")
        release.set()

        async def ended() -> bool:
            finished = await runner.admin.dead_letter_count() == 1 if fails else True
            written = fails or runner.statistics().acked == 1  # the batch went through
            return finished and written and not await runner.admin.pending_count()

        await redis_state(ended)
        assert runner.state is trunner.RunnerState.STARTED
    assert raw.type(lock) == b"list"


async def test_a_lane_stream_of_the_wrong_type_is_set_aside_and_the_lanes_go_on(
    url: str, group: str, raw: Any
) -> None:
    """A priority lane's stream holding a string: set aside like the default stream, and
    both lanes run."""
    keys = Keys("trunner", group)
    runs = Runs()
    raw.set(keys.lane_stream("urgent"), "not a stream")
    lanes = {"urgent": 2, "default": 1}
    async with trunner.open_runner(url, config(group, **FAST, lanes=lanes), registry(runs)) as r:
        await r.dispatch("record", "urgent", priority="urgent")
        await r.dispatch("record", "plain")
        await runs.wait_for("urgent")
        await runs.wait_for("plain")
        [record] = records(raw, keys)
        assert record[b"source"] == keys.lane_stream("urgent").encode()
        renamed = record[b"action"].decode().removeprefix("renamed to ")
        assert raw.get(renamed) == b"not a stream", "set aside, not deleted"


@pytest.mark.parametrize(
    "stored", ["inf", "1e300", "nan", "-inf", "1e16", "0x10", "99999999999999", "1000"]
)
async def test_a_rate_state_that_is_no_time_is_set_aside_and_its_tasks_run(
    url: str, group: str, raw: Any, stored: str
) -> None:
    """admit.lua read the rate state with tonumber(): with 'inf' or '1e300' it acknowledged
    and deleted the message, then failed writing the reservation (SET ... PX 1e+300): the
    task was lost without a trace. With 'nan' every admission failed: the limit's tasks
    stalled for ever, and nothing was set aside. A time trunner never writes (14 digits:
    the year 5138, ahead of any time-to-live; or one that never expires) deferred them for
    millennia."""
    keys = Keys("trunner", group)
    runs = Runs()
    tasks = trunner.TaskRegistry()

    @tasks.task(rate_limit="1000/s", rate_burst=5, keep_result=60)
    async def paced(payload: Any) -> None:
        runs.add(payload)

    state = keys.rate_limit("5:paced")
    raw.set(state, stored)
    async with trunner.open_runner(url, config(group, **FAST), tasks) as runner:
        handles = [await runner.dispatch("paced", n) for n in range(3)]
        for handle in handles:
            assert await handle.result(timeout=20) is None
            assert (await handle.status()).state is TaskState.SUCCEEDED
        assert sorted(runs.payloads) == [0, 1, 2]
        [record] = records(raw, keys)
        assert (record[b"source"], record[b"item"]) == (b"limits", state.encode())
        assert b"not a time in ms" in record[b"reason"], record
        renamed = record[b"action"].decode().removeprefix("renamed to ")
        assert raw.get(renamed) == stored.encode(), "set aside, not deleted"
        assert runner.statistics().errors == 0


@pytest.mark.parametrize(
    "floor", ["99999999999999999999-0", "1-18446744073709551616", "9999999999999-0"]
)
async def test_a_floor_that_is_no_stream_id_does_not_keep_the_runner_from_starting(
    url: str, group: str, raw: Any, floor: str
) -> None:
    """A group is created from its floor; one of 20 digits beyond 2^64 - 1 passed the
    check (digits, a dash, digits) and XGROUP CREATE refused it: no runner started."""
    keys = Keys("trunner", group)
    runs = Runs()
    raw.set(keys.floor, floor)
    async with trunner.open_runner(url, config(group, **FAST), registry(runs)) as runner:
        await runner.dispatch("record", "runs")
        await runs.wait_for("runs")
