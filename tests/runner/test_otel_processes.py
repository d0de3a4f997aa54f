"""OpenTelemetry across processes, on a real redis-server: this process dispatches with
its own middleware, runners in worker processes (tests/processes/otel_worker.py) run the
attempts with theirs and write their spans to a file; each attempt, a retry and a reclaim
after a SIGKILL included, is in the dispatching trace, a child of the dispatch span; a
workflow's steps, run by two processes, are one trace."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

import trunner
from trunner.otel import OpenTelemetryMiddleware

from ..support.otel import tracing
from ..support.servers import RedisServer
from ..support.workers import Worker

WORKER = "tests.processes.otel_worker"


def lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def written(
    path: Path, count: int, where: Callable[[dict[str, Any]], bool]
) -> list[dict[str, Any]]:
    """Wait until the workers wrote ``count`` lines that pass ``where`` (another process's
    file has no event to await: polled, within the test's Trio deadline)."""
    while len(found := [line for line in lines(path) if where(line)]) < count:  # noqa: ASYNC110
        await trio.sleep(0.02)
    return found


def processing(task: str) -> Callable[[dict[str, Any]], bool]:
    return lambda line: line.get("name") == f"process {task}"


async def start(url: str, group: str, spans: Path, config: dict[str, Any]) -> Worker:
    worker = Worker(url, group, spans, config, module=WORKER)
    await worker.ready()
    return worker


@pytest.mark.deadline(60)
async def test_a_retry_in_another_process_is_in_the_dispatching_trace(
    redis_server: RedisServer, group: str, workers: list[Worker], tmp_path: Path
) -> None:
    spans_file = tmp_path / "spans"
    workers.append(await start(redis_server.url, group, spans_file, {}))
    provider, spans = tracing()
    otel = OpenTelemetryMiddleware(provider)
    async with trunner.open_client(redis_server.url, group, middleware=[otel]) as client:
        await client.dispatch("fails_once", None)
        first, second = await written(spans_file, 2, processing("fails_once"))
    (dispatched,) = spans.ended
    assert dispatched.context is not None
    trace_id = f"{dispatched.context.trace_id:032x}"
    span_id = f"{dispatched.context.span_id:016x}"
    for span, attempt in ((first, 1), (second, 2)):
        assert span["kind"] == "CONSUMER"
        assert span["pid"] == workers[0].process.pid
        assert span["trace_id"] == trace_id
        assert span["parent_id"] == span_id
        assert span["links"] == [span_id]
        assert span["attributes"]["messaging.trunner.attempt"] == attempt
    assert first["status"] == "ERROR"
    assert first["attributes"]["messaging.trunner.will_retry"] is True
    assert second["status"] == "UNSET"
    assert workers[0].terminate() == 0


@pytest.mark.deadline(60)
async def test_a_task_reclaimed_from_a_killed_process_is_in_the_dispatching_trace(
    redis_server: RedisServer, group: str, workers: list[Worker], tmp_path: Path
) -> None:
    spans_file = tmp_path / "spans"
    victim = await start(redis_server.url, group, spans_file, {})
    workers.append(victim)
    provider, spans = tracing()
    otel = OpenTelemetryMiddleware(provider)
    async with trunner.open_client(redis_server.url, group, middleware=[otel]) as client:
        await client.dispatch("hold", "orphan")
        await written(spans_file, 1, lambda line: line.get("started") == "orphan")
        victim.kill()  # mid-attempt: its process span never ends
        rescuer = await start(
            redis_server.url, group, spans_file, {"reclaim_delay": 0.3, "reclaim_interval": 0.05}
        )
        workers.append(rescuer)
        (reclaimed,) = await written(spans_file, 1, processing("hold"))
    (dispatched,) = spans.ended
    assert dispatched.context is not None
    assert reclaimed["pid"] == rescuer.process.pid
    assert reclaimed["trace_id"] == f"{dispatched.context.trace_id:032x}"
    assert reclaimed["parent_id"] == f"{dispatched.context.span_id:016x}"
    # The crash is no failed attempt: its redelivery runs the first attempt again.
    assert reclaimed["attributes"]["messaging.trunner.attempt"] == 1
    assert reclaimed["attributes"]["messaging.trunner.outcome"] == "succeeded"
    assert rescuer.terminate() == 0


@pytest.mark.deadline(60)
async def test_a_chain_run_by_two_processes_is_one_trace(
    redis_server: RedisServer, group: str, workers: list[Worker], tmp_path: Path
) -> None:
    """A workflow dispatched with no span current: its dispatch span is the root of one
    trace, and each step attempt, whichever process ran it, a retry included, its child.
    Each worker reads a lane of its own, so that each step has its process."""
    spans_file = tmp_path / "spans"
    for lane in ("first", "second"):
        workers.append(
            await start(redis_server.url, group, spans_file, {"lanes": ["default", lane]})
        )
    provider, spans = tracing()
    otel = OpenTelemetryMiddleware(provider)
    async with trunner.open_client(redis_server.url, group, middleware=[otel]) as client:
        workflow = trunner.chain(
            trunner.step("record", 1, priority="first"),
            trunner.step("fails_once", priority="second"),
        )
        handle = await client.dispatch(workflow)
        assert await handle.result() is None
        found = await written(
            spans_file, 3, lambda line: line.get("name", "").startswith("process ")
        )
    (dispatched,) = spans.ended
    assert dispatched.name == "dispatch workflow"
    assert dispatched.parent is None
    assert dispatched.context is not None
    trace_id = f"{dispatched.context.trace_id:032x}"
    span_id = f"{dispatched.context.span_id:016x}"
    ran = [
        (span["name"], span["pid"], span["attributes"]["messaging.trunner.attempt"])
        for span in found
    ]
    first, second = (worker.process.pid for worker in workers)
    assert ran == [
        ("process record", first, 1),
        ("process fails_once", second, 1),
        ("process fails_once", second, 2),
    ]
    for span in found:
        assert span["trace_id"] == trace_id
        assert span["parent_id"] == span_id
        assert span["attributes"]["messaging.trunner.workflow.id"] == handle.id
    assert [span["attributes"]["messaging.trunner.workflow.node"] for span in found] == [0, 1, 1]
    assert [worker.terminate() for worker in workers] == [0, 0]
