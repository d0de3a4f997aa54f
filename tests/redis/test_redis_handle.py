"""The Redis handle for task code: automatic pipelining, per-caller replies and errors."""

from __future__ import annotations

import random
from typing import Any

import pytest
import trio

import trunner

from ..conftest import config, open_checked_runner


@pytest.fixture
async def handle(url: str) -> Any:
    async with trunner.open_redis(url) as redis:
        yield redis


async def test_concurrent_commands_share_round_trips_and_get_their_own_replies(
    handle: trunner.RedisHandle, group: str
) -> None:
    own: dict[int, int] = {}
    shared: list[int] = []

    async def task(i: int) -> None:
        own[i] = await handle.incr(f"{group}:own:{i}", i + 1)
        shared.append(await handle.incr(f"{group}:shared"))

    async with trio.open_nursery() as nursery:
        for i in range(1000):
            nursery.start_soon(task, i)
    assert own == {i: i + 1 for i in range(1000)}, "each caller got its own reply"
    assert sorted(shared) == list(range(1, 1001))
    assert handle.commands == 2000
    assert handle.batches <= 20, f"{handle.batches} round trips for 2000 commands"


async def test_an_error_goes_to_its_caller_only(handle: trunner.RedisHandle, group: str) -> None:
    await handle.rpush(f"{group}:list", "x")
    outcomes: dict[int, Any] = {}

    async def task(i: int) -> None:
        key = f"{group}:list" if i % 10 == 0 else f"{group}:n:{i}"
        try:
            outcomes[i] = await handle.incr(key)
        except trunner.errors.RedisCommandError as exc:
            outcomes[i] = exc

    async with trio.open_nursery() as nursery:
        for i in range(200):
            nursery.start_soon(task, i)
    for i, result in outcomes.items():
        if i % 10 == 0:
            assert isinstance(result, trunner.errors.RedisCommandError)
            assert "WRONGTYPE" in str(result)
        else:
            assert result == 1
    assert handle.batches < 200


async def test_cancelled_callers_never_get_another_callers_reply(
    handle: trunner.RedisHandle, group: str
) -> None:
    rng = random.Random(7)
    wrong: list[tuple[str, Any]] = []
    answered = 0

    async def task(i: int) -> None:
        nonlocal answered
        key, value = f"{group}:k:{i}", f"v{i}"
        await handle.set(key, value)
        for attempt in range(5):
            # Random deadlines, and some calls without one, so that some answers arrive.
            deadline = float("inf") if attempt == 0 else rng.uniform(0, 0.03)
            with trio.move_on_after(deadline):
                reply = await handle.get(key)
                answered += 1
                if reply != value.encode():
                    wrong.append((key, reply))

    async with trio.open_nursery() as nursery:
        for i in range(300):
            nursery.start_soon(task, i)
    assert wrong == []
    assert answered > 0
    assert await handle.get(f"{group}:k:7") == b"v7", "the handle still works"


async def test_blocking_commands_do_not_hold_up_a_batch(
    handle: trunner.RedisHandle, group: str, url: str
) -> None:
    if url.startswith("memory://"):
        pytest.skip("the in-process server does not block")
    async with trio.open_nursery() as nursery:
        blocked = trio.Event()

        async def block() -> None:
            await handle.execute("BLPOP", f"{group}:empty", 1)
            blocked.set()

        nursery.start_soon(block)
        await trio.sleep(0.05)
        with trio.fail_after(0.5):  # well within the BLPOP's second
            assert await handle.incr(f"{group}:n") == 1
        assert not blocked.is_set()


async def test_pipelines_and_transactions(handle: trunner.RedisHandle, group: str) -> None:
    async with handle.pipeline() as pipe:
        pipe.add("SET", f"{group}:a", 1).add("INCR", f"{group}:a").add("LPUSH", f"{group}:a", "x")
    ok, two, error = pipe.results
    assert (ok, two) == (b"OK", 2)
    assert isinstance(error, trunner.errors.RedisCommandError)
    async with handle.pipeline(transaction=True) as tx:
        tx.add("INCR", f"{group}:t").add("INCR", f"{group}:t")
    assert tx.results == [1, 2]
    assert await handle.eval("return redis.call('GET', KEYS[1])", [f"{group}:t"]) == b"2"
    # A command failing when the transaction runs: its error in place, with Redis's text,
    # the same on every transport.
    await handle.rpush(f"{group}:list", "x")
    async with handle.pipeline(transaction=True) as tx:
        tx.add("INCR", f"{group}:t").add("INCR", f"{group}:list").add("INCR", f"{group}:t")
    three, error, four = tx.results
    assert (three, four) == (3, 4)
    assert isinstance(error, trunner.errors.RedisCommandError)
    assert "WRONGTYPE" in str(error)


