"""trunner.testing and the pytest plugin: idle waits, leak checks, error capture, eager
calls, the fixtures (through pytester), and the example test module."""

from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import subprocess
import sys
import threading
from typing import Any

import pytest
import redis
import trio

import trunner
from trunner._redis import Broker
from trunner._util import connection_name
from trunner.keys import Keys
from trunner.testing import (
    NotIdle,
    ShutdownLeak,
    assert_clean_shutdown,
    call_task,
    capture_errors,
    open_runner_factory,
    run_until_idle,
)

from ..conftest import REPO, Gate, Tally, config
from ..support.servers import RedisServer

pytest_plugins = ["pytester"]

EXAMPLE = REPO / "examples" / "test_with_trunner.py"


def database(server: RedisServer, db: int) -> str:
    """The URL of database ``db`` of ``server`` (other tests use database 0)."""
    return server.url.rsplit("/", 1)[0] + f"/{db}"


def failing(raised: list[BaseException]) -> trunner.TaskRegistry:
    """A registry whose task ``boom`` always raises (one attempt), recording what it raised."""
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def boom(payload: Any) -> None:
        error = ValueError(f"boom {payload}")
        raised.append(error)
        raise error

    return tasks


def flaky(tally: Tally, failures: int, task_ids: list[str], **options: Any) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.task(**options)
    async def flaky(payload: Any) -> Any:
        tally.record(payload)
        message = trunner.current_message()
        task_ids.append(message.task_id)
        if message.attempt <= failures:
            raise ValueError(f"attempt {message.attempt}")
        return {"done": payload}

    return tasks


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(INNER_INI)
    return pytester


# -- run_until_idle ---------------------------------------------------------------------------


async def test_run_until_idle_waits_for_follow_ups_and_due_retries(url: str, group: str) -> None:
    tasks = trunner.TaskRegistry()
    log: list[str] = []

    @tasks.task
    async def first(_: Any) -> None:
        log.append("first")
        await trunner.current_runner().dispatch("second", None)

    @tasks.task(max_retry=1, retry_backoff=0)  # the retry is due at once, via the delayed set
    async def second(_: Any) -> None:
        attempt = trunner.current_message().attempt
        log.append(f"second#{attempt}")
        if attempt == 1:
            raise ValueError("once")

    async with trunner.open_runner(url, config(group), tasks) as runner:
        await runner.dispatch("first", None)
        await run_until_idle(runner)
        assert log == ["first", "second#1", "second#2"]
        counts = await runner.admin.queue_length(), await runner.admin.pending_count()
        assert counts == (0, 0)
        assert await runner.admin.delayed_count() == 0
        assert runner.statistics().in_flight == 0


async def test_retries_waiting_out_their_backoff_count_with_delayed_within(
    url: str, group: str
) -> None:
    tasks = trunner.TaskRegistry()
    attempts: list[int] = []

    @tasks.task(max_retry=2, retry_backoff=lambda _attempt: 0.5)
    async def flaky(_: Any) -> None:
        attempts.append(trunner.current_message().attempt)
        if len(attempts) < 3:
            raise ValueError("not yet")

    async with trunner.open_runner(url, config(group), tasks) as runner:
        await runner.dispatch("flaky", None)
        await run_until_idle(runner)  # a retry due in 0.5 s is not due: idle
        assert attempts == [1]
        assert await runner.admin.delayed_count() == 1
        await run_until_idle(runner, delayed_within=1.0)
        assert attempts == [1, 2, 3]
        assert await runner.admin.delayed_count() == 0


async def test_delayed_tasks_due_later_do_not_keep_the_group_busy(url: str, group: str) -> None:
    gate = Gate()
    async with trunner.open_runner(url, config(group), gate.registry()) as runner:
        await runner.dispatch_delayed("noop", None, 60)
        begin = trio.current_time()
        await run_until_idle(runner)
        assert trio.current_time() - begin < 1.0
        assert await runner.admin.delayed_count() == 1
        with pytest.raises(NotIdle) as info:
            await run_until_idle(runner, timeout=0.2, delayed_within=120)
        assert (info.value.state.due, info.value.state.due_tasks) == (1, ["noop"])


