"""Fan-out across processes on a real redis-server: three groups read one queue, one
worker process each; every group runs every message exactly once while nothing crashes,
and at least once across a SIGKILL of one group's worker. Crosses keys.py (a group's keys
apart from its queue's), ensure_group.lua, ack.lua (no deletion on a shared stream), the
fetcher's reclaim, and the janitor's trim of a shared queue.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio

import trunner
from trunner.keys import Keys

from ..conftest import raw_client, redis_state
from ..support.servers import RedisServer
from ..support.workers import Worker, read_log

GROUPS = ("audit", "email", "billing")
TASKS = 400


def ran(log: Path) -> Counter[Any]:
    return Counter(p for _, e, p in read_log(log) if e == "ran")


@pytest.mark.deadline(120)
async def test_three_groups_each_run_every_message_across_a_sigkill(
    redis_server: RedisServer, group: str, workers: list[Worker], tmp_path: Path
) -> None:
    queue = f"q-{group}"
    options: dict[str, Any] = {
        "slow_seconds": 0.05,  # 10 at a time: a group runs the 400 in about 2 s
        "config": {"queue": queue, "reclaim_delay": 2.0, "num_workers": 10},
    }
    logs = {name: tmp_path / name for name in GROUPS}
    by_group = {name: Worker(redis_server.url, name, logs[name], options) for name in GROUPS}
    workers.extend(by_group.values())
    for worker in workers:
        await worker.ready()
    async with trunner.open_client(redis_server.url, queue) as client:
        await client.dispatch_many("sturdy", list(range(TASKS)))

        async def email_ran_some() -> bool:
            await trio.lowlevel.checkpoint()
            return len(ran(logs["email"])) >= TASKS // 20

        await redis_state(email_ran_some)
        by_group["email"].kill()  # mid-way: its pending messages wait for a reclaim
        assert len(ran(logs["email"])) < TASKS, "killed before it ran them all"
        again = Worker(redis_server.url, "email", logs["email"], options)
        workers.append(again)
        await again.ready()

        async def every_group_ran_all() -> bool:
            await trio.lowlevel.checkpoint()
            return all(set(ran(logs[name])) == set(range(TASKS)) for name in GROUPS)

        await redis_state(every_group_ran_all)
        for name in ("audit", "billing"):
            counts = ran(logs[name])
            assert max(counts.values()) == 1, f"{name} ran a message twice without a crash"
        assert set(ran(logs["email"])) == set(range(TASKS))  # at least once each

        # Every group finished every message: the leaders trim them from the stream (a
        # stream keeps its last node: Redis trims whole nodes of up to 100 entries).
        raw = raw_client(redis_server.url)
        stream = Keys("trunner", "audit", queue).stream

        async def trimmed() -> bool:
            await trio.lowlevel.checkpoint()
            return bool(raw.xlen(stream) <= 100)

        await redis_state(trimmed)
        raw.close()
    for worker in (by_group["audit"], by_group["billing"], again):
        assert worker.terminate() == 0