async def test_concurrent_pipelines_share_round_trips_and_stay_whole(
    handle: trunner.RedisHandle, group: str
) -> None:
    """Each task's pipeline block goes in the shared batch, its commands next to each other
    and in order (an INCR right after a SET NX of the same key sees it), with its own
    replies and its own errors."""
    await handle.rpush(f"{group}:list", "x")
    results: dict[int, list[Any]] = {}

    async def task(i: int) -> None:
        key = f"{group}:p:{i}"
        async with handle.pipeline() as pipe:
            pipe.add("SET", key, i, "NX", "PX", 60000).add("INCR", key)
            pipe.add("INCR", f"{group}:list" if i % 7 == 0 else f"{group}:count")
        results[i] = pipe.results

    before, sent_before = handle.batches, handle.commands
    async with trio.open_nursery() as nursery:
        for i in range(300):
            nursery.start_soon(task, i)
    assert handle.commands - sent_before == 900, "the pipelines went through the batches"
    counts = []
    for i, (ok, incremented, third) in results.items():
        assert (ok, incremented) == (b"OK", i + 1)
        if i % 7 == 0:
            assert isinstance(third, trunner.errors.RedisCommandError)
            assert "WRONGTYPE" in str(third)
        else:
            counts.append(third)
    assert sorted(counts) == list(range(1, len(counts) + 1))
    assert handle.batches - before <= 10, f"{handle.batches - before} round trips"


async def test_a_pipeline_longer_than_a_batch_is_sent_whole(
    handle: trunner.RedisHandle, group: str
) -> None:
    key = f"{group}:long"
    replies: list[Any] = []

    async def small() -> None:
        replies.append(await handle.incr(f"{group}:small"))

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(small)
        async with handle.pipeline() as pipe:
            for _ in range(2500):
                pipe.add("INCR", key)
    assert pipe.results == list(range(1, 2501))
    assert sorted(replies) == [1, 2, 3, 4, 5]


async def test_set_refuses_two_expiries(handle: trunner.RedisHandle, group: str) -> None:
    with pytest.raises(ValueError, match="not both"):
        await handle.set(f"{group}:k", 1, ex=1.0, px=1000)


async def test_typed_commands(handle: trunner.RedisHandle, group: str) -> None:
    key = f"{group}:typed"
    assert await handle.set(key, "v", nx=True) is True
    assert await handle.set(key, "w", nx=True) is False
    assert await handle.get(key) == b"v"
    assert await handle.expire(key, 10) is True
    ttl = await handle.ttl(key)
    assert ttl is not None
    assert 9 < ttl <= 10
    assert await handle.hset(f"{key}:h", {"a": 1, "b": "x"}) == 2
    assert await handle.hgetall(f"{key}:h") == {b"a": b"1", b"b": b"x"}
    assert await handle.hincrby(f"{key}:h", "a", 2) == 3
    assert await handle.sadd(f"{key}:s", "p", "q") == 2
    assert await handle.smembers(f"{key}:s") == {b"p", b"q"}
    assert await handle.zadd(f"{key}:z", {"m": 2.0, "n": 1.0}) == 2
    assert await handle.zrange(f"{key}:z", 0, -1) == [b"n", b"m"]
    assert await handle.delete(key, f"{key}:h") == 2
    assert await handle.exists(key) == 0


async def test_tasks_use_the_runners_handle(url: str, group: str) -> None:
    tasks = trunner.TaskRegistry()
    done = trio.Event()
    count = 0

    @tasks.task
    async def count_visit(page: str) -> None:
        nonlocal count
        redis = trunner.current_runner().redis
        await redis.set(f"{group}:seen:{page}", 1, nx=True, ex=60)
        await redis.incr(f"{group}:visits")
        count += 1
        if count == 200:
            done.set()

    async with open_checked_runner(url, config(group, num_workers=100), tasks) as runner:
        await runner.dispatch_many("count_visit", [f"p{i % 50}" for i in range(200)])
        await done.wait()
        assert await runner.redis.get(f"{group}:visits") == b"200"
        assert runner.redis.batches < runner.redis.commands / 2, "commands were batched"
    with pytest.raises(trunner.errors.RunnerNotRunning):
        await runner.redis.get(f"{group}:visits")  # the handle closed with the runner


async def test_a_closed_handle_refuses_commands(url: str) -> None:
    async with trunner.open_redis(url) as redis:
        pass
    with pytest.raises(trunner.errors.RunnerNotRunning):
        await redis.get("x")
    for transaction in (False, True):
        with pytest.raises(trunner.errors.RunnerNotRunning):
            async with redis.pipeline(transaction=transaction) as pipe:
                pipe.add("INCR", "x")