async def test_run_until_idle_waits_for_buffered_acknowledgements(url: str, group: str) -> None:
    gate = Gate()
    cfg = config(group, ack_flush_interval=0.5, ack_batch_size=1000)
    async with trunner.open_runner(url, cfg, gate.registry()) as runner:
        await runner.dispatch_many("noop", [1, 2, 3])
        await run_until_idle(runner)
        assert runner.statistics().acked == 3
        assert await runner.admin.pending_count() == 0


async def test_not_idle_says_what_is_left(url: str, group: str, keys: Keys, raw: Any) -> None:
    gate = Gate()
    cfg = config(group, num_workers=1, batch_size=1)
    # A lease held by a ghost: this runner never leads, so a due delayed task stays put.
    raw.set(keys.leader, "ghost", px=60_000)
    async with trunner.open_runner(url, cfg, gate.registry()) as runner:
        await runner.dispatch_many("gated", [1, 2])
        await runner.dispatch_delayed("noop", None, 0)
        await gate.wait_started()
        with pytest.raises(NotIdle) as info:
            await run_until_idle(runner, timeout=0.3)
        about = repr(runner)
        gate.open.set()
    state = info.value.state
    assert (state.queued, state.pending, state.due, state.in_flight) == (1, 1, 1, 1)
    assert state.queued_tasks == state.pending_tasks == state.in_flight_tasks == ["gated"]
    assert state.due_tasks == ["noop"]
    assert state.pending_consumers == [runner.consumer_name]
    text = str(info.value)
    assert text == (
        f"{about} was not idle after 0.3 s: 1 queued (gated: 1); 1 pending (gated: 1, by "
        f"consumer {runner.consumer_name!r}: 1); 1 delayed and due (noop: 1); 1 in flight "
        "(gated: 1)"
    )
    assert isinstance(info.value, AssertionError)


async def test_run_until_idle_needs_a_running_runner(memory_url: str, group: str) -> None:
    runner = trunner.Runner(memory_url, config(group), trunner.TaskRegistry())
    with pytest.raises(trunner.errors.RunnerNotRunning):
        await run_until_idle(runner)


# -- assert_clean_shutdown --------------------------------------------------------------------


async def test_a_clean_run_passes_and_its_runners_are_found(url: str, group: str) -> None:
    gate = Gate()
    check = assert_clean_shutdown(url)
    async with check, trunner.open_runner(url, config(group), gate.registry()) as runner:
        await runner.dispatch("noop", None)
        await run_until_idle(runner)
        await trio.to_thread.run_sync(lambda: None)  # Trio's idle cached thread: no leak
    assert check.runners == [runner]


