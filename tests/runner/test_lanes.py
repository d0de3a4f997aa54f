"""Priority lanes: each lane its own stream in the queue's slot, served strictly or by
weight; a task keeps its lane through retries, delays, dead letters and replays, reclaims
and releases; a lower lane served by weight never starves under a saturated upper lane.

Crosses keys.py (lane streams, entry ids), message.py (the lane as the first member),
the producer (priority), the broker (one call per lane), lanes.lua (the scripts that put a
stored message back, or look a task up by id), the fetcher (the order of the lanes, the
read of all lanes at once) and the release and reclaim paths.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

import trunner
import trunner.testing
from trunner._engine.lanes import lane_plan, split_excess
from trunner._redis import Broker, RawEntry
from trunner._wire.decode import decode_fields, decode_message
from trunner._wire.envelope import encode_message
from trunner._wire.keys import hash_tag
from trunner._wire.names import DEFAULT_LANE, check_lane, entry_id, lane_suffix, split_entry_id
from trunner.errors import RedisUnavailable
from trunner.keys import Keys
from trunner.testing import capture_errors

from ..conftest import config, open_checked_runner, parts, redis_state

LANES = {"urgent": 9, "default": 1}


class Recorder:
    """A registry whose tasks note (lane, payload) in the order they start."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, Any]] = []
        self.ids: dict[Any, list[str]] = {}
        self.tasks = trunner.TaskRegistry()
        self.failing: set[Any] = set()
        self.gate = trio.Event()
        self.blocked = 0

        @self.tasks.task(max_retry=2, retry_backoff=0.01)
        async def record(payload: Any) -> Any:
            message = trunner.current_message()
            self.ran.append((message.lane, payload))
            self.ids.setdefault(payload, []).append(message.message_id)
            if payload in self.failing:
                self.failing.discard(payload)
                raise RuntimeError("fails once")
            return payload

        @self.tasks.task(priority="urgent")
        async def hurry(payload: Any) -> Any:
            message = trunner.current_message()
            self.ran.append((message.lane, payload))
            self.ids.setdefault(payload, []).append(message.message_id)
            return payload

        @self.tasks.task(priority="urgent", max_retry=0)
        async def doomed(payload: Any) -> None:
            self.ran.append((trunner.current_message().lane, payload))
            raise RuntimeError("always fails")

        @self.tasks.task(priority="urgent")
        async def block(payload: Any) -> None:
            self.blocked += 1
            await self.gate.wait()

    async def count(self, n: int) -> bool:
        await trio.lowlevel.checkpoint()
        return len(self.ran) >= n


def test_lane_streams_and_entry_ids() -> None:
    keys = Keys("trunner", "emails")
    assert keys.lane_stream(DEFAULT_LANE) == keys.stream == "trunner:{emails}:stream"
    assert keys.lane_stream("urgent") == "trunner:{emails}:stream:urgent"
    assert keys.lane_floor("urgent") == "trunner:{emails}:floor:urgent"
    assert keys.lanes == "trunner:{emails}:lanes"
    shared = Keys("trunner", "audit", "events")
    lane_keys = [shared.lane_stream("bulk"), shared.lane_floor("bulk"), shared.lanes]
    assert {hash_tag(k) for k in lane_keys} == {"events"}, "one Cluster slot per queue"
    assert entry_id("5-1", DEFAULT_LANE) == "5-1"
    assert entry_id("5-1", "bulk") == "5-1@bulk"
    assert split_entry_id("5-1@bulk") == ("bulk", "5-1")
    assert split_entry_id("5-1") == (DEFAULT_LANE, "5-1")
    assert lane_suffix("bulk") == "@bulk"
    assert lane_suffix(DEFAULT_LANE) == ""
    for bad in ("", "a b", "x{y}", "é", "a@b", "x" * 33):
        with pytest.raises(ValueError, match="lane name"):
            check_lane(bad)
    with pytest.raises(TypeError, match="lane name"):
        check_lane(3)


