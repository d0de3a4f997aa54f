"""Seeding a group's Redis keys directly, as runners would have left them: many dead
letters, queued messages and delayed tasks in a few pipelined round trips (for the
dashboard's tests and its benchmark)."""

from __future__ import annotations

import time
from typing import Any

from trunner._wire.envelope import NO_SIZE_LIMIT, encode_message
from trunner.keys import Keys

BATCH = 5000


def message(task: str, payload: Any = None, *, task_id: str | None = None) -> bytes:
    return encode_message(
        task, payload, enqueued_at=time.time(), task_id=task_id, max_bytes=NO_SIZE_LIMIT
    )


def dead_fields(task: str, n: int, *, error: str = "", reason: str = "") -> dict[str, Any]:
    """The fields of one dead letter, as dead_letter.lua writes them."""
    return {
        "task": task,
        "reason": reason or "max retries exceeded",
        "error": error or f"RuntimeError: failure {n}",
        "cause": "",
        "attempt": 3,
        "failed_at": int(time.time() * 1000),
        "task_id": f"{n}-0",
        "message_id": f"{n}-0",
        "consumer": "seeded",
        "payload": message(task, {"n": n}),
    }


def seed_dead(raw: Any, keys: Keys, count: int, task: str = "job", **fields: str) -> list[str]:
    """Add ``count`` dead letters of ``task``; their ids, oldest first."""
    ids: list[str] = []
    for start in range(0, count, BATCH):
        pipe = raw.pipeline(transaction=False)
        for n in range(start, min(count, start + BATCH)):
            pipe.xadd(keys.dead, dead_fields(task, n, **fields))
        ids += [i.decode() if isinstance(i, bytes) else i for i in pipe.execute()]
    return ids


def seed_queued(raw: Any, keys: Keys, count: int, task: str = "job") -> None:
    """Add ``count`` messages of ``task`` to the group's stream."""
    for start in range(0, count, BATCH):
        pipe = raw.pipeline(transaction=False)
        for n in range(start, min(count, start + BATCH)):
            pipe.xadd(keys.stream, {"payload": message(task, {"n": n})})
        pipe.execute()


def seed_delayed(raw: Any, keys: Keys, task_id: str, due: float, data: bytes) -> None:
    """One delayed task, as schedule.lua writes it (without the wake-up)."""
    raw.zadd(keys.delayed, {task_id: int(due * 1000)})
    raw.hset(keys.delayed_messages, task_id, data)