async def test_messages_released_at_the_drain_timeout_are_no_leak(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    gate = Gate()
    cfg = config(group, drain_timeout=0.1)
    async with (
        assert_clean_shutdown(url),
        trunner.open_runner(url, cfg, gate.registry()) as runner,
    ):
        await runner.dispatch("gated", None)
        await gate.wait_started()
    assert runner.statistics().released == 1
    pending = raw.xpending_range(keys.stream, group, "-", "+", 10)
    assert [p["consumer"].decode() for p in pending] == ["trunner:released"]


@pytest.mark.parametrize("form", ["async", "sync"])
async def test_a_runner_left_running_is_named(url: str, group: str, form: str) -> None:
    runner = trunner.Runner(url, config(group), trunner.TaskRegistry())
    async with trio.open_nursery() as nursery:
        with pytest.raises(ShutdownLeak) as info:
            if form == "async":
                async with assert_clean_shutdown():
                    await nursery.start(runner.run)
            else:
                with assert_clean_shutdown():
                    await nursery.start(runner.run)
        runner.stop()
    (leak,) = info.value.leaks
    about = repr(runner).replace("state=STOPPED", "state=STARTED")  # when it leaked
    assert leak.startswith(f"Trio task 'trunner.runner.Runner.run' of {about}")
    assert "is still running, with " in leak
    assert leak.endswith("more trunner task(s) under it")
    assert str(info.value).startswith("trunner did not shut down cleanly: 1 thing(s) left")


async def test_runners_older_than_the_block_are_not_blamed(url: str, group: str) -> None:
    gate = Gate()
    async with trunner.open_runner(url, config(group), gate.registry()) as runner:
        async with assert_clean_shutdown(url) as check:
            await runner.dispatch_many("gated", range(5))  # may grow its connection pool
            await gate.wait_started()  # its job tasks outlive the block
        assert check.runners == []
        assert runner.statistics().in_flight > 0
        gate.open.set()


async def test_a_message_neither_acknowledged_nor_released_is_named(
    url: str, group: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def release_nothing(self: Broker, consumer: str, entries: Any) -> int:
        return 0

    monkeypatch.setattr(Broker, "release", release_nothing)
    gate = Gate()
    cfg = config(group, drain_timeout=0.1)
    with pytest.raises(ShutdownLeak) as info:
        async with (
            assert_clean_shutdown(),
            trunner.open_runner(url, cfg, gate.registry()) as runner,
        ):
            message_id = await runner.dispatch("gated", None)
            await gate.wait_started()
    (leak,) = info.value.leaks
    assert leak == (
        f"message {message_id} of task 'gated' is still pending for consumer "
        f"{runner.consumer_name!r} of {runner!r}: fetched, and neither acknowledged nor "
        "released (released ones belong to 'trunner:released')"
    )


async def test_a_thread_left_running_is_named() -> None:
    stop = threading.Event()
    leaky = threading.Thread(target=stop.wait, name="leaky-thread")
    ignored = threading.Thread(target=stop.wait, name="ignored-thread")
    try:
        with pytest.raises(ShutdownLeak) as info:
            async with assert_clean_shutdown():
                leaky.start()
        async with assert_clean_shutdown(threads=False):
            ignored.start()
    finally:
        stop.set()
        leaky.join()
        if ignored.ident is not None:
            ignored.join()
    (leak,) = info.value.leaks
    assert leak.startswith("thread 'leaky-thread' (ident ")
    assert leak.endswith("started during the block is still alive")


async def test_a_connection_left_open_is_named(redis_server: RedisServer) -> None:
    url = redis_server.url
    connections: list[Any] = []

    def connect(name: str) -> None:
        client = redis.Redis.from_url(url, client_name=name)
        client.ping()
        connections.append(client)

    leaky = connection_name("trunner-client:leaky")  # as this process's trunner names it
    try:
        async with assert_clean_shutdown(url):
            connect("my-app")  # not trunner's
        with pytest.raises(ShutdownLeak) as info:
            async with assert_clean_shutdown(url):
                connect(leaky)
    finally:
        for client in connections:
            client.close()
    (leak,) = info.value.leaks
    assert leak.startswith("Redis connection id=")
    assert f"name={leaky!r}" in leak
    assert leak.endswith(f"opened during the block is still open on {url}")


async def test_a_stopped_runners_connection_is_found_without_a_url(
    redis_server: RedisServer, group: str
) -> None:
    url = redis_server.url
    leftover: list[Any] = []
    try:
        with pytest.raises(ShutdownLeak) as info:
            async with assert_clean_shutdown():
                async with trunner.open_runner(url, config(group), trunner.TaskRegistry()) as r:
                    pass
                # A connection under the stopped runner's name, as if it had not closed it.
                name = connection_name(f"trunner:{r.consumer_name}")
                leftover.append(redis.Redis.from_url(url, client_name=name))
                leftover[0].ping()
    finally:
        for client in leftover:
            client.close()
    (leak,) = info.value.leaks
    assert f"name={name!r}" in leak


def start_neighbour(url: str, group: str) -> subprocess.Popen[str]:
    """Another process on database 0 of the test's server (tests/processes/neighbour_process.py)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.processes.neighbour_process", url, group],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("db", [0, 5])
async def test_connections_of_another_process_are_not_blamed(
    redis_server: RedisServer, group: str, db: int
) -> None:
    url = database(redis_server, db)
    neighbour = start_neighbour(redis_server.url, group)
    assert neighbour.stdin is not None
    assert neighbour.stdout is not None
    try:
        async with assert_clean_shutdown(url):
            async with trunner.open_runner(url, config(group), trunner.TaskRegistry()):
                pass
            # The other process opens its runner and client during the block, and keeps
            # them open after it: they are not this process's.
            neighbour.stdin.write("open\n")
            neighbour.stdin.flush()
            line = await trio.to_thread.run_sync(neighbour.stdout.readline)
            assert line.strip() == "open"
        neighbour.stdin.write("close\n")
        neighbour.stdin.flush()
        assert (await trio.to_thread.run_sync(neighbour.stdout.readline)).strip() == "closed"
        assert await trio.to_thread.run_sync(neighbour.wait) == 0
    finally:
        if neighbour.poll() is None:
            neighbour.kill()
            neighbour.wait()
        neighbour.stdin.close()
        neighbour.stdout.close()


def test_around_trio_run_threads_and_connections_are_checked(
    redis_server: RedisServer, group: str
) -> None:
    url = redis_server.url

    async def main() -> None:
        async with trunner.open_runner(url, config(group), trunner.TaskRegistry()):
            pass

    with assert_clean_shutdown(url):
        trio.run(main)
    leftover = redis.Redis.from_url(url, client_name=connection_name("trunner-elector"))
    try:
        with (
            pytest.raises(ShutdownLeak, match="name='trunner-elector@"),
            assert_clean_shutdown(url),
        ):
            trio.run(main)
            leftover.ping()
    finally:
        leftover.close()


# -- capture_errors ---------------------------------------------------------------------------


async def test_an_error_not_consumed_is_raised_at_the_end(url: str, group: str) -> None:
    raised: list[BaseException] = []
    async with trunner.open_runner(url, config(group), failing(raised)) as runner:
        with pytest.raises(trunner.TaskFailed) as info:
            async with capture_errors(runner):
                await runner.dispatch("boom", 1)
                await run_until_idle(runner)
    assert info.value.error is raised[0]
    notes = "\n".join(info.value.__notes__)
    assert "capture_errors: 1 more not consumed: MaxRetryExceeded: task 'boom'" in notes
    assert "captured this error and the test did not consume it" in notes


async def test_consumed_errors_pass(memory_url: str, group: str) -> None:
    raised: list[BaseException] = []
    async with (
        trunner.open_runner(memory_url, config(group), failing(raised)) as runner,
        capture_errors(runner) as errors,
    ):
        await runner.dispatch_many("boom", [1, 2])
        await run_until_idle(runner)
        assert len(errors) == 4  # a TaskFailed and a MaxRetryExceeded each
        # The two tasks run concurrently: they may fail, and be reported, in either order.
        by_text = {str(error): error for error in raised}
        assert sorted(by_text) == ["boom 1", "boom 2"]
        assert errors.expect(ValueError, match="boom 2") is by_text["boom 2"]
        failed = errors.expect(trunner.TaskFailed)
        assert isinstance(failed, trunner.TaskFailed)
        assert failed.error is by_text["boom 1"]  # the one left once boom 2 was consumed
        cleared = errors.clear()
        assert [type(e) for e in cleared] == [trunner.MaxRetryExceeded] * 2
        with pytest.raises(AssertionError, match="no captured error matches KeyError"):
            errors.expect(KeyError)
        with pytest.raises(AssertionError, match="captured no error"):
            errors.pop()


async def test_wait_for_waits_until_the_error_is_captured(memory_url: str, group: str) -> None:
    raised: list[BaseException] = []
    runner = trunner.Runner(memory_url, config(group), failing(raised))
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        with capture_errors(runner) as errors:
            await runner.dispatch("boom", 1)
            error = await errors.wait_for(trunner.MaxRetryExceeded)
            assert isinstance(error, trunner.MaxRetryExceeded)
            assert error.attempts == 1
            assert isinstance(errors.pop(), trunner.TaskFailed)
            runner.stop()
            with pytest.raises(AssertionError, match="stopped without capturing KeyError"):
                await errors.wait_for(KeyError)


async def test_an_exception_of_the_block_is_not_masked(memory_url: str, group: str) -> None:
    raised: list[BaseException] = []
    async with trunner.open_runner(memory_url, config(group), failing(raised)) as runner:
        with pytest.raises(KeyError, match="mine"), capture_errors(runner):
            await runner.dispatch("boom", 1)
            await run_until_idle(runner)
            raise KeyError("mine")


# -- eager calls ------------------------------------------------------------------------------


async def test_call_runs_the_action_after_the_json_round_trip() -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def echo(payload: Any) -> Any:
        return payload

    assert await tasks.call("echo", {1: (1, 2), "s": None}) == {"1": [1, 2], "s": None}
    assert await tasks.call("echo") is None


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        ({1, 2}, trunner.InvalidPayload),
        (float("nan"), trunner.InvalidPayload),
        (b"bytes", trunner.InvalidPayload),
        ("x" * (1024 * 1024), trunner.PayloadTooLarge),
    ],
)
async def test_call_refuses_what_dispatch_refuses(
    memory_url: str, group: str, payload: Any, error: type[Exception]
) -> None:
    ran: list[Any] = []
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def take(payload: Any) -> None:
        ran.append(payload)

    with pytest.raises(error) as eager:
        await tasks.call("take", payload)
    async with trunner.open_runner(memory_url, config(group), tasks) as runner:
        with pytest.raises(error) as dispatched:
            await runner.dispatch("take", payload)
    assert type(eager.value) is type(dispatched.value)
    assert ran == []


async def test_call_counts_attempts_like_a_runner(memory_url: str, group: str) -> None:
    runs: dict[str, tuple[Tally, list[str]]] = {}
    for how in ("eager", "runner"):
        tally, task_ids = Tally(), list[str]()
        runs[how] = tally, task_ids
        tasks = flaky(tally, 2, task_ids, max_retry=3, retry_backoff=0)
        if how == "eager":
            assert await tasks.call("flaky", "p") == {"done": "p"}
        else:
            async with trunner.open_runner(memory_url, config(group), tasks) as runner:
                await runner.dispatch("flaky", "p")
                await run_until_idle(runner)
    for tally, task_ids in runs.values():
        assert [attempt for _, attempt, _ in tally.runs] == [1, 2, 3]
        message_ids = [message_id for _, _, message_id in tally.runs]
        assert len(set(message_ids)) == 3, "each attempt is a message of its own"
        assert task_ids == [message_ids[0]] * 3, "the task id is the first message's id"


async def test_call_gives_up_with_max_retry_exceeded_from_the_last_error() -> None:
    tally, task_ids = Tally(), list[str]()
    tasks = flaky(tally, 99, task_ids, max_retry=2, retry_backoff=0)
    with pytest.raises(trunner.MaxRetryExceeded) as info:
        await tasks.call("flaky", None)
    assert info.value.attempts == 3
    assert str(info.value) == "task 'flaky' failed after 3 attempt(s)"
    assert isinstance(info.value.__cause__, ValueError)
    assert str(info.value.__cause__) == "attempt 3"
    with pytest.raises(trunner.errors.RunnerNotRunning):
        trunner.current_message()  # only inside the call


async def test_call_does_not_sleep_the_backoff_unless_asked() -> None:
    tally, task_ids = Tally(), list[str]()
    tasks = flaky(tally, 1, task_ids, max_retry=1, retry_backoff=3600)
    begin = trio.current_time()
    await tasks.call("flaky", None)
    assert trio.current_time() - begin < 1.0
    assert len(tally.runs) == 2


async def test_call_sleeps_the_backoff_on_the_trio_clock(autojump_clock: trio.abc.Clock) -> None:
    tally, task_ids = Tally(), list[str]()
    tasks = flaky(tally, 2, task_ids, max_retry=2, retry_backoff=float)
    begin = trio.current_time()
    await tasks.call("flaky", None, sleep_backoff=True)
    assert trio.current_time() - begin == pytest.approx(3.0)  # 1 s after attempt 1, 2 s after 2


async def test_call_checks_the_task_name() -> None:
    tasks = trunner.TaskRegistry()
    with pytest.raises(trunner.TaskNotFound):
        await tasks.call("missing", None)
    with pytest.raises(TypeError):
        await tasks.call(3, None)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="empty"):
        await tasks.call("", None)


async def test_call_retries_base_exceptions_as_a_runner_does() -> None:
    """A BaseException a task raises is its failure in a runner (retried, then given up);
    only a cancellation, KeyboardInterrupt or SystemExit goes past it, at once."""

    class Stop(BaseException):
        pass

    tasks = trunner.TaskRegistry()
    calls: list[int] = []

    @tasks.task(max_retry=2, retry_backoff=0)
    async def stop(kind: str) -> None:
        calls.append(trunner.current_message().attempt)
        raise Stop if kind == "stop" else KeyboardInterrupt

    with pytest.raises(trunner.MaxRetryExceeded) as info:
        await tasks.call("stop", "stop")
    assert isinstance(info.value.__cause__, Stop)
    assert calls == [1, 2, 3]
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        await tasks.call("stop", "interrupt")
    assert calls == [1]


async def test_call_checks_unique_keys_like_dispatch() -> None:
    tasks = trunner.TaskRegistry()
    keys: list[str | None] = []

    @tasks.task(unique=True, unique_key=lambda payload: payload["order"], unique_for=60)
    async def ship(_: Any) -> None:
        keys.append(trunner.current_message().unique_key)

    await tasks.call("ship", {"order": 7})
    assert keys == [tasks.get("ship").key_for({"order": 7})]  # as a dispatch would lock it
    with pytest.raises(TypeError, match="unique_key of task 'ship' must return a str or int"):
        await tasks.call("ship", {"order": 1.5})


def counting(attempts: list[int]) -> trunner.TaskRegistry:
    """A task using the runner's Redis handle and dispatch, as the docs recommend."""
    tasks = trunner.TaskRegistry()

    @tasks.task(max_retry=2, retry_backoff=0)
    async def count_visit(payload: dict[str, str]) -> None:
        attempts.append(trunner.current_message().attempt)
        redis = trunner.current_runner().redis
        if await redis.set(f"seen:{payload['page']}:{payload['user']}", 1, nx=True):
            await redis.incr(f"visitors:{payload['page']}")
            await trunner.current_runner().dispatch("noop", payload)

    @tasks.task
    async def noop(_: Any) -> None:
        pass

    return tasks


async def test_an_eager_task_without_a_runner_says_how_to_give_it_one() -> None:
    attempts: list[int] = []
    tasks = counting(attempts)
    with pytest.raises(trunner.errors.RunnerNotRunning) as info:
        await tasks.call("count_visit", {"page": "home", "user": "ada"})
    assert attempts == [1], "raised at once: retrying cannot give the task a runner"
    assert "current_runner() in a task run eagerly" in str(info.value)
    assert "call_task(tasks, name, payload, runner=runner)" in str(info.value)
    with pytest.raises(trunner.errors.RunnerNotRunning, match="only available inside a task"):
        trunner.current_runner()  # outside of any task, as before


async def test_an_eager_task_uses_the_runner_it_is_given(memory_url: str, group: str) -> None:
    attempts: list[int] = []
    tasks = counting(attempts)
    async with open_runner_factory(memory_url, group) as runners:
        runner = await runners(tasks)
        visit = {"page": "home", "user": "ada"}
        await call_task(tasks, "count_visit", visit, runner=runner)
        await call_task(tasks, "count_visit", visit, runner=runner)
        assert await runner.redis.get("visitors:home") == b"1"
        await run_until_idle(runner)
        assert runner.task_totals()["noop"].succeeded == 1, "its follow-up ran"
    assert attempts == [1, 1]
    with pytest.raises(trunner.errors.RunnerNotRunning, match="needs a started runner"):
        await call_task(tasks, "count_visit", visit, runner=runner)


# -- the pytest plugin ------------------------------------------------------------------------

INNER_INI = """
[pytest]
trio_mode = true
filterwarnings = error
"""

USER_TESTS = """
from typing import Any

import trunner
from trunner.testing import run_until_idle

tasks = trunner.TaskRegistry()
done: list[Any] = []


@tasks.task
async def record(payload: Any) -> None:
    done.append(payload)


async def test_runners_share_the_test_group(trunner_runner, trunner_client, trunner_group):
    first = await trunner_runner(tasks)
    second = await trunner_runner(tasks, num_workers=2)
    assert first.config.consumer_group == second.config.consumer_group == trunner_group
    assert trunner_client.consumer_group == trunner_group
    await trunner_client.dispatch_many("record", range(20))
    await run_until_idle(first)
    assert sorted(done) == list(range(20))
    await trunner_runner.close(second)
    assert second.state is trunner.RunnerState.STOPPED
    assert trunner_runner.runners == [first, second]


async def test_the_url_fixture(trunner_redis_url):
    config = trunner.RunnerConfig(consumer_group="mine")
    async with trunner.open_runner(trunner_redis_url, config, tasks) as runner:
        await runner.dispatch("record", "x")
        await run_until_idle(runner)
    assert "x" in done
"""

LEAKY_TEST = """
import trunner
from trunner.testing import assert_clean_shutdown


async def test_leaks_a_runner(trunner_redis_url, nursery):
    config = trunner.RunnerConfig(consumer_group="leaky")
    runner = trunner.Runner(trunner_redis_url, config, trunner.TaskRegistry())
    async with assert_clean_shutdown():
        await nursery.start(runner.run)  # and never stopped in the block
"""

PENDING_TEST = """
import trio
import trunner
from trunner._redis import Broker

tasks = trunner.TaskRegistry()
started = trio.Event()


@tasks.task
async def hang(_):
    started.set()
    await trio.sleep_forever()


async def release_nothing(self, consumer, entries):
    return 0


async def test_leaves_a_message_behind(trunner_runner, monkeypatch):
    monkeypatch.setattr(Broker, "release", release_nothing)
    runner = await trunner_runner(tasks, drain_timeout=0.1)
    await runner.dispatch("hang", None)
    await started.wait()
"""


REGISTRY_CONFTEST = """
import pytest
import trunner

tasks = trunner.TaskRegistry()
charged = []


@tasks.task(unique=True, unique_key=lambda payload: payload["order"], unique_for=60)
async def charge(payload):
    charged.append(payload["order"])


@pytest.fixture
def trunner_tasks():
    return tasks
"""

REGISTRY_TESTS = """
import pytest
import trunner
from trunner.testing import run_until_idle

from conftest import charged


async def test_the_client_enforces_unique_tasks(trunner_client):
    await trunner_client.dispatch("charge", {"order": 1})
    with pytest.raises(trunner.TaskAlreadyDispatched):
        await trunner_client.dispatch("charge", {"order": 1})
    with pytest.raises(trunner.TaskNotFound):
        await trunner_client.dispatch("chrage", {"order": 2})


async def test_the_runner_factory_defaults_to_the_registry(trunner_runner, trunner_client):
    runner = await trunner_runner()
    await trunner_client.dispatch("charge", {"order": 3})
    await run_until_idle(runner)
    assert charged == [3]
"""


def test_the_fixtures_use_the_registry_the_suite_gives(inner: pytest.Pytester) -> None:
    inner.makeconftest(REGISTRY_CONFTEST)
    inner.makepyfile(test_registry=REGISTRY_TESTS)
    inner.runpytest("-p", "no:cacheprovider", "--trunner").assert_outcomes(passed=2)


def test_the_plugin_is_registered_as_a_pytest11_entry_point() -> None:
    (entry,) = [e for e in importlib.metadata.entry_points(group="pytest11") if e.name == "trunner"]
    assert entry.value == "trunner.pytest_plugin"


def test_the_fixtures_are_inactive_unless_enabled(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_user=USER_TESTS)
    result = inner.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*fixture 'trunner_runner' not found*"])


@pytest.mark.parametrize("tier", ["memory", "redis"])
def test_a_user_suite_passes_with_the_fixtures(
    inner: pytest.Pytester, tier: str, request: pytest.FixtureRequest
) -> None:
    inner.makepyfile(test_user=USER_TESTS)
    if tier == "memory":
        args = ["--trunner"]
    else:
        args = ["--trunner-redis", database(request.getfixturevalue("redis_server"), 9)]
    result = inner.runpytest("-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=2)
    where = "a fresh memory:// server per test" if tier == "memory" else args[1]
    result.stdout.fnmatch_lines([f"trunner fixtures: Redis at {where}"])


def test_the_ini_option_enables_the_fixtures(inner: pytest.Pytester) -> None:
    inner.makeini(INNER_INI + "trunner = true\n")
    inner.makepyfile(test_user=USER_TESTS)
    inner.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_a_test_leaking_a_runner_fails_naming_it(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_leaky=LEAKY_TEST)
    result = inner.runpytest("-p", "no:cacheprovider", "--trunner")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*ShutdownLeak: trunner did not shut down cleanly: 1 thing(s) left after the block:",
            "*- Trio task 'trunner.runner.Runner.run' of <Runner group='leaky' consumer=* "
            "state=STARTED> is still running, with * more trunner task(s) under it",
        ]
    )


def test_the_runner_fixture_fails_on_a_message_left_pending(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_pending=PENDING_TEST)
    result = inner.runpytest("-p", "no:cacheprovider", "--trunner")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*- message * of task 'hang' is still pending for consumer * of <Runner group='test-*"
            "fetched, and neither acknowledged nor released*",
        ]
    )


