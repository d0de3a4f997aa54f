"""A replayed dead letter of a unique task takes its key's lock, as a dispatch does.

Before, a replay re-enqueued the message without the lock: while it ran, a second
dispatch of the same key was accepted (two concurrent runs of one key).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import trio

import trunner
from trunner._wire.envelope import encode_message
from trunner.message import DEFAULT_UNIQUE_FOR

from ..conftest import config, redis_state, run_python
from ..support.servers import RedisServer


class Gate:
    def __init__(self) -> None:
        self.started = 0
        self.open = trio.Event()
        self.fail = True
        self._lot = trio.lowlevel.ParkingLot()

    async def wait_started(self, count: int) -> None:
        while self.started < count:
            await self._lot.park()


def registry(gate: Gate) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.task(unique=True, unique_key=lambda p: p["order"], unique_for=30.0)
    async def charge(_: Any) -> None:
        gate.started += 1
        gate._lot.unpark_all()
        if gate.fail:
            raise RuntimeError("declined")
        await gate.open.wait()

    return tasks


def lock_key(group: str, order: int) -> str:
    return f"trunner:{{{group}}}:unique:6:charge:{order}"


async def dead_letter_one(runner: trunner.Runner, gate: Gate) -> None:
    await runner.dispatch("charge", {"order": 1})

    async def dead() -> bool:
        return await runner.admin.dead_letter_count() == 1

    await redis_state(dead)
    gate.fail = False


async def test_a_replayed_unique_task_holds_its_lock_while_it_runs(
    url: str, group: str, raw: Any
) -> None:
    gate = Gate()
    async with trunner.open_runner(url, config(group), registry(gate)) as runner:
        await dead_letter_one(runner, gate)
        assert raw.get(lock_key(group, 1)) is None, "released when it was given up on"
        result = await runner.admin.replay_dead_letters()
        assert len(result.replayed) == 1
        assert result.skipped == {}
        await gate.wait_started(2)
        with pytest.raises(trunner.TaskAlreadyDispatched):
            await runner.dispatch("charge", {"order": 1})  # running: locked
        ttl = raw.pttl(lock_key(group, 1))
        assert 0 < ttl <= 30_000, "the task's unique_for, carried by the message"
        gate.open.set()

        async def released() -> bool:
            return raw.get(lock_key(group, 1)) is None and await runner.admin.pending_count() == 0

        await redis_state(released)
        await runner.dispatch("charge", {"order": 1})  # finished: free again


async def test_a_dead_letter_whose_key_is_locked_stays_and_says_why(
    url: str, group: str, raw: Any
) -> None:
    gate = Gate()
    async with trunner.open_runner(url, config(group), registry(gate)) as runner:
        await dead_letter_one(runner, gate)
        [letter] = await runner.admin.dead_letters()
        await runner.dispatch("charge", {"order": 1})  # the key is taken again
        await gate.wait_started(2)
        new, skipped = await runner.admin.replay_dead_letters([letter.id, "1-1"])
        assert new == []
        assert sorted(skipped) == sorted([letter.id, "1-1"])
        result = await runner.admin.replay_dead_letters([letter.id])
        assert "'6:charge:1' is locked" in result.skipped[letter.id]
        assert await runner.admin.dead_letter_count() == 1, "it stays"
        gate.open.set()

        async def released() -> bool:
            return raw.get(lock_key(group, 1)) is None

        await redis_state(released)
        assert len((await runner.admin.replay_dead_letters()).replayed) == 1
        await gate.wait_started(3)


async def test_two_dead_letters_of_one_key_replay_one_at_a_time(
    url: str, group: str, raw: Any
) -> None:
    gate = Gate()
    async with trunner.open_runner(url, config(group), registry(gate)) as runner:
        await dead_letter_one(runner, gate)
        gate.fail = True
        await runner.dispatch("charge", {"order": 1})

        async def two_dead() -> bool:
            return await runner.admin.dead_letter_count() == 2

        await redis_state(two_dead)
        gate.fail = False
        result = await runner.admin.replay_dead_letters()
        assert len(result.replayed) == 1
        assert len(result.skipped) == 1
        assert "is locked" in next(iter(result.skipped.values()))
        gate.open.set()


async def test_old_messages_without_unique_for_replay_with_the_registry_or_the_default(
    url: str, group: str, raw: Any
) -> None:
    """Messages written before they carried ``unique_for`` still replay, locked."""
    old = encode_message(
        "charge",
        {"order": 5},
        enqueued_at=time.time(),
        unique_key="6:charge:5",
        unique_token="tok",
        max_bytes=10_000,
    )
    assert b"unique_for" not in old
    dead = f"trunner:{{{group}}}:dead"
    fields = {"payload": old, "reason": "max retries exceeded", "task": "charge"}
    async with trunner.open_client(url, group) as anonymous:  # no registry: the default
        raw.xadd(dead, fields)
        assert len((await anonymous.admin.replay_dead_letters()).replayed) == 1
    ttl = raw.pttl(lock_key(group, 5))
    assert DEFAULT_UNIQUE_FOR * 1000 - 60_000 < ttl <= DEFAULT_UNIQUE_FOR * 1000
    assert raw.get(lock_key(group, 5)) == b"tok", "the message's own token: its ack frees it"
    raw.delete(lock_key(group, 5))
    async with trunner.open_client(url, group, tasks=registry(Gate())) as client:
        raw.xadd(dead, fields)
        assert len((await client.admin.replay_dead_letters()).replayed) == 1
    assert 0 < raw.pttl(lock_key(group, 5)) <= 30_000, "the registry's unique_for"


async def test_dispatched_unique_messages_carry_unique_for(url: str, group: str, raw: Any) -> None:
    async with trunner.open_client(url, group, tasks=registry(Gate())) as client:
        await client.dispatch("charge", {"order": 9})
        await client.dispatch_delayed("charge", {"order": 10}, 60)
    [(_, fields)] = raw.xrange(f"trunner:{{{group}}}:stream")
    assert json.loads(fields[b"payload"])["unique_for"] == 30.0
    [delayed] = raw.hvals(f"trunner:{{{group}}}:delayed:messages")
    assert json.loads(delayed)["unique_for"] == 30.0


async def test_the_cli_says_why_a_dead_letter_was_not_replayed(
    redis_server: RedisServer, group: str
) -> None:
    gate = Gate()
    url = redis_server.url
    async with trunner.open_runner(url, config(group), registry(gate)) as runner:
        await dead_letter_one(runner, gate)
        [letter] = await runner.admin.dead_letters()
        await runner.dispatch("charge", {"order": 1})
        await gate.wait_started(2)
        done = await trio.to_thread.run_sync(
            lambda: run_python("-m", "trunner", "dead-letter", "replay", group, "--redis", url)
        )
        assert done.returncode == 1, "nothing replayed"
        assert "replayed 0 of 1 dead letters" in done.stdout
        assert f"not replayed {letter.id}: its unique key '6:charge:1' is locked" in done.stdout
        done = await trio.to_thread.run_sync(
            lambda: run_python(
                "-m", "trunner", "dead-letter", "replay", group, "--json", "--redis", url
            )
        )
        assert json.loads(done.stdout)["skipped"][letter.id].startswith("its unique key")
        gate.open.set()
