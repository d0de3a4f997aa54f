"""End to end: dispatch, fetch, execute, acknowledge, on both tiers (runner.py and the
components it wires)."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest
import redis
import trio

import trunner
from trunner._lifecycle.shutdown import Stoppable
from trunner.keys import Keys
from trunner.testing import run_until_idle

from ..conftest import Tally, config, open_checked_runner, parts
from ..support.servers import RedisServer


def registry(tally: Tally, delay: float = 0.0) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def record(payload: Any) -> None:
        if delay:
            await trio.sleep(delay)
        tally.record(payload)

    return tasks


async def test_every_dispatched_task_runs_and_is_acknowledged(
    url: str, group: str, keys: Keys, tally: Tally, raw: Any
) -> None:
    tasks = registry(tally)
    async with open_checked_runner(url, config(group), tasks) as runner:
        assert runner.state is trunner.RunnerState.STARTED
        one = [await runner.dispatch("record", {"n": i}) for i in range(20)]
        many = await runner.dispatch_many("record", [{"n": i} for i in range(20, 120)])
        assert len(set(one + many)) == 120
        await tally.wait(120)

        await run_until_idle(runner)
        stats = runner.statistics()
    assert sorted(p["n"] for p in tally.payloads) == list(range(120))
    assert {attempt for _, attempt, _ in tally.runs} == {1}
    assert stats.succeeded == stats.acked == stats.processed == 120
    assert stats.failed == stats.dead_lettered == stats.retried == 0
    assert runner.statistics().state is trunner.RunnerState.STOPPED
    stream = keys.stream
    assert raw.xlen(stream) == 0
    assert raw.xpending(stream, group)["pending"] == 0


async def test_dispatch_returns_the_stream_entry_id_and_task_id(
    url: str, group: str, tally: Tally
) -> None:
    async with open_checked_runner(url, config(group), registry(tally)) as runner:
        message_id = await runner.dispatch("record", "hello")
        await tally.wait(1)
    payload, attempt, seen_id = tally.runs[0]
    assert (payload, attempt, seen_id) == ("hello", 1, message_id)


async def test_without_delete_on_ack_entries_stay_in_the_stream(
    url: str, group: str, keys: Keys, tally: Tally, raw: Any
) -> None:
    cfg = config(group, delete_on_ack=False)
    async with open_checked_runner(url, cfg, registry(tally)) as runner:
        await runner.dispatch_many("record", list(range(10)))
        await tally.wait(10)

        await run_until_idle(runner)
    assert raw.xlen(keys.stream) == 10


async def test_runners_in_one_process_share_the_work(url: str, group: str, tally: Tally) -> None:
    tasks = registry(tally, delay=0.002)
    async with (
        open_checked_runner(url, config(group), tasks) as a,
        open_checked_runner(url, config(group), tasks) as b,
        open_checked_runner(url, config(group), tasks) as c,
    ):
        assert len({a.consumer_name, b.consumer_name, c.consumer_name}) == 3
        await a.dispatch_many("record", list(range(300)))
        await tally.wait(300)
        per_runner = [r.statistics().succeeded for r in (a, b, c)]
    assert Counter(tally.payloads) == Counter(range(300)), "each task runs exactly once"
    assert sum(per_runner) == 300
    assert sum(1 for n in per_runner if n > 0) >= 2, per_runner


async def test_num_workers_bounds_running_tasks(url: str, group: str) -> None:
    running = 0
    peak = 0
    done = 0
    all_done = trio.Event()
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def work(_: Any) -> None:
        nonlocal running, peak, done
        running += 1
        peak = max(peak, running)
        await trio.sleep(0.02)
        running -= 1
        done += 1
        if done == 60:
            all_done.set()

    cfg = config(group, num_workers=4, batch_size=10)
    async with open_checked_runner(url, cfg, tasks) as runner:
        await runner.dispatch_many("work", range(60))
        await all_done.wait()
        stats = runner.statistics()
    assert peak == 4
    assert stats.max_in_flight == 4
    assert stats.capacity == 4


async def test_fetchers_never_take_more_than_free_slots(url: str, group: str, raw: Any) -> None:
    """With every worker busy, the rest of the queue stays undelivered in the stream."""
    release = trio.Event()
    started = 0
    both_started = trio.Event()
    all_done = trio.Event()
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def hold(_: Any) -> None:
        nonlocal started
        started += 1
        if started == 2:
            both_started.set()
        await release.wait()
        if started == 30:
            all_done.set()

    cfg = config(group, num_workers=2, batch_size=50, num_fetchers=2)
    async with open_checked_runner(url, cfg, tasks) as runner:
        await runner.dispatch_many("hold", range(30))
        await both_started.wait()
        # Give the fetchers every chance to over-fetch, then look at the PEL.
        for _ in range(20):
            await trio.sleep(0.01)
            assert await runner.admin.pending_count() == 2
        assert runner.statistics().fetched == 2
        release.set()
        await all_done.wait()
    assert runner.statistics().succeeded == 30


async def test_producer_only_client_dispatches(url: str, group: str, tally: Tally) -> None:
    async with trunner.open_client(url, group) as client:
        ids = await client.dispatch_many("record", ["a", "b"])
        ids.append(await client.dispatch("record", "c"))
        assert await client.admin.queue_length() == 3
    async with open_checked_runner(url, config(group), registry(tally)):
        await tally.wait(3)
    assert sorted(tally.payloads) == ["a", "b", "c"]
    assert sorted(mid for _, _, mid in tally.runs) == sorted(ids)


async def test_client_with_registry_checks_task_names(url: str, group: str, tally: Tally) -> None:
    async with trunner.open_client(url, group, tasks=registry(tally)) as client:
        with pytest.raises(trunner.TaskNotFound):
            await client.dispatch("nope", 1)
        assert await client.admin.queue_length() == 0


@pytest.mark.parametrize(
    ("task_name", "payload", "error"),
    [
        ("nope", 1, trunner.TaskNotFound),
        ("", 1, ValueError),
        (b"record", 1, TypeError),
        ("record", {1, 2}, trunner.InvalidPayload),
        ("record", float("nan"), trunner.InvalidPayload),
        ("record", object(), trunner.InvalidPayload),
        ("record", "x" * 3000, trunner.PayloadTooLarge),
    ],
)
async def test_bad_dispatch_raises_and_writes_nothing(
    url: str, group: str, tally: Tally, task_name: Any, payload: Any, error: type[Exception]
) -> None:
    cfg = config(group, max_payload_bytes=2048)
    async with open_checked_runner(url, cfg, registry(tally)) as runner:
        with pytest.raises(error):
            await runner.dispatch(task_name, payload)
        with pytest.raises(error):
            await runner.dispatch_many(task_name, [1, 2, payload])
        assert await runner.admin.queue_length() == 0
    assert tally.runs == []


async def test_dispatch_outside_the_block_raises(url: str, group: str, tally: Tally) -> None:
    runner = trunner.Runner(url, config(group), registry(tally))
    with pytest.raises(trunner.errors.RunnerNotRunning):
        await runner.dispatch("record", 1)
    async with open_checked_runner(url, config(group), registry(tally)) as runner:
        pass
    with pytest.raises(trunner.errors.RunnerNotRunning):
        await runner.dispatch("record", 1)


async def test_a_runner_runs_once(url: str, group: str, tally: Tally) -> None:
    runner = trunner.Runner(url, config(group), registry(tally))
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        assert runner.state is trunner.RunnerState.STARTED
        with pytest.raises(trunner.errors.RunnerAlreadyStarted):
            await runner.run()
        runner.stop()
    assert runner.statistics().state is trunner.RunnerState.STOPPED
    with pytest.raises(trunner.errors.RunnerAlreadyStarted):
        await runner.run()


async def test_open_runner_checks_its_arguments(url: str, group: str, tally: Tally) -> None:
    with pytest.raises(TypeError, match="RunnerConfig"):
        async with trunner.open_runner(url, {"consumer_group": group}, registry(tally)):  # type: ignore[arg-type]
            pass
    with pytest.raises(TypeError, match="TaskRegistry"):
        async with trunner.open_runner(url, config(group), {}):  # type: ignore[arg-type]
            pass


async def test_current_message_outside_a_task_raises() -> None:
    with pytest.raises(trunner.errors.RunnerNotRunning):
        trunner.current_message()


async def test_tasks_see_the_runner_that_runs_them(url: str, group: str) -> None:
    seen: list[trunner.Runner] = []
    done = trio.Event()
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def first(_: Any) -> None:
        runner = trunner.current_runner()
        seen.append(runner)
        await runner.dispatch("second", None)

    @tasks.task
    async def second(_: Any) -> None:
        seen.append(trunner.current_runner())
        done.set()

    async with open_checked_runner(url, config(group), tasks) as runner:
        await runner.dispatch("first", None)
        await done.wait()
    assert seen == [runner, runner]
    with pytest.raises(trunner.errors.RunnerNotRunning):
        trunner.current_runner()


@pytest.mark.redis  # starts a redis-server of its own
async def test_a_unix_socket_url(group: str, tally: Tally, tmp_path: Any) -> None:
    socket_path = tmp_path / "redis.sock"
    with RedisServer("--unixsocket", str(socket_path), "--unixsocketperm", "700"):
        url = f"unix://{socket_path}"
        async with open_checked_runner(url, config(group), registry(tally)) as runner:
            await runner.dispatch("record", "over a unix socket")
            await tally.wait(1)
    assert tally.payloads == ["over a unix socket"]


@pytest.mark.redis  # starts a redis-server of its own
async def test_a_runner_starts_when_redis_is_out_of_memory(group: str) -> None:
    """The group exists: a refused XGROUP CREATE must not stop the start."""
    with RedisServer("--maxmemory", "3mb", "--maxmemory-policy", "noeviction") as server:
        async with trunner.open_runner(server.url, config(group), trunner.TaskRegistry()):
            pass
        client = redis.Redis.from_url(server.url)
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            for i in range(10_000):
                client.set(f"filler:{i}", b"x" * 10_000)
        client.close()
        async with trunner.open_runner(server.url, config(group), trunner.TaskRegistry()) as runner:
            assert runner.state is trunner.RunnerState.STARTED


@pytest.mark.redis  # starts a redis-server of its own
@pytest.mark.parametrize(("policy", "warned"), [("allkeys-lru", True), ("noeviction", False)])
async def test_a_warning_when_redis_may_evict_keys(
    group: str, policy: str, warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    with RedisServer("--maxmemory", "100mb", "--maxmemory-policy", policy) as server:
        async with open_checked_runner(server.url, config(group), trunner.TaskRegistry()):
            pass
    warnings = [r.getMessage() for r in caplog.records if "maxmemory-policy" in r.getMessage()]
    assert bool(warnings) is warned, warnings
    if warned:
        assert "allkeys-lru" in warnings[0]


async def test_every_component_has_the_same_lifecycle_and_has_stopped_after_the_block(
    url: str, group: str
) -> None:
    """run(*, task_status) started by the runner, a synchronous stop(), a stopped event."""
    async with open_checked_runner(url, config(group, num_fetchers=2), trunner.TaskRegistry()) as r:
        c = parts(r)
        components: list[Stoppable] = [
            c.redis,
            c.reporter,
            c.acks,
            c.heartbeater,
            c.elector,
            c.leadership,
            *c.fetchers,
        ]
        for component in components:
            assert callable(component.stop)
            assert not component.stopped.is_set(), component
    for component in components:
        assert component.stopped.is_set(), component


async def test_a_runner_says_at_start_what_it_can_run(
    memory_url: str, group: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trunner")
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def send(_: Any) -> None: ...

    @tasks.cron("0 3 * * *", name="nightly")
    async def rebuild(_: Any) -> None: ...

    async with open_checked_runner(memory_url, trunner.RunnerConfig(consumer_group=group), tasks):
        pass
    [started] = [r for r in caplog.records if hasattr(r, "reclaim_delay")]
    assert (started.levelno, vars(started)["reclaim_delay"]) == (logging.INFO, 30.0)
    [listed] = [r for r in caplog.records if hasattr(r, "tasks")]
    assert listed.levelno == logging.INFO
    assert vars(listed)["tasks"] == ["rebuild", "send"]
    assert vars(listed)["cron"] == {"nightly": "0 3 * * *"}


async def test_a_runner_says_at_stop_what_it_did_in_one_short_line(
    memory_url: str, group: str, caplog: pytest.LogCaptureFixture, tally: Tally
) -> None:
    caplog.set_level(logging.INFO, logger="trunner")
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def send(payload: int) -> None:
        tally.record(payload)

    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        for n in range(3):
            await runner.dispatch(send, n)
        await tally.wait(3)
    [stopped] = [r.getMessage() for r in caplog.records if "runner stopped" in r.getMessage()]
    assert "processed 3, succeeded 3" in stopped
    assert "failed" not in stopped
    assert "RunnerStatistics" not in stopped
    assert len(stopped) < 300


async def test_an_empty_registry_is_a_warning(
    memory_url: str, group: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trunner")
    async with open_checked_runner(memory_url, config(group), trunner.TaskRegistry()):
        pass
    [listed] = [r for r in caplog.records if hasattr(r, "tasks")]
    assert (listed.levelno, vars(listed)["tasks"]) == (logging.WARNING, [])
