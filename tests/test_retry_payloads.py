"""A message's retries carry what it was dispatched with: the payload verbatim, and a size
that every runner of the group still reads."""

from __future__ import annotations

import json
from typing import Any

import trio

import trunner
from trunner.message import NO_SIZE_LIMIT, decode_message, reencode_for_retry

from .conftest import config, redis_state


def test_a_retry_copies_the_stored_payload_verbatim() -> None:
    payload = '{"big":1e400,"int":123456789012345678901234567890,"neg":-0.0,"s":"\\ud800","d":1,"d":2}'
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
            return await runner.pending_count() == 0

        await redis_state(acknowledged)
        assert await runner.dead_letter_count() == 0