def test_the_redis_option_cleans_trunner_keys(
    inner: pytest.Pytester, redis_server: RedisServer
) -> None:
    url = database(redis_server, 11)
    observer = redis.Redis.from_url(url)
    try:
        observer.flushdb()
        observer.xadd("trunner:{before}:stream", {"payload": b"{}"})
        observer.set("my-app:key", "kept")
        inner.makepyfile(
            test_keys=f"""
import redis
import trunner


async def test_starts_clean_and_writes(trunner_client):
    observer = redis.Redis.from_url({url!r})
    assert observer.keys("trunner:*") == []
    await trunner_client.dispatch("anything", None)
    assert observer.keys("trunner:*") != []
    observer.close()
"""
        )
        inner.runpytest("-p", "no:cacheprovider", "--trunner-redis", url).assert_outcomes(passed=1)
        assert observer.keys("*") == [b"my-app:key"]
    finally:
        observer.flushdb()
        observer.close()


def test_a_bad_redis_url_is_a_usage_error(inner: pytest.Pytester) -> None:
    result = inner.runpytest("-p", "no:cacheprovider", "--trunner-redis", "mysql://x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--trunner-redis: unsupported Redis URL 'mysql://x'*"])


def test_the_fixtures_need_pytest_trio(inner: pytest.Pytester) -> None:
    result = inner.runpytest("-p", "no:cacheprovider", "-p", "no:trio", "--trunner")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*trunner's fixtures need pytest-trio*"])


