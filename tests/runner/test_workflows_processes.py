"""Workflows across real processes on a real redis-server: a worker SIGKILLed while it
holds a chain's step or a chord's children, the workflow completed by another instance
with the callback run exactly once; a DAG's join started once when its parents end at
the same moment on two processes; and workflows dispatched from the asyncio and the
synchronous clients to a worker process (tests/processes/worker_process.py)."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

import pytest
import trio

import trunner
import trunner.aio
import trunner.sync
from trunner import workflows as wf
from trunner.workflows import chain, chord, step

from ..conftest import config, open_checked_runner, redis_state
from ..support.servers import RedisServer
from ..support.workers import Worker, read_log


async def _started(log: Path, count: int) -> bool:
    await trio.lowlevel.checkpoint()
    return len([e for _, e, _ in read_log(log) if e == "started"]) >= count


async def _lingering_worker(url: str, group: str, workers: list[Worker], log: Path) -> Worker:
    """A worker process whose ``lingering`` steps run until it is killed, ready."""
    victim = Worker(url, group, log, {"linger": True})
    workers.append(victim)
    await victim.ready()
    return victim


def _finishing_tasks(ran: list[tuple[str, Any]]) -> trunner.TaskRegistry:
    """The tasks of the instance that finishes what the killed one held."""
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def lingering(payload: Any) -> Any:
        ran.append(("lingering", payload))
        return payload

    @tasks.task
    async def merge(parts: list[Any]) -> list[Any]:
        ran.append(("merge", parts))
        return sorted(parts)

    return tasks


@pytest.mark.deadline(90)
async def test_a_chain_survives_the_sigkill_of_the_worker_running_its_step(
    redis_server: RedisServer, group: str, workers: list[Worker], tmp_path: Path
) -> None:
    log = tmp_path / "log"
    victim = await _lingering_worker(redis_server.url, group, workers, log)
    async with trunner.open_client(redis_server.url, group) as client:
        workflow = chain(step("lingering", "first"), step("lingering"), step("merge", [3, 1]))
        handle = await client.dispatch(workflow)
        await redis_state(lambda: _started(log, 1))
        victim.kill()  # SIGKILL, holding step 0

        ran: list[tuple[str, Any]] = []
        cfg = config(group, reclaim_delay=0.3, reclaim_interval=0.05)
        async with open_checked_runner(redis_server.url, cfg, _finishing_tasks(ran)):
            assert await handle.result(timeout=60) == [1, 3]
            status = await handle.status()
    assert ran == [("lingering", "first"), ("lingering", "first"), ("merge", [3, 1])]
    assert (status.succeeded, status.failed, status.live) == (3, 0, 0)


@pytest.mark.deadline(90)
async def test_a_chords_callback_runs_once_after_a_sigkill_in_its_fan_in(
    redis_server: RedisServer, group: str, workers: list[Worker], tmp_path: Path
) -> None:
    """The killed worker holds two children (it runs two at a time) while this process's
    runner ends the eighteen others, each end counted in the fan-in; then the two are
    reclaimed and end here too: the callback starts once, with every result in order."""
    log = tmp_path / "log"
    victim = Worker(redis_server.url, group, log, {"linger": True, "config": {"num_workers": 2}})
    workers.append(victim)
    await victim.ready()
    ran: list[tuple[str, Any]] = []
    cfg = config(group, reclaim_delay=0.3, reclaim_interval=0.05)
    async with trunner.open_client(redis_server.url, group) as client:
        children = wf.group(step("lingering", n) for n in range(20))
        handle = await client.dispatch(chord(children, step("merge")))
        await redis_state(lambda: _started(log, 2))
        async with open_checked_runner(redis_server.url, cfg, _finishing_tasks(ran)):
            await redis_state(lambda: _succeeded(handle, 18))  # the fan-in counted them
            victim.kill()  # SIGKILL, in the middle of the fan-in
            assert await handle.result(timeout=60) == list(range(20))
    assert sorted(p for name, p in ran if name == "lingering") == list(range(20))
    assert [p for name, p in ran if name == "merge"] == [list(range(20))], "once, in order"


async def _succeeded(handle: trunner.WorkflowHandle[Any], count: int) -> bool:
    return (await handle.status()).succeeded >= count


@pytest.mark.deadline(90)
async def test_workflows_from_the_asyncio_and_sync_clients_to_a_worker_process(
    redis_server: RedisServer, group: str, workers: list[Worker], tmp_path: Path
) -> None:
    worker = Worker(redis_server.url, group, tmp_path / "log", {})
    workers.append(worker)
    await worker.ready()
    url, pid = redis_server.url, worker.process.pid

    async def scenario() -> Any:
        async with trunner.aio.Client(url, queue=group) as client:
            children = wf.group(step("kept", n) for n in range(3))
            handle = await client.dispatch(chord(children, step("kept")))
            return await handle.result(timeout=60)

    result = await trio.to_thread.run_sync(lambda: asyncio.run(scenario()))
    parts = [{"pid": pid, "payload": n} for n in range(3)]
    assert result == {"pid": pid, "payload": parts}

    def from_sync_code() -> tuple[Any, Any]:
        with trunner.sync.Client(url, queue=group) as client:
            handle = client.dispatch(chain(step("kept", "a"), step("kept")))
            return handle.result(timeout=60), handle.status().state

    result, state = await trio.to_thread.run_sync(from_sync_code)
    assert result == {"pid": pid, "payload": {"pid": pid, "payload": "a"}}
    assert state is trunner.status.WorkflowState.SUCCEEDED


async def _gated(log: Path, workflow: str) -> list[tuple[int, str]]:
    await trio.lowlevel.checkpoint()
    return [(pid, p) for pid, e, p in read_log(log) if e == "gated" and p.startswith(workflow)]


@pytest.mark.deadline(90)
async def test_a_dags_join_starts_once_when_its_parents_end_together(
    redis_server: RedisServer, group: str, workers: list[Worker], tmp_path: Path
) -> None:
    """Diamond a -> (b, c) -> d on two worker processes of one slot each: b and c run one
    in each, both blocked on one Redis list, and one RPUSH lets both end at once. Their
    ends race to start d: it starts once, given both results in order."""
    log = tmp_path / "log"
    for _ in range(2):
        workers.append(Worker(redis_server.url, group, log, {"config": {"num_workers": 1}}))
    for worker in workers:
        await worker.ready()
    async with (
        trunner.open_client(redis_server.url, group) as client,
        trunner.open_redis(redis_server.url) as redis,
    ):
        for run in range(10):
            gate = f"{group}:gate:{run}"
            g = wf.Graph()
            a = g.add(step("kept", gate))
            b, c = g.then(a, step("gated")), g.then(a, step("gated"))
            handle = await client.dispatch(g.returning(g.join(step("kept"), b, c)))
            await redis_state(functools.partial(_both_gated, log, handle.id))
            running = await _gated(log, handle.id)
            assert len({pid for pid, _ in running}) == 2, "b and c run in two processes"
            await redis.rpush(gate, 1, 1)  # both released by one command
            result = await handle.result(timeout=60)
            assert [part["node"] for part in result["payload"]] == [
                f"{handle.id}.1",
                f"{handle.id}.2",
            ]
            joins = [p for _, e, p in read_log(log) if e == "finished" and isinstance(p, list)]
            assert [part["node"] for part in joins[-1]] == [f"{handle.id}.1", f"{handle.id}.2"]
            assert len(joins) == run + 1, "d ran once in each run"
            status = await handle.status()
            assert (status.steps, status.succeeded, status.live) == (4, 4, 0)


async def _both_gated(log: Path, workflow: str) -> bool:
    return len(await _gated(log, workflow)) == 2
