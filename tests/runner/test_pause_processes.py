"""Pausing a group of runner processes on a real redis-server: every instance stops
fetching, a process started while the group is paused stays paused, and every one fetches
again on resume. Crosses _engine/pausing.py, pause.lua/resume.lua, the cancel channel across
connections, and worker processes (tests/processes/worker_process.py, ``watch_pause``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

import trunner

from ..conftest import redis_state
from ..support.servers import RedisServer
from ..support.workers import Worker, read_log


def pids(log: Path, event: str) -> list[int]:
    return sorted(pid for pid, e, _ in read_log(log) if e == event)


async def logged(log: Path, event: str, expected: list[int]) -> None:
    async def seen() -> bool:
        await trio.lowlevel.checkpoint()
        return pids(log, event) == expected

    await redis_state(seen)


@pytest.mark.deadline(90)
async def test_every_instance_stops_fetching_and_fetches_again_on_resume(
    redis_server: RedisServer, group: str, workers: list[Worker], tmp_path: Path
) -> None:
    log = tmp_path / "log"
    options: dict[str, Any] = {"watch_pause": True}
    for _ in range(3):
        workers.append(Worker(redis_server.url, group, log, options))
    for worker in workers:
        await worker.ready()
    every = sorted(w.process.pid for w in workers)
    async with trunner.open_client(redis_server.url, group) as client:
        assert await client.admin.pause() is True
        await logged(log, "paused", every)  # each one's fetch loops have stopped
        await client.dispatch_many("record", range(30))
        late = Worker(redis_server.url, group, log, options)
        workers.append(late)
        await late.ready()
        await logged(log, "paused", sorted([*every, late.process.pid]))
        # Every instance heard of the pause before these were dispatched: none runs one.
        assert pids(log, "ran") == []
        assert await client.admin.pending_count() == 0
        assert await client.admin.queue_length() == 30
        assert await client.admin.resume() is True
        everyone = sorted(w.process.pid for w in workers)
        await logged(log, "resumed", everyone)

        async def all_ran() -> bool:
            await trio.lowlevel.checkpoint()
            return sorted(p for _, e, p in read_log(log) if e == "ran") == list(range(30))

        await redis_state(all_ran)
    for worker in workers:
        assert worker.terminate() == 0