@pytest.mark.parametrize("tier", ["memory", "redis"])
def test_the_example_test_module_passes(tier: str, request: pytest.FixtureRequest) -> None:
    if tier == "memory":
        args = ["--trunner"]
    else:
        args = ["--trunner-redis", database(request.getfixturevalue("redis_server"), 10)]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", str(EXAMPLE), "-q", "-p", "no:cacheprovider", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 passed" in result.stdout


@dataclasses.dataclass(frozen=True)
class Box:
    size: int
    made: datetime.datetime


async def test_call_runs_a_typed_task_as_a_runner_and_a_handle_would(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Eager mode: the typed payload is encoded, checked and decoded; the timeout bounds
    each attempt; GiveUp ends the attempts; a kept result comes back through JSON."""
    tasks = trunner.TaskRegistry()

    seen: list[Any] = []

    @tasks.task(keep_result=60)
    async def grow(box: Box) -> Box:
        seen.append(box)
        return Box(box.size * 2, box.made)

    @tasks.task(timeout=0.5, max_retry=2)
    async def hang(_: None) -> None:
        seen.append(trunner.current_message().attempt)
        await trio.sleep_forever()

    @tasks.task(max_retry=5)
    async def refuse(_: None) -> None:
        seen.append("refused")
        raise trunner.GiveUp("no")

    made = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    assert await tasks.call(grow, Box(2, made)) == Box(4, made)
    assert seen == [Box(2, made)]
    with pytest.raises(trunner.InvalidPayload, match=r"\$\.size"):
        await tasks.call("grow", {"size": "big", "made": "2026-01-01T00:00:00Z"})
    seen.clear()
    begin = trio.current_time()
    with pytest.raises(trunner.MaxRetryExceeded) as info:
        await tasks.call(hang, None)
    assert isinstance(info.value.__cause__, trunner.TaskTimeout)
    assert seen == [1, 2, 3]
    assert trio.current_time() - begin == pytest.approx(1.5)
    seen.clear()
    with pytest.raises(trunner.MaxRetryExceeded) as info:
        await tasks.call(refuse, None)
    assert seen == ["refused"]
    assert isinstance(info.value.__cause__, trunner.GiveUp)
