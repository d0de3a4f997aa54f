"""Task handles across processes, on a real redis-server: cancelling a task another process
runs, cancelling one a killed process held, an outcome that is written only with its
acknowledgement (a process killed between the two), and waiters that outlive a dropped
subscription.

Crosses handles.py, cancellation.py, acks.py and ack.lua, the fetcher's reclaim, and
worker processes (tests/processes/worker_process.py: ``kept``, ``block_kept``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
import trio

import trunner
from trunner import CancelOutcome, TaskState
from trunner.keys import Keys

from ..conftest import Gate, config, open_checked_runner, redis_state
from ..support.servers import RedisServer
from ..support.workers import Worker, read_log


def logged(log: Path, event: str) -> list[Any]:
    return [payload for _, e, payload in read_log(log) if e == event]


async def _logged_async(log: Path, event: str) -> bool:
    await trio.lowlevel.checkpoint()
    return bool(logged(log, event))


async def _running(handle: trunner.TaskHandle[Any]) -> bool:
    return (await handle.status()).state is TaskState.RUNNING


@pytest.mark.deadline(60)
async def test_a_task_running_in_another_process_is_cancelled_there(
    redis_server: RedisServer, group: str, workers: list[Worker], tmp_path: Path
) -> None:
    log = tmp_path / "log"
    worker = Worker(redis_server.url, group, log, {})
    workers.append(worker)
    await worker.ready()
    async with trunner.open_client(redis_server.url, group) as client:
        handle = await client.dispatch("block_kept", "job")
        # its body runs (RUNNING is recorded as the attempt starts, before the body: a
        # cancel in between would end it without the body's "cancelled" line)
        await redis_state(lambda: _logged_async(log, "started"))
        start = trio.current_time()
        assert await handle.cancel(wait=True) is CancelOutcome.CANCELLING
        took = trio.current_time() - start
        with pytest.raises(trunner.TaskCancelled):
            await handle.result()
        status = await handle.status()
        assert status.state is TaskState.CANCELLED
        assert status.attempt == 1
        assert status.instance is not None
        assert f":{worker.process.pid}:" in status.instance
        assert await client.admin.pending_count() == 0
    assert worker.terminate() == 0
    assert logged(log, "cancelled") == ["job"]
    assert took < 10  # event-driven (milliseconds); only a lost announcement takes longer


@pytest.mark.deadline(60)
async def test_a_task_a_killed_process_held_is_dropped_by_the_instance_that_reclaims_it(
    redis_server: RedisServer, group: str, workers: list[Worker], tmp_path: Path, keys: Keys
) -> None:
    log = tmp_path / "log"
    victim = Worker(redis_server.url, group, log, {})
    workers.append(victim)
    await victim.ready()
    async with trunner.open_client(redis_server.url, group) as client:
        handle = await client.dispatch("block_kept", "orphan")
        await redis_state(lambda: _running(handle))
        victim.kill()
        assert await handle.cancel() is CancelOutcome.CANCELLING  # the mark holds

        ran: list[Any] = []
        tasks = trunner.TaskRegistry()

        @tasks.task(keep_result=600, max_retry=3)
        async def block_kept(payload: Any) -> None:
            ran.append(payload)

        cfg = config(group, reclaim_delay=0.3, reclaim_interval=0.05)
        async with open_checked_runner(redis_server.url, cfg, tasks) as runner:
            with pytest.raises(trunner.TaskCancelled):
                await handle.result()
            assert runner.statistics().cancelled == 1
            assert await client.admin.pending_count() == 0
        assert ran == []
        raw = redis.Redis.from_url(redis_server.url)
        try:
            assert raw.hlen(keys.cancelled) == 0
        finally:
            raw.close()


@pytest.mark.deadline(60)
async def test_an_outcome_is_written_only_with_its_acknowledgement(
    redis_server: RedisServer, group: str, workers: list[Worker], tmp_path: Path
) -> None:
    """The worker finishes the task, and is killed before its acknowledgement (held back by
    long flush intervals) went out: its result was never visible, the task runs again,
    and the one outcome is the second run's."""
    log = tmp_path / "log"
    flush = {"ack_flush_interval": 600.0, "result_flush_interval": 600.0}
    options = {"config": {**flush, "ack_batch_size": 1000}}
    victim = Worker(redis_server.url, group, log, options)
    workers.append(victim)
    await victim.ready()
    async with trunner.open_client(redis_server.url, group) as client:
        handle = await client.dispatch("kept", "once")

        async def finished() -> bool:
            await trio.lowlevel.checkpoint()
            return logged(log, "finished") == ["once"]

        await redis_state(finished)
        assert (await handle.status()).state is not TaskState.SUCCEEDED
        victim.kill()
        with pytest.raises(trio.TooSlowError):
            await handle.result(timeout=0.2)  # nobody runs it now

        tasks = trunner.TaskRegistry()

        @tasks.task(keep_result=600, max_retry=1)
        async def kept(payload: Any) -> dict[str, Any]:
            return {"pid": "reclaimer", "payload": payload}

        cfg = config(group, reclaim_delay=0.3, reclaim_interval=0.05)
        async with open_checked_runner(redis_server.url, cfg, tasks):
            assert await handle.result() == {"pid": "reclaimer", "payload": "once"}
        status = await handle.status()
        assert status.state is TaskState.SUCCEEDED
        assert status.attempt == 1, "a crash redelivery runs the same attempt again"


@pytest.mark.deadline(60)
async def test_a_waiter_outlives_a_dropped_subscription(
    redis_server: RedisServer, group: str
) -> None:
    gate = Gate()
    tasks = trunner.TaskRegistry()

    @tasks.task(keep_result=60)
    async def gated(payload: Any) -> str:
        gate.enter(payload)
        await gate.open.wait()
        return "through"

    async with open_checked_runner(redis_server.url, config(group), tasks) as runner:
        async with trunner.open_client(redis_server.url, group) as client:
            handle = await client.dispatch("gated", 1)
            await gate.wait_started()
            results: list[str] = []
            done = trio.Event()

            async def wait() -> None:
                results.append(await client.handle(str(handle)).result())
                done.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait)
                await client._open_waiters().subscribed()
                raw = redis.Redis.from_url(redis_server.url)
                try:
                    assert raw.client_kill_filter(_type="pubsub") >= 1
                finally:
                    raw.close()
                gate.open.set()  # the outcome may come while nobody listens
                await done.wait()
            assert results == ["through"]
        assert await (await runner.dispatch("gated", 2)).result() == "through"
