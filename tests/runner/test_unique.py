"""Unique tasks: at most one queued instance per unique key.

Crosses task.py (the options and the key), _producer/ (the lock taken at dispatch), the
scripts of _redis/broker/ that release it, mover.py (a delayed unique task locks when it
is moved) and cron.py (ticks are skipped while the key is held).
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from typing import Any

import pytest
import trio

import trunner
from trunner._redis import Owner
from trunner.keys import Keys

from ..conftest import REPO, Gate, config, open_checked_runner, parts, redis_state
from ..processes.unique_process import dispatch_concurrently, registry
from ..support.servers import RedisServer


def unique_registry(gate: Gate, unique_for: float = 60.0) -> Any:
    tasks = trunner.TaskRegistry()

    @tasks.task(
        unique=True,
        unique_key=lambda payload: payload["order"],
        unique_for=unique_for,
        max_retry=0,
    )
    async def charge(payload: Any) -> None:
        gate.enter(payload)
        await gate.open.wait()
        gate.finished.append(payload)

    @tasks.task
    async def plain(_: Any) -> None:
        pass

    return tasks


def lock_key(keys: Keys, order: int, task: str = "charge") -> str:
    return keys.unique(f"{len(task)}:{task}:{order}")


def spawn(url: str, group: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.processes.unique_process", url, group, str(count)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_unique_task_options_are_checked() -> None:
    tasks = trunner.TaskRegistry()

    async def action(_: Any) -> None:
        pass

    with pytest.raises(ValueError, match="needs unique_for"):
        tasks.task("a", unique=True)(action)
    with pytest.raises(ValueError, match="need unique=True"):
        tasks.task("b", unique_for=5)(action)
    with pytest.raises(ValueError, match="unique_for must be a finite number > 0"):
        tasks.task("c", unique=True, unique_for=0)(action)
    with pytest.warns(UserWarning, match="the task name is the key"):
        tasks.task("d", unique=True, unique_for=5)(action)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tasks.task("e", unique=True, unique_for=5, unique_key=lambda p: p)(action)
    assert tasks.get("e").key_for(7) == "1:e:7"
    assert tasks.get("d").key_for({"x": 1}) == "1:d"
    # The length prefix keeps tasks apart whatever their names contain.
    with pytest.warns(UserWarning, match="the task name is the key"):
        tasks.task("e:7", unique=True, unique_for=5)(action)
    assert tasks.get("e:7").key_for(None) != tasks.get("e").key_for(7)
    with pytest.raises(TypeError, match="must return a str or int"):
        tasks.get("e").key_for([1])


async def test_a_second_dispatch_of_a_queued_key_is_refused(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    gate = Gate()
    async with open_checked_runner(url, config(group), unique_registry(gate)) as runner:
        first = await runner.dispatch("charge", {"order": 1})
        with pytest.raises(trunner.TaskAlreadyDispatched) as info:
            await runner.dispatch("charge", {"order": 1})
        assert info.value.unique_keys == ["6:charge:1"]
        await runner.dispatch("charge", {"order": 2})  # another key
        assert raw.get(lock_key(keys, 1)) is not None
        await gate.wait_started(2)
        with pytest.raises(trunner.TaskAlreadyDispatched):
            await runner.dispatch("charge", {"order": 1})  # running: still locked
        gate.open.set()

        async def released() -> bool:
            return raw.get(lock_key(keys, 1)) is None and await runner.admin.pending_count() == 0

        await redis_state(released)
        again = await runner.dispatch("charge", {"order": 1})  # finished: free again
        assert again != first
        await gate.wait_started(3)
    assert sorted(p["order"] for p in gate.finished) == [1, 1, 2]


async def test_the_lock_is_kept_across_retries_and_released_on_final_failure(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    """The lock is held while the retry waits in the delayed set and while it runs; the
    second attempt waits for the test, so the check never depends on the backoff's time."""
    started: list[int] = []
    second = trio.Event()
    tasks = trunner.TaskRegistry()

    @tasks.task(
        unique=True,
        unique_key=lambda payload: payload["order"],
        unique_for=60.0,
        max_retry=1,
        retry_backoff=1.0,
    )
    async def charge(payload: Any) -> None:
        started.append(payload["order"])
        if len(started) == 2:
            await second.wait()
        raise RuntimeError("declined")

    async with open_checked_runner(url, config(group), tasks) as r:
        await r.dispatch("charge", {"order": 7})

        async def retry_scheduled_or_running() -> bool:
            return len(started) == 2 or await r.admin.delayed_count() == 1

        await redis_state(retry_scheduled_or_running)
        with pytest.raises(trunner.TaskAlreadyDispatched):
            await r.dispatch("charge", {"order": 7})  # waiting for its retry: still locked
        second.set()

        async def dead_lettered() -> bool:
            return await r.admin.dead_letter_count() == 1

        await redis_state(dead_lettered)
        assert started == [7, 7]
        assert raw.get(lock_key(keys, 7)) is None, "released when given up on"
        await r.dispatch("charge", {"order": 7})