def test_lanes_configuration_is_checked() -> None:
    cfg = trunner.RunnerConfig(consumer_group="g", lanes=["urgent", "default", "bulk"])
    assert cfg.lanes == (("urgent", 1), ("default", 1), ("bulk", 1))
    assert trunner.RunnerConfig(consumer_group="g").lanes == (("default", 1),)
    with pytest.raises(ValueError, match="must include 'default'"):
        trunner.RunnerConfig(consumer_group="g", lanes={"urgent": 1})
    with pytest.raises(ValueError, match="weight of lane 'urgent'"):
        trunner.RunnerConfig(consumer_group="g", lanes={"urgent": 0, "default": 1})
    with pytest.raises(TypeError, match="weight of lane 'urgent'"):
        trunner.RunnerConfig(consumer_group="g", lanes={"urgent": 1.5, "default": 1})
    with pytest.raises(TypeError, match="lanes must be"):
        trunner.RunnerConfig(consumer_group="g", lanes="default")
    with pytest.raises(ValueError, match="twice"):
        trunner.RunnerConfig(consumer_group="g", lanes=["default", "default"])
    with pytest.raises(ValueError, match="lane name"):
        trunner.RunnerConfig(consumer_group="g", lanes=["default", "no way"])
    with pytest.raises(TypeError, match="strict_lanes"):
        trunner.RunnerConfig(consumer_group="g", strict_lanes="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="priority"):
        trunner.Task("t", _noop, priority="not a lane")


async def _noop(payload: Any) -> None:
    await trio.lowlevel.checkpoint()


def test_a_message_of_the_default_lane_keeps_its_layout() -> None:
    """Only a message of another lane names it, as its first member (where the scripts
    that put it back into its lane read it)."""
    plain = encode_message("t", 1, enqueued_at=1.0, max_bytes=1000)
    assert plain == b'{"task":"t","payload":1,"attempt":1,"enqueued_at":1.0}'
    laned = encode_message("t", 1, enqueued_at=1.0, max_bytes=1000, lane="bulk")
    assert laned.startswith(b'{"lane":"bulk","task":"t",')


async def test_dispatch_refuses_a_priority_that_is_no_lane_name(url: str, group: str) -> None:
    async with trunner.open_client(url, group) as client:
        with pytest.raises(ValueError, match="priority must be a lane name"):
            await client.dispatch("record", 1, priority="no such lane!")
        with pytest.raises(TypeError, match="priority"):
            await client.dispatch("record", 1, priority=5)  # type: ignore[call-overload]


async def test_strict_lanes_serve_the_upper_lane_first(url: str, group: str, raw: Any) -> None:
    """A backlog in the default lane; an urgent task dispatched after it starts before
    every one of them (one worker, one message per read)."""
    rec = Recorder()
    async with trunner.open_client(url, group, tasks=rec.tasks) as client:
        await client.dispatch_many("record", list(range(30)))
        urgent = await client.dispatch("hurry", "first", keep_result=60)
        later = await client.dispatch("record", "also urgent", priority="urgent")
    assert str(urgent).endswith("@urgent")
    cfg = config(group, lanes=LANES, strict_lanes=True, num_workers=1, batch_size=1)
    async with open_checked_runner(url, cfg, rec.tasks) as runner:
        await redis_state(lambda: rec.count(32))
        assert await runner.handle(str(urgent)).result() == "first"
        stats = runner.statistics()
    assert rec.ran[:2] == [("urgent", "first"), ("urgent", "also urgent")]
    assert [p for _, p in rec.ran[2:]] == list(range(30))
    assert rec.ids["first"] == [str(urgent)]
    assert rec.ids["also urgent"] == [str(later)]
    assert stats.lanes == {"urgent": 2, "default": 30}
    keys = Keys("trunner", group)
    assert raw.smembers(keys.lanes) == {b"urgent"}
    assert raw.xlen(keys.lane_stream("urgent")) == 0, "acknowledged entries are deleted"


async def test_a_weighted_lower_lane_never_starves(url: str, group: str) -> None:
    """One free worker at a time (so each read is one draw by weight). The upper lane
    holds 1000 tasks, nine tenths of the weight: the 20 tasks of the lower lane all run
    while more than 400 upper ones still wait. (Each read takes the lower lane with
    probability 1/10: 19 or fewer of the first 619 reads do with a probability below
    1e-7; in strict order none would run before the 1000.)"""
    rec = await _backlogs(url, group, urgent=1000, default=20, slots=1, run=1020)
    lower = [i for i, (lane, _) in enumerate(rec.ran) if lane == DEFAULT_LANE]
    assert len(lower) == 20
    upper_before_last_lower = lower[-1] - 19
    assert upper_before_last_lower < 600, f"lower lane done after {upper_before_last_lower}"
    assert upper_before_last_lower > 0, "the upper lane is served first most of the time"


async def _backlogs(
    url: str, group: str, *, urgent: int, default: int, slots: int, run: int
) -> Recorder:
    """Backlogs of ``urgent`` and ``default`` tasks, then a runner reading by weight
    (9:1) with ``slots`` workers (a read of at most that many) until ``run`` have started."""
    rec = Recorder()
    async with trunner.open_client(url, group, tasks=rec.tasks) as client:  # declares urgent
        await client.dispatch_many("record", [f"u{i}" for i in range(urgent)], priority="urgent")
        await client.dispatch_many("record", [f"d{i}" for i in range(default)])
    cfg = config(group, lanes=LANES, num_workers=slots, batch_size=slots)
    async with open_checked_runner(url, cfg, rec.tasks):
        await redis_state(lambda: rec.count(run))
    return rec


async def test_a_retry_and_a_delayed_task_go_to_their_lane(url: str, group: str) -> None:
    rec = Recorder()
    rec.failing.add("again")
    cfg = config(group, lanes=LANES, strict_lanes=True)
    async with open_checked_runner(url, cfg, rec.tasks) as runner:
        await runner.dispatch("record", "again", priority="urgent")
        await runner.dispatch_delayed("record", "later", 0.05, priority="urgent")
        await redis_state(lambda: rec.count(3))
        assert runner.statistics().retried == 1
    assert sorted(rec.ran) == [("urgent", "again"), ("urgent", "again"), ("urgent", "later")]
    assert all(i.endswith("@urgent") for i in rec.ids["again"] + rec.ids["later"])
    assert len(set(rec.ids["again"])) == 2, "the retry is a new entry of the same lane"


async def test_a_dead_letter_is_replayed_into_its_lane(url: str, group: str) -> None:
    rec = Recorder()
    cfg = config(group, lanes=LANES)
    async with open_checked_runner(url, cfg, rec.tasks) as runner:
        handle = await runner.dispatch("doomed", "x")
        await redis_state(lambda: _dead(runner, 1))
        (letter,) = await runner.admin.dead_letters()
        assert letter.message_id == str(handle)
        assert letter.payload.startswith(b'{"lane":"urgent",')
        replayed, skipped = await runner.admin.replay_dead_letters([letter.id])
        assert skipped == []
        (new_id,) = replayed
        assert new_id.endswith("@urgent")
        await redis_state(lambda: _dead(runner, 2))
    assert rec.ran == [("urgent", "x"), ("urgent", "x")]


async def _dead(runner: trunner.Runner, n: int) -> bool:
    await trio.lowlevel.checkpoint()
    return runner.statistics().dead_lettered >= n


async def test_a_lane_task_is_found_and_cancelled_by_its_id(url: str, group: str) -> None:
    rec = Recorder()
    async with trunner.open_client(url, group, tasks=rec.tasks) as client:
        await _register(url, group, rec)
        handle = await client.dispatch("hurry", "queued", keep_result=60)
        status = await handle.status()
        assert status.state is trunner.TaskState.QUEUED
        assert await handle.cancel() is trunner.CancelOutcome.REMOVED
        assert (await handle.status()).state is trunner.TaskState.CANCELLED
        assert await client.admin.queue_length() == 0
    async with open_checked_runner(url, config(group, lanes=LANES), rec.tasks) as runner:
        kept = await runner.dispatch("hurry", "kept", keep_result=60)
        assert await kept.result() == "kept"
        assert (await kept.status()).state is trunner.TaskState.SUCCEEDED
    assert rec.ran == [("urgent", "kept")]


async def _register(url: str, group: str, rec: Recorder) -> None:
    """Create the group and its lanes (a runner started once)."""
    async with open_checked_runner(url, config(group, lanes=LANES), rec.tasks):
        pass


async def test_a_released_lane_message_is_run_by_the_next_runner(
    url: str, group: str, raw: Any
) -> None:
    """At shutdown a task that outlives the drain is interrupted and its message handed
    back at once; a message fetched and not started is released: both wait in their
    lane, and the next runner runs them without waiting for a reclaim delay."""
    rec = Recorder()
    cfg = config(group, lanes=LANES, num_workers=1, drain_timeout=0.0, reclaim_delay=3600.0)
    async with trunner.open_runner(url, cfg, rec.tasks) as runner:
        await runner.dispatch("block", "stuck")
        await redis_state(lambda: _blocked(rec))
    keys = Keys("trunner", group)
    pending = raw.xpending(keys.lane_stream("urgent"), group)
    assert pending["pending"] == 1
    assert pending["consumers"][0]["name"] == b"trunner:released"
    rec.gate.set()
    async with open_checked_runner(url, config(group, lanes=LANES), rec.tasks) as again:
        await redis_state(lambda: _acked(again, 1))
        assert again.statistics().reclaimed == 1
    assert rec.blocked == 2


async def _blocked(rec: Recorder) -> bool:
    await trio.lowlevel.checkpoint()
    return rec.blocked >= 1


async def _acked(runner: trunner.Runner, n: int) -> bool:
    await trio.lowlevel.checkpoint()
    return runner.statistics().acked >= n


async def test_an_abandoned_lane_message_is_reclaimed(url: str, group: str, raw: Any) -> None:
    """A message of a lane delivered to a consumer that died is reclaimed after the
    reclaim delay, from its lane."""
    rec = Recorder()
    await _register(url, group, rec)
    keys = Keys("trunner", group)
    async with trunner.open_client(url, group) as client:
        await client.dispatch("record", "orphan", priority="urgent")
    raw.xreadgroup(group, "dead-consumer", {keys.lane_stream("urgent"): ">"}, count=1)
    cfg = config(group, lanes=LANES, reclaim_delay=0.2, reclaim_interval=0.05)
    async with open_checked_runner(url, cfg, rec.tasks) as runner:
        await redis_state(lambda: rec.count(1))
        assert runner.statistics().reclaimed == 1
    assert rec.ran == [("urgent", "orphan")]


async def test_a_unique_lane_task_holds_its_lock_until_it_finishes(url: str, group: str) -> None:
    tasks = trunner.TaskRegistry()
    done = trio.Event()

    @tasks.task(unique=True, unique_for=60, unique_key=lambda p: p, priority="urgent")
    async def once(payload: Any) -> None:
        done.set()

    async with trunner.open_client(url, group, tasks=tasks) as client:
        first = await client.dispatch(once, 1)
        assert str(first).endswith("@urgent")
        with pytest.raises(trunner.TaskAlreadyDispatched):
            await client.dispatch(once, 1)
    async with open_checked_runner(url, config(group, lanes=LANES), tasks) as runner:
        await done.wait()
        await redis_state(lambda: _acked(runner, 1))
        again = await runner.dispatch(once, 1)  # the lock went with the acknowledgement
        assert str(again).endswith("@urgent")


async def test_a_concurrency_waiter_is_granted_into_its_lane(url: str, group: str) -> None:
    tasks = trunner.TaskRegistry()
    started: list[str] = []
    release = trio.Event()

    @tasks.task(priority="urgent", concurrency=1)
    async def one_at_a_time(payload: Any) -> None:
        started.append(trunner.current_message().message_id)
        await release.wait()

    async with open_checked_runner(url, config(group, lanes=LANES), tasks) as runner:
        await runner.dispatch_many(one_at_a_time, [1, 2])
        await redis_state(lambda: _deferred(runner))
        assert len(started) == 1
        release.set()
        await redis_state(lambda: _acked(runner, 2))
    assert len(started) == 2
    assert all(i.endswith("@urgent") for i in started), started


async def _deferred(runner: trunner.Runner) -> bool:
    await trio.lowlevel.checkpoint()
    return runner.statistics().deferred_concurrency >= 1


async def test_lanes_are_counted_in_inspect_and_the_queue_length(url: str, group: str) -> None:
    rec = Recorder()
    await _register(url, group, rec)
    async with trunner.open_client(url, group) as client:
        await client.dispatch_many("record", [1, 2, 3], priority="urgent")
        await client.dispatch("record", 4)
        assert await client.admin.lane_lengths() == {"default": 1, "urgent": 3}
        assert await client.admin.queue_length() == 4
        info = await client.admin.inspect()
        assert info.lanes == {"default": 1, "urgent": 3}
        assert info.queue_length == 4
        as_json = json.loads(json.dumps(trunner.admin.as_dict(info)))
        assert as_json["lanes"] == {"default": 1, "urgent": 3}


async def test_the_test_kit_waits_for_every_lane(url: str, group: str) -> None:
    rec = Recorder()
    async with trunner.testing.open_runner_factory(url, group) as runners:
        runner = await runners(rec.tasks, config(group, lanes=LANES))
        await runner.dispatch("hurry", 1)
        await runner.dispatch("record", 2)
        await trunner.testing.run_until_idle(runner)
        assert sorted(p for _, p in rec.ran) == [1, 2]
        assert parts(runner).holdings.running == {}


async def test_a_cron_tick_enters_its_tasks_lane(url: str, group: str) -> None:
    tasks = trunner.TaskRegistry()
    ticks: list[tuple[str, str]] = []
    ticked = trio.Event()

    @tasks.task(priority="urgent")
    async def beat(payload: Any) -> None:
        message = trunner.current_message()
        ticks.append((message.lane, message.message_id))
        ticked.set()

    tasks.cron("* * * * * *", "beat", "tick")  # every second (six fields: seconds last)

    cfg = config(group, lanes=LANES, leader_ttl=0.5, leader_wait=0.6)
    async with open_checked_runner(url, cfg, tasks):
        await ticked.wait()
    lane, message_id = ticks[0]
    assert lane == "urgent"
    assert message_id.endswith("@urgent")


def test_a_config_with_lanes_evolves() -> None:
    """attrs.evolve gives the converted lanes back to the converter."""
    import attrs  # noqa: PLC0415

    cfg = trunner.RunnerConfig(consumer_group="g", lanes={"urgent": 3, "default": 1})
    assert attrs.evolve(cfg, num_workers=5).lanes == (("urgent", 3), ("default", 1))


def test_a_read_asks_each_lane_for_its_share_and_the_last_for_the_rest() -> None:
    weights = [9, 1]  # urgent, default
    assert lane_plan([0, 1], weights, 100, strict=False) == [(0, 90), (1, 100)]
    assert lane_plan([1, 0], weights, 100, strict=False) == [(1, 10), (0, 100)]
    # Each lane is looked at on every read with as many slots as lanes (shares round up).
    assert lane_plan([0, 1], weights, 2, strict=False) == [(0, 2), (1, 2)]
    assert lane_plan([1, 0], weights, 2, strict=False) == [(1, 1), (0, 2)]
    # One slot: the lane drawn first gets it (by weight), the next one what is left.
    assert lane_plan([1, 0], weights, 1, strict=False) == [(1, 1), (0, 1)]
    assert lane_plan([0, 1, 2], [1, 1, 1], 10, strict=False) == [(0, 4), (1, 4), (2, 10)]
    assert lane_plan([0, 1, 2], [5, 3, 1], 10, strict=True) == [(0, 10), (1, 10), (2, 10)]


async def test_by_weight_each_lane_gets_its_share_of_a_double_backlog(url: str, group: str) -> None:
    """Both lanes saturated, reads of 10 with weights 9:1: the first 200 tasks started are
    about nine tenths upper-lane ones (each read asks the lower lane for its share, 1)."""
    rec = await _backlogs(url, group, urgent=300, default=300, slots=10, run=200)
    lower = sum(1 for lane, _ in rec.ran[:200] if lane == DEFAULT_LANE)
    assert 10 <= lower <= 40, lower


def test_a_read_beyond_the_free_slots_keeps_the_upper_lanes_entries() -> None:
    """A blocking read names every lane, and Redis counts per stream: what it returns
    beyond the reserved slots is handed back, the lowest lanes' first (in the order each
    lane gave them)."""
    entries = [
        RawEntry("1-0", None),
        RawEntry("1-0@urgent", None),
        RawEntry("2-0", None),
        RawEntry("2-0@urgent", None),
        RawEntry("1-0@bulk", None),
    ]
    rank = {"urgent": 0, DEFAULT_LANE: 1, "bulk": 2}
    kept, excess = split_excess(entries, 3, rank)
    assert [e.message_id for e in kept] == ["1-0@urgent", "2-0@urgent", "1-0"]
    assert [e.message_id for e in excess] == ["2-0", "1-0@bulk"]
    kept, excess = split_excess(entries, 5, rank)
    assert len(kept) == 5
    assert excess == []


# -- what the review of lanes found ------------------------------------------------------

FAST = {"report_interval": 0.1, "instance_ttl": 0.3, "janitor_interval": 0.1}


async def _rounds(count: Any, n: int) -> bool:
    await trio.lowlevel.checkpoint()
    return bool(count() >= n)


async def test_a_lane_where_map_entry_is_no_bad_data(url: str, group: str) -> None:
    """A delayed task moved into a lane has the where-map entry '<id>@urgent': trunner's,
    not bad data, whatever the janitor's rounds."""
    rec = Recorder()
    rec.gate = trio.Event()
    cfg = config(group, lanes=LANES, **FAST)
    async with open_checked_runner(url, cfg, rec.tasks) as runner:
        await runner.dispatch_delayed("block", 1, 0.01)
        await redis_state(lambda: _blocked(rec))
        janitor = parts(runner).janitor
        await janitor.wait_rounds(janitor.rounds + 3)
        assert await runner.admin.quarantined() == []
        status = await runner.handle(_only_task_id(rec, runner)).status()
        assert status.state is trunner.TaskState.RUNNING
        rec.gate.set()


def _only_task_id(rec: Recorder, runner: trunner.Runner) -> str:
    (job,) = parts(runner).holdings.running.values()
    assert job.message_id.endswith("@urgent")
    return job.message.task_id


async def test_a_lane_of_another_runner_holding_another_type_stops_no_chore(
    url: str, group: str, raw: Any
) -> None:
    """Something else wrote a string at the stream of a lane the registry names (another
    runner's), and a where-map value names an entry of it: the statistics, inspect and the
    janitor go on (that lane counts 0, the entry is kept); the key is left to the runners
    that read the lane (they set it aside)."""
    keys = Keys("trunner", group)
    raw.sadd(keys.lanes, "ghost")
    raw.set(keys.lane_stream("ghost"), "not a stream")
    raw.hset(keys.where, "some-task", "1-1@ghost")
    cfg = config(group, stats_interval=0.05, **FAST)
    async with open_checked_runner(url, cfg, trunner.TaskRegistry()) as runner:
        aggregator, janitor = parts(runner).aggregator, parts(runner).janitor
        await redis_state(lambda: _rounds(lambda: aggregator.rounds, 2))
        await janitor.wait_rounds(janitor.rounds + 2)
        assert (await runner.admin.inspect()).lanes["default"] == 0
        assert await runner.admin.queue_length() == 0
    assert raw.hget(keys.where, "some-task") == b"1-1@ghost", "kept"


async def test_a_message_naming_a_lane_whose_stream_is_bad_runs_in_the_default_lane(
    url: str, group: str, raw: Any
) -> None:
    """A due delayed task and a concurrency waiter naming a lane whose stream holds a
    string (a lane no runner here reads, so nobody set it aside): each is moved into the
    default lane and runs; the mover goes on with the others."""
    tasks = trunner.TaskRegistry()
    ran: list[tuple[str, Any]] = []

    @tasks.task(concurrency=1)
    async def lim(payload: Any) -> None:
        ran.append((trunner.current_message().lane, payload))

    keys = Keys("trunner", group)
    raw.sadd(keys.lanes, "bulk")  # as a runner reading bulk registered it
    async with trunner.open_client(url, group) as client:
        await client.dispatch_delayed("lim", "bulk", 0, priority="bulk")
    waiter = encode_message(
        "lim", "waiter", enqueued_at=1.0, task_id="w1", lane="bulk", max_bytes=10_000
    )
    raw.rpush(keys.concurrency_waiting("3:lim"), waiter)  # as a runner reading bulk left it
    raw.set(keys.lane_stream("bulk"), "not a stream")
    async with open_checked_runner(url, config(group, **FAST), tasks) as runner:
        await runner.dispatch_delayed(lim, "plain", 0.05)
        await runner.dispatch(lim, "first")
        await redis_state(lambda: _ran(ran, 4))
    assert sorted(p for _, p in ran) == ["bulk", "first", "plain", "waiter"]
    assert {lane for lane, _ in ran} == {DEFAULT_LANE}
    assert raw.get(keys.lane_stream("bulk")) == b"not a stream", "left as it was"


async def _ran(ran: list[Any], n: int) -> bool:
    await trio.lowlevel.checkpoint()
    return len(ran) >= n


async def test_a_group_that_does_not_read_a_lane_yet_loses_nothing_of_it(
    url: str, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fan-out: group a reads {urgent, default}, group b only the default lane. a's
    leader trims nothing of the urgent lane while b has no consumer group on it: when b
    reads the lane, it runs what was dispatched there."""
    monkeypatch.setattr("trunner._leader.janitor.SHARED_TRIM_INTERVAL", 0.05)
    queue = f"q-{uuid.uuid4().hex[:8]}"
    seen: dict[str, list[Any]] = {"a": [], "b": []}

    def registry(name: str) -> trunner.TaskRegistry:
        reg = trunner.TaskRegistry()

        @reg.task(name="work")
        async def work(payload: Any) -> None:
            seen[name].append(payload)

        return reg

    ga, gb = f"a-{queue}", f"b-{queue}"
    keys = Keys("trunner", ga, queue)
    async with (
        open_checked_runner(url, config(ga, queue=queue, lanes=LANES), registry("a")) as a,
        open_checked_runner(url, config(gb, queue=queue), registry("b")),
    ):
        await a.dispatch("work", "both", priority="urgent")
        await a.dispatch("work", "plain")
        await redis_state(lambda: _ran(seen["a"], 2))
        await redis_state(lambda: _ran(seen["b"], 1))
        janitor = parts(a).janitor
        await redis_state(lambda: _rounds(lambda: janitor.shared_passes, 3))
        assert raw.xlen(keys.lane_stream("urgent")) == 1, "b has not read it"
    async with open_checked_runner(url, config(gb, queue=queue, lanes=LANES), registry("b")):
        await redis_state(lambda: _ran(seen["b"], 2))
    assert sorted(seen["b"]) == ["both", "plain"]
    assert sorted(seen["a"]) == ["both", "plain"]


def test_a_messages_lane_is_its_streams_on_both_decode_paths() -> None:
    """The fast path and the checked one (a message for one group takes it) agree: the
    lane is the stream's, which the id names; a body naming no lane name is undecodable."""
    laned = b'{"lane":"urgent","task":"t","payload":1}'
    grouped = b'{"lane":"urgent","task":"t","payload":1,"group":"g"}'
    for raw in (laned, grouped):
        assert decode_message("5-0@urgent", [b"payload", raw]).lane == "urgent"
        assert decode_message("5-0", [b"payload", raw]).lane == DEFAULT_LANE
    for bad in (b'{"lane":5,"task":"t","payload":1}', b'{"lane":"a b","task":"t","payload":1}'):
        with pytest.raises(trunner.errors.InvalidMessage, match="'lane'"):
            decode_message("5-0", [b"payload", bad])
        assert decode_fields("5-0", [b"payload", bad], 1, None) is None


async def test_eager_calls_see_the_tasks_lane() -> None:
    rec = Recorder()
    assert await rec.tasks.call("hurry", "now") == "now"
    assert rec.ran == [("urgent", "now")]


async def test_the_clean_shutdown_check_sees_a_message_left_in_a_lane(
    url: str, group: str, raw: Any
) -> None:
    keys = Keys("trunner", group)
    with pytest.raises(trunner.testing.ShutdownLeak, match="@urgent"):
        async with trunner.testing.assert_clean_shutdown(threads=False):
            async with trunner.open_runner(
                url, config(group, lanes=LANES), trunner.TaskRegistry()
            ) as runner:
                pass
            async with trunner.open_client(url, group) as client:
                await client.dispatch("t", 1, priority="urgent")
            # a fetch the runner never released, as a leak would leave it
            raw.xreadgroup(group, runner.consumers[0], {keys.lane_stream("urgent"): ">"}, count=1)


async def test_replaying_by_a_lane_task_id_names_its_dead_letter(url: str, group: str) -> None:
    rec = Recorder()
    async with open_checked_runner(url, config(group, lanes=LANES), rec.tasks) as runner:
        handle = await runner.dispatch("doomed", 1)
        await redis_state(lambda: _dead(runner, 1))
        (letter,) = await runner.admin.dead_letters()
        result = await runner.admin.replay_dead_letters([str(handle)])
    assert result.replayed == []
    assert letter.id in result.skipped[str(handle)]
    assert "task id" in result.skipped[str(handle)]


async def test_a_dead_letter_of_the_dispatchs_millisecond_is_found_by_its_task_id(
    url: str, group: str, raw: Any
) -> None:
    """A task dead-lettered in the millisecond it was dispatched: its dead letter's id
    is its message's (each stream counts from ``<ms>-0``), and is found all the same."""
    keys = Keys("trunner", group)
    task_id = "1796454220110-0@urgent"
    raw.xadd(keys.dead, {"task": "doomed", "task_id": task_id}, id="1796454220110-0")
    async with trunner.open_client(url, group) as client:
        result = await client.admin.replay_dead_letters([task_id])
    assert result.replayed == []
    assert "the dead letter of that task is 1796454220110-0" in result.skipped[task_id]


async def test_lanes_in_the_prometheus_and_opentelemetry_metrics(url: str, group: str) -> None:
    """What each lane gave (a counter), and each lane's length (refreshed at each scrape
    of the worker's /metrics)."""
    from trunner._worker.serve import _metrics_handler  # noqa: PLC0415
    from trunner.otel import instrument_runner  # noqa: PLC0415

    from ..support.otel import metering, metric_points  # noqa: PLC0415

    rec = Recorder()
    meters, reader = metering()
    async with open_checked_runner(url, config(group, lanes=LANES), rec.tasks) as runner:
        instrument_runner(runner, meters)
        await runner.dispatch_many("record", [1, 2], priority="urgent")
        await runner.dispatch("record", 3)
        await redis_state(lambda: _acked(runner, 3))  # acknowledged: deleted
        status, _, body = await _metrics_handler(runner)()
        text = body.decode()
        assert status == 200
        assert f'trunner_lane_fetched_total{{group="{group}",lane="urgent"}} 2.0' in text
        assert f'trunner_lane_fetched_total{{group="{group}",lane="default"}} 1.0' in text
        assert f'trunner_lane_length{{group="{group}",lane="urgent"}} 0.0' in text
        points = {
            p.attributes["messaging.trunner.lane"]: p.value
            for p in metric_points(reader, "trunner.lane.fetched")
        }
        assert points == {"urgent": 2, "default": 1}


async def test_a_lane_read_whose_reply_is_lost_loses_nothing(
    url: str, group: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read of the lanes gets the urgent entry, then the default lane's reply is lost
    (its entries delivered to the consumer, unseen). What was read runs; the lost
    deliveries are released and run too, each once."""
    rec = Recorder()
    await _register(url, group, rec)
    real = Broker.read_lane
    lost: list[str] = []

    async def losing(self: Broker, consumer: str, lane: str, count: int) -> list[RawEntry]:
        got = await real(self, consumer, lane, count)
        if not lost and lane == DEFAULT_LANE and got:
            lost.extend(e.message_id for e in got)
            raise RedisUnavailable("injected: the reply of this read was lost")
        return got

    monkeypatch.setattr(Broker, "read_lane", losing)
    async with trunner.open_client(url, group) as client:
        await client.dispatch_many("record", list(range(5)))
        urgent = await client.dispatch("record", "urgent", priority="urgent")
    cfg = config(group, lanes=LANES, strict_lanes=True, reclaim_interval=0.05)
    async with open_checked_runner(url, cfg, rec.tasks) as runner:
        with capture_errors(runner) as errors:
            await redis_state(lambda: rec.count(6))
            await redis_state(lambda: _acked(runner, 6))
            errors.expect(RedisUnavailable)
        stats = runner.statistics()
    assert len(lost) == 5
    assert rec.ran[0] == ("urgent", "urgent")
    assert rec.ids["urgent"] == [str(urgent)]
    assert sorted(map(str, (p for _, p in rec.ran))) == ["0", "1", "2", "3", "4", "urgent"]
    assert stats.released == 5


async def test_the_process_span_names_the_lane(url: str, group: str) -> None:
    from trunner.otel import OpenTelemetryMiddleware  # noqa: PLC0415

    from ..support.otel import tracing  # noqa: PLC0415

    provider, spans = tracing()
    rec = Recorder()
    cfg = config(group, lanes=LANES, middleware=[OpenTelemetryMiddleware(provider)])
    async with open_checked_runner(url, cfg, rec.tasks) as runner:
        await runner.dispatch("record", 1, priority="urgent")
        await runner.dispatch("record", 2)
        ended = await spans.wait(2, "process record")
    lanes = sorted(str((span.attributes or {}).get("messaging.trunner.lane")) for span in ended)
    assert lanes == ["None", "urgent"]


async def test_a_lane_a_client_dispatched_to_is_counted_before_any_runner_reads_it(
    url: str, group: str, raw: Any
) -> None:
    """A lane the client's tasks declare is named in the queue's registry of lanes at its
    first dispatch (before any runner reads it); a misspelt one is refused and not named."""
    rec = Recorder()

    @rec.tasks.task(priority="bulk")
    async def newsletter(payload: Any) -> None:
        await trio.lowlevel.checkpoint()

    keys = Keys("trunner", group)
    async with trunner.open_client(url, group, tasks=rec.tasks) as client:
        with pytest.raises(trunner.InvalidPayload):
            await client.dispatch("record", {1, 2}, priority="urgent")
        assert raw.smembers(keys.lanes) == set(), "nothing written"
        with pytest.raises(ValueError, match="'urgnet' is not a declared lane"):
            await client.dispatch_many("record", [1, 2], priority="urgnet")  # misspelt
        assert raw.smembers(keys.lanes) == set(), "a refused lane is not named"
        assert not raw.exists(keys.lane_stream("urgnet"))
        await client.dispatch_many("record", [1, 2], priority="urgent")  # hurry's lane
        await client.dispatch_delayed(newsletter, 3, 60)
        await client.dispatch("record", 4)
        assert await client.admin.lane_lengths() == {"default": 1, "bulk": 0, "urgent": 2}
        assert (await client.admin.inspect()).lanes == {"default": 1, "bulk": 0, "urgent": 2}


async def test_a_client_without_tasks_takes_the_lanes_runners_registered(
    url: str, group: str, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client opened without ``tasks=`` knows the lanes the queue's runners registered:
    it reads that registry once for a lane it does not know yet (again while the lane is
    unknown, so a lane registered since is taken), and never again for a known one."""
    reads: list[str] = []
    real = Broker.known_lanes

    async def counted(self: Broker) -> list[str]:
        reads.append(self.group)
        return await real(self)

    monkeypatch.setattr(Broker, "known_lanes", counted)
    keys = Keys("trunner", group)
    rec = Recorder()
    hooked = Hooked()
    async with trunner.open_client(url, group, middleware=[hooked]) as client:
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: client.dispatch("record", 1, priority="urgent"),
            lambda: client.dispatch_many("record", [1], priority="urgent"),
            lambda: client.dispatch_delayed("record", 1, 0, priority="urgent"),
            lambda: client.schedule_for("record", 1, _now(), priority="urgent"),
        ]
        for call in calls:
            with pytest.raises(ValueError, match="no runner of the queue registered it") as e:
                await call()
        assert "'urgent' is not a declared lane of queue" in str(e.value)
        assert "the known lanes are 'default'." in str(e.value)
        assert "RunnerConfig.lanes" in str(e.value)
        assert "@tasks.task(priority='urgent')" in str(e.value)
        assert raw.smembers(keys.lanes) == set()
        assert not raw.exists(keys.lane_stream("urgent"))
        assert not raw.exists(keys.delayed)
        assert hooked.seen == [], "refused before the dispatch hooks run"
        await _register(url, group, rec)  # a runner reading urgent starts: it registers it
        reads.clear()
        first = await client.dispatch("record", 1, priority="urgent")
        await client.dispatch_many("record", [2, 3], priority="urgent")
        await client.dispatch("record", 4, priority="default")
        assert reads == [group], "one read, on the first use of the lane"
        assert str(first).endswith("@urgent")
        assert await client.admin.lane_lengths() == {"default": 1, "urgent": 3}
        with pytest.raises(ValueError, match="known lanes are 'default', 'urgent'"):
            await client.dispatch("record", 5, priority="urgnet")
    assert raw.smembers(keys.lanes) == {b"urgent"}


async def test_a_client_without_tasks_dispatches_a_task_to_its_own_lane(
    url: str, group: str, raw: Any
) -> None:
    """Given the task itself (its function or ``Task``), a client without ``tasks=`` knows
    the lane the task declares."""
    hurry = Recorder().tasks.get("hurry")
    async with trunner.open_client(url, group) as client:
        handle = await client.dispatch(hurry, 1)
        with pytest.raises(ValueError, match="'bulk' is not a declared lane"):
            await client.dispatch(hurry, 2, priority="bulk")
    assert str(handle).endswith("@urgent")
    assert raw.smembers(Keys("trunner", group).lanes) == {b"urgent"}


class Hooked(trunner.Middleware):
    """Notes the task of each dispatch its hook sees."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_dispatch(self, dispatch: trunner.middleware.DispatchInfo) -> None:
        self.seen.append(dispatch.task_name)


def _now() -> Any:
    import datetime  # noqa: PLC0415

    return datetime.datetime.now(datetime.UTC)


async def test_a_runner_that_declares_lanes_dispatches_to_those_and_its_tasks(
    url: str, group: str, raw: Any
) -> None:
    """A runner whose RunnerConfig declares lanes dispatches to them and to its tasks'
    lanes only, whatever other runners registered; at its start it names its tasks'
    lanes in the queue's registry too (their cron ticks and dispatches go there)."""
    rec = Recorder()

    @rec.tasks.task(priority="slow")
    async def later(payload: Any) -> None:
        await trio.lowlevel.checkpoint()

    keys = Keys("trunner", group)
    raw.sadd(keys.lanes, "bulk")  # another group's runner reads it
    async with open_checked_runner(url, config(group, lanes=LANES), rec.tasks) as runner:
        assert raw.smembers(keys.lanes) == {b"bulk", b"urgent", b"slow"}
        with pytest.raises(ValueError, match=r"RunnerConfig\.lanes nor its tasks'") as e:
            await runner.dispatch("record", 1, priority="bulk")
        assert "the known lanes are 'default', 'slow', 'urgent'" in str(e.value)
        with pytest.raises(ValueError, match="'urgnet' is not a declared lane"):
            await runner.dispatch_delayed("record", 1, 0, priority="urgnet")
        await runner.dispatch("record", "u", priority="urgent")
        await runner.dispatch("record", "s", priority="slow")  # the lane of a task of it
        await redis_state(lambda: _acked(runner, 1))
        assert await runner.admin.lane_lengths() == {
            "urgent": 0,
            "default": 0,
            "bulk": 0,
            "slow": 1,
        }
    assert rec.ran == [("urgent", "u")]
    assert not raw.exists(keys.lane_stream("urgnet"))
    assert not raw.exists(keys.lane_stream("bulk"))


async def test_a_misspelt_lane_is_refused_with_the_closest_known_one(url: str, group: str) -> None:
    """A lane refused as undeclared names the known lane it is closest to, as an unknown
    task name does; one close to none names none."""
    rec = Recorder()
    async with open_checked_runner(url, config(group, lanes=LANES), rec.tasks) as runner:
        with pytest.raises(ValueError, match="not a declared lane") as e:
            await runner.dispatch("record", 1, priority="urgnet")
        assert "did you mean 'urgent'?" in str(e.value)
        with pytest.raises(ValueError, match="not a declared lane") as e:
            await runner.dispatch("record", 1, priority="zzz")
        assert "did you mean" not in str(e.value)
    async with trunner.open_client(url, group) as client:  # knows the runner's lanes
        with pytest.raises(ValueError, match="not a declared lane") as e:
            await client.dispatch("record", 1, priority="urgnet")
        assert "did you mean 'urgent'?" in str(e.value)


async def test_a_runner_of_the_default_lane_takes_the_registered_lanes(
    url: str, group: str, raw: Any
) -> None:
    """A runner that declares no lanes dispatches, as a client, to the lanes of its tasks
    and those the queue's registry names."""
    keys = Keys("trunner", group)
    tasks = trunner.TaskRegistry()

    @tasks.task()
    async def record(payload: Any) -> None:
        await trio.lowlevel.checkpoint()

    async with open_checked_runner(url, config(group), tasks) as runner:
        with pytest.raises(ValueError, match="'urgent' is not a declared lane"):
            await runner.dispatch(record, 1, priority="urgent")
        raw.sadd(keys.lanes, "urgent")  # a runner reading urgent started
        handle = await runner.dispatch(record, 1, priority="urgent")
    assert str(handle).endswith("@urgent")
    assert raw.xlen(keys.lane_stream("urgent")) == 1


def test_the_cron_decorator_and_list_pairs_take_lanes() -> None:
    tasks = trunner.TaskRegistry()

    @tasks.cron("* * * * *", priority="urgent")
    async def tick(payload: Any) -> None:
        await trio.lowlevel.checkpoint()

    assert tasks.get("tick").priority == "urgent"
    cfg = trunner.RunnerConfig(consumer_group="g", lanes=[["urgent", 5], "default"])
    assert cfg.lanes == (("urgent", 5), ("default", 1))
    with pytest.raises(ValueError, match="task 'x': priority must be a lane name"):
        trunner.Task("x", _noop, priority="not one")


async def test_the_leader_warns_once_of_a_lane_no_live_runner_reads(
    url: str, group: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A task's lane no runner of the group reads holds messages: the leader's aggregator
    notes it and warns once (not at every round); inspect shows it. A runner that reads
    the lane starts and runs them: the note goes. It comes back, with a second warning,
    when the lane holds messages again once that runner has left."""
    caplog.set_level(logging.INFO, logger="trunner")
    rec = Recorder()

    @rec.tasks.task(priority="bulk")
    async def newsletter(payload: Any) -> None:
        rec.ran.append((trunner.current_message().lane, payload))

    def warnings() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelno == logging.WARNING and "no live runner" in r.getMessage()
        ]

    async with trunner.testing.open_runner_factory(url, group) as runners:
        runner = await runners(rec.tasks, config(group, lanes=LANES, stats_interval=0.05))
        aggregator = parts(runner).aggregator
        await runner.dispatch_many(newsletter, [1, 2])  # its task declares the lane
        await redis_state(lambda: _rounds(lambda: aggregator.unread_warnings, 1))
        rounds = aggregator.rounds
        await redis_state(lambda: _rounds(lambda: aggregator.rounds, rounds + 3))
        assert aggregator.unread_lanes == {"bulk": 2}
        assert aggregator.unread_warnings == 1, "once, not at every round"
        [warning] = warnings()
        assert f"lane 'bulk' of queue '{group}' holds 2 message(s)" in warning
        assert "they read default, urgent" in warning
        assert "RunnerConfig.lanes" in warning
        info = await runner.admin.inspect()
        assert info.unread_lanes == {"bulk": 2}
        assert [i.lanes for i in info.instances] == [("urgent", "default")]

        reader_config = config(group, lanes={"bulk": 1, "default": 1}, stats_interval=0.05)
        reader = await runners(rec.tasks, reader_config)
        await redis_state(lambda: rec.count(2))
        await redis_state(lambda: _read_again(aggregator))
        assert (await runner.admin.inspect()).unread_lanes == {}
        assert aggregator.unread_warnings == 1
        noted = [r.getMessage() for r in caplog.records if "read again" in r.getMessage()]
        assert noted == [f"lane 'bulk' of queue '{group}' is read again, or empty"]
        await runners.close(reader)

        await runner.dispatch(newsletter, 3)
        await redis_state(lambda: _rounds(lambda: aggregator.unread_warnings, 2))
        assert aggregator.unread_lanes == {"bulk": 1}
        assert len(warnings()) == 2
    assert sorted(p for _, p in rec.ran) == [1, 2]


async def _read_again(aggregator: Any) -> bool:
    await trio.lowlevel.checkpoint()
    return not aggregator.unread_lanes


def test_inspect_marks_a_lane_no_live_runner_reads() -> None:
    from rich.console import Console  # noqa: PLC0415

    from trunner.cli._group import _summary  # noqa: PLC0415

    info = trunner.admin.GroupInfo(
        group="g",
        queue_length=5,
        pending={},
        delayed=0,
        dead_letters=0,
        instances=[],
        leader=None,
        capacity={},
        stats=None,
        lanes={"default": 3, "urgnet": 2},
        unread_lanes={"urgnet": 2},
    )
    console = Console(record=True, width=200)
    console.print(_summary(info))
    assert "default 3, urgnet 2 (no live runner reads it)" in console.export_text()
