"""A message's retries carry what it was dispatched with: the payload verbatim, and a size
that every runner of the group still reads."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import trio

import trunner
from trunner._wire.decode import decode_message
from trunner._wire.envelope import NO_SIZE_LIMIT, encode_message, reencode_for_retry

from ..conftest import config, redis_state


def test_a_retry_copies_the_stored_payload_verbatim() -> None:
    payload = (
        '{"big":1e400,"int":123456789012345678901234567890,"neg":-0.0,"s":"\\ud800","d":1,"d":2}'
    )
    raw = (
        '{"task":"t","payload":' + payload + ',"attempt":1,"enqueued_at":1.5,'
        '"unique_key":"1:t","unique_token":"x","unique_for":2.5,"extra":[1]}'
    ).encode()
    message = decode_message("1-0", [b"payload", raw])
    assert message.payload["big"] == float("inf")
    again = reencode_for_retry(message, 2, NO_SIZE_LIMIT)
    assert b'"payload":' + payload.encode() + b"," in again, "the JSON text, unchanged"
    retried = decode_message("2-0", [b"payload", again])
    assert retried.attempt == 2
    assert retried.task_id == "1-0"
    assert retried.unique_key == "1:t"
    assert json.loads(again)["unique_for"] == 2.5
    # Whitespace and member order of another producer's JSON do not matter.
    spaced = b'{ "attempt" : 3 , "payload" : [ 1e400 , 2 ] , "task" : "t" }'
    again = reencode_for_retry(decode_message("3-0", [b"payload", spaced]), 4, NO_SIZE_LIMIT)
    assert b'"payload":[ 1e400 , 2 ],' in again
    assert decode_message("4-0", [b"payload", again]).attempt == 4


async def test_a_payload_python_reads_but_does_not_write_is_retried_after_its_backoff(
    url: str, group: str, raw: Any
) -> None:
    """``1e400`` reads as ``inf``, which JSON cannot write: the retry copies the text."""
    seen: list[Any] = []
    done = trio.Event()
    tasks = trunner.TaskRegistry()

    @tasks.task(max_retry=2, retry_backoff=0.01)
    async def flaky(payload: Any) -> None:
        seen.append(payload)
        if len(seen) < 3:
            raise RuntimeError("not yet")
        done.set()

    # A reclaim delay far beyond the test's deadline: only the backoff can bring retries.
    cfg = config(group, reclaim_delay=600.0)
    async with trunner.open_runner(url, cfg, tasks) as runner:
        body = b'{"task":"flaky","payload":{"x":1e400,"n":[1,2]},"attempt":1,"enqueued_at":1.0}'
        raw.xadd(f"trunner:{{{group}}}:stream", {"payload": body})
        await done.wait()
        assert seen == [{"x": float("inf"), "n": [1, 2]}] * 3
        assert runner.statistics().retried == 2

        async def acknowledged() -> bool:
            return await runner.admin.pending_count() == 0

        await redis_state(acknowledged)
        assert await runner.admin.dead_letter_count() == 0


# -- a message at the size limit ------------------------------------------------------------

LIMIT = 600


async def dispatch_at_the_limit(url: str, group: str, raw: Any) -> str:
    """Dispatch an ``edge`` message of exactly LIMIT bytes, the largest accepted."""
    stream = f"trunner:{{{group}}}:stream"
    async with trunner.open_client(url, group, max_payload_bytes=LIMIT) as client:
        with pytest.raises(trunner.PayloadTooLarge):
            await client.dispatch("edge", "x" * LIMIT)
        for _ in range(20):  # the length of enqueued_at may change between two calls
            now = time.time()
            base = len(encode_message("edge", "", enqueued_at=now, max_bytes=NO_SIZE_LIMIT))
            try:
                message_id = await client.dispatch("edge", "x" * (LIMIT - base))
            except trunner.PayloadTooLarge:
                continue
            [(_, fields)] = raw.xrange(stream, message_id, message_id)
            if len(fields[b"payload"]) == LIMIT:
                return message_id
            raw.xdel(stream, message_id)
    pytest.fail("could not dispatch a message of exactly LIMIT bytes")


def edge_registry(runs: list[int], failures: int, done: trio.Event) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.task(max_retry=3, retry_backoff=0.01)
    async def edge(payload: Any) -> None:
        runs.append(trunner.current_message().attempt)
        if len(runs) <= failures:
            raise RuntimeError("again")
        done.set()

    return tasks


async def test_a_message_at_the_size_limit_keeps_all_its_retries(
    url: str, group: str, raw: Any
) -> None:
    await dispatch_at_the_limit(url, group, raw)
    runs: list[int] = []
    done = trio.Event()
    cfg = config(group, max_payload_bytes=LIMIT)
    async with trunner.open_runner(url, cfg, edge_registry(runs, 3, done)) as runner:
        await done.wait()
        assert runs == [1, 2, 3, 4]
        assert await runner.admin.dead_letter_count() == 0


async def test_a_dead_letter_at_the_size_limit_is_replayed_and_runs(
    url: str, group: str, raw: Any
) -> None:
    await dispatch_at_the_limit(url, group, raw)
    runs: list[int] = []
    done = trio.Event()
    cfg = config(group, max_payload_bytes=LIMIT)
    async with trunner.open_runner(url, cfg, edge_registry(runs, 4, done)) as runner:

        async def dead() -> bool:
            return await runner.admin.dead_letter_count() == 1

        await redis_state(dead)
        assert runs == [1, 2, 3, 4]
        async with trunner.open_client(url, group, max_payload_bytes=LIMIT) as client:
            replayed = await client.admin.replay_dead_letters()
        assert len(replayed.replayed) == 1
        await done.wait()
        assert runs == [1, 2, 3, 4, 1]