async def test_the_lock_expires_after_unique_for(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    gate = Gate()
    async with open_checked_runner(url, config(group), unique_registry(gate, 0.3)) as runner:
        await runner.dispatch("charge", {"order": 3})
        await gate.wait_started(1)

        async def expired() -> bool:
            await trio.lowlevel.checkpoint()
            return raw.get(lock_key(keys, 3)) is None

        await redis_state(expired)  # a stuck task does not block its key for ever
        await runner.dispatch("charge", {"order": 3})
        gate.open.set()
        await gate.wait_started(2)


async def test_a_late_release_does_not_drop_a_newer_lock(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    """The first holder's lock expired and someone else locked the key since."""
    async with trunner.open_client(url, group) as client:
        broker = client._open_broker()
        await broker.ensure_group()
        await broker.enqueue_many([b"a", b"b", b"c"])
        raw.xreadgroup(group, "c", {keys.stream: ">"})
        first, second, third = [
            e["message_id"].decode() for e in raw.xpending_range(keys.stream, group, "-", "+", 10)
        ]
        owner = Owner("c")
        lock = lock_key(keys, 4)
        raw.set(lock, "newer-token")
        await broker.ack([first], {first: (lock, "old-token")}, owners={first: owner})
        assert raw.get(lock) == b"newer-token", "ack of the old holder kept it"
        await broker.dead_letter(second, [("reason", "r")], None, (lock, "old-token"), owner=owner)
        assert raw.get(lock) == b"newer-token", "dead-letter of the old holder kept it"
        await broker.ack([third], {third: (lock, "newer-token")}, owners={third: owner})
        assert raw.get(lock) is None


async def test_a_failed_enqueue_leaves_no_lock(url: str, group: str, keys: Keys, raw: Any) -> None:
    gate = Gate()
    async with trunner.open_client(url, group, tasks=unique_registry(gate)) as client:
        raw.set(keys.stream, "not a stream")
        with pytest.raises(trunner.errors.RedisCommandError, match="WRONGTYPE"):
            await client.dispatch("charge", {"order": 5})
        assert raw.get(lock_key(keys, 5)) is None
        raw.delete(keys.stream)
        await client.dispatch("charge", {"order": 5})
        assert raw.get(lock_key(keys, 5)) is not None


async def test_dispatch_many_reports_the_refused_and_enqueues_the_rest(
    url: str, group: str
) -> None:
    gate = Gate()
    async with trunner.open_client(url, group, tasks=unique_registry(gate)) as client:
        await client.dispatch("charge", {"order": 2})
        payloads = [{"order": 1}, {"order": 2}, {"order": 3}, {"order": 1}]
        with pytest.raises(trunner.TaskAlreadyDispatched) as info:
            await client.dispatch_many("charge", payloads)
        assert info.value.refused == [1, 3]
        assert [i is not None for i in info.value.ids] == [True, False, True, False]
        assert sorted(info.value.unique_keys) == ["6:charge:1", "6:charge:2"]
        assert await client.admin.queue_length() == 3
        assert await client.dispatch_many("plain", [1, 1]) != [], "plain tasks are not unique"


async def test_a_delayed_unique_task_locks_when_it_is_moved(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    gate = Gate()
    gate.open.set()
    async with open_checked_runner(url, config(group), unique_registry(gate)) as runner:
        await runner.dispatch_delayed("charge", {"order": 8}, 0.2)
        assert raw.get(lock_key(keys, 8)) is None, "no lock while it waits"
        await runner.dispatch("charge", {"order": 9})
        raw.set(lock_key(keys, 10), "held by someone", px=60_000)  # 10 is locked when due
        await runner.dispatch_delayed("charge", {"order": 10}, 0.2)
        await gate.wait_started(2)

        async def settled() -> bool:
            return (
                await runner.admin.delayed_count() == 0 and await runner.admin.pending_count() == 0
            )

        await redis_state(settled)
    assert sorted(p["order"] for p in gate.started) == [8, 9]
    assert runner.statistics().unique_dropped == 1
    assert raw.get(lock_key(keys, 10)) == b"held by someone"
    assert raw.get(lock_key(keys, 8)) is None, "released when it finished"


@pytest.mark.deadline(60)
async def test_concurrent_dispatches_in_two_processes_accept_exactly_one(
    redis_server: RedisServer, group: str
) -> None:
    process = spawn(redis_server.url, group, 25)
    try:
        assert process.stdin is not None
        assert process.stdout is not None
        line = await trio.to_thread.run_sync(process.stdout.readline)
        assert line.strip() == "ready"
        async with trunner.open_client(
            redis_server.url, group, tasks=registry(), max_connections=25
        ) as client:
            process.stdin.write("go\n")
            process.stdin.flush()
            mine = await dispatch_concurrently(client, 25)
            theirs = int(await trio.to_thread.run_sync(process.stdout.readline))
            assert await client.admin.queue_length() == 1
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
    assert mine + theirs == 1


async def test_cancelling_a_scheduled_retry_releases_the_lock(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    tasks = trunner.TaskRegistry()
    failed = trio.Event()

    @tasks.task(unique=True, unique_key=lambda p: p, unique_for=60, max_retry=1, retry_backoff=60)
    async def flaky(_: Any) -> None:
        failed.set()
        raise RuntimeError("later")

    async with open_checked_runner(url, config(group), tasks) as runner:
        task_id = await runner.dispatch("flaky", 1)
        await failed.wait()

        async def retry_scheduled() -> bool:
            return await runner.admin.delayed_count() == 1

        await redis_state(retry_scheduled)
        assert raw.get(lock_key(keys, 1, "flaky")) is not None
        assert await runner.cancel_delayed(task_id) is True
        assert raw.get(lock_key(keys, 1, "flaky")) is None
        await runner.dispatch("flaky", 1)  # free again


async def test_a_delayed_unique_key_with_a_line_break(url: str, group: str) -> None:
    gate = Gate()
    gate.open.set()
    tasks = unique_registry(gate)
    async with open_checked_runner(url, config(group), tasks) as runner:
        await runner.dispatch_delayed("charge", {"order": "a\nb"}, 0.05)
        await gate.wait_started(1)
    assert gate.started == [{"order": "a\nb"}]


@pytest.mark.deadline(20)
async def test_cron_ticks_of_a_unique_task_skip_while_one_runs(url: str, group: str) -> None:
    started = 0
    first = trio.Event()
    hold = trio.Event()
    tasks = trunner.TaskRegistry()

    async def report(_: Any) -> None:
        nonlocal started
        started += 1
        first.set()
        await hold.wait()

    with pytest.warns(UserWarning, match="the task name is the key"):
        tasks.task(unique=True, unique_for=60)(report)
    tasks.cron("* * * * * *", "report")  # every second
    async with open_checked_runner(url, config(group), tasks) as runner:
        await first.wait()
        cron = parts(runner).cron

        async def two_skipped() -> bool:  # ticks while the first run holds the key
            await trio.lowlevel.checkpoint()
            return cron.skipped >= 2

        await redis_state(two_skipped, poll=0.1)
        assert started == 1
        hold.set()
