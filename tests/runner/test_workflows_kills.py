"""Workflows under SIGKILLs of real worker processes on a real redis-server (design/
workflows.md, section 6.5), checked with the reliability suite's history: every step's
runs, merged from the workers' logs (tests/processes/reliability_worker.py), must show a
node enqueued once, started only after its inputs finished, fed its inputs' results
complete and in order, and run again only when its own worker died while running it
(tests/support/workflow_history.py); and every workflow's result must be right.

Kills are driven by what the history shows (a step started), never by the clock.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import pytest
import trio

import trunner
from trunner import workflows as wf
from trunner.errors import StepFailed, WorkflowFailed
from trunner.workflows import chain, chord, step

from ..conftest import raw_client
from ..support.fleet import Fleet, WorkerProcess, open_fleet
from ..support.history import Run
from ..support.servers import RedisServer
from ..support.workflow_history import Shape, chain_shape, chord_shape, workflow_check

#: How long a worker's step may stay idle before another claims it (scaled down).
RECLAIM_DELAY = 1.5
#: Random kills over many workflows (an environment variable raises it for a soak run).
KILLS = int(os.environ.get("TRUNNER_WORKFLOW_KILLS", "6"))


def options(group: str, **more: Any) -> dict[str, Any]:
    """Worker options: scaled-down timings; ``more``: the workflow tasks' options."""
    config = {
        "consumer_group": group,
        "num_workers": 4,
        "block_duration": 0.5,
        "reclaim_delay": RECLAIM_DELAY,
        "reclaim_interval": 0.2,
        "leader_ttl": 0.8,
        "leader_wait": 0.4,
        "drain_timeout": 5.0,
    }
    return {"config": config, **more}


def step_ids(shape: Shape) -> list[str]:
    return [f"{shape.workflow}.{i}" for i in range(len(shape.nodes))]


def dispatched(fleet: Fleet, shape: Shape, handle: Any) -> Any:
    """Record the workflow's steps as dispatched (the history's producer side)."""
    fleet.history.invoke(step_ids(shape))
    fleet.history.ok(step_ids(shape))
    return handle


async def running(fleet: Fleet, wanted: Any) -> tuple[WorkerProcess, Run]:
    """Wait until a ready worker runs a step for which ``wanted(run)`` holds; that worker
    and run (a random one of them)."""
    rng = random.Random()
    while True:
        fleet.poll()
        ready = {w.pid: w for w in fleet.ready if w.alive}
        found = [
            (ready[r.pid], r)
            for runs in fleet.history.runs().values()
            for r in runs
            if r.end is None and r.pid in ready and wanted(r)
        ]
        if found:
            return rng.choice(found)
        await trio.sleep(0.02)


def kill(fleet: Fleet, worker: WorkerProcess, nursery: trio.Nursery) -> None:
    """SIGKILL ``worker`` (recorded in the history) and start another in its place."""
    fleet.kill(worker)
    nursery.start_soon(fleet.start, 1)


def chain_of(workflow: str, length: int, first: int) -> tuple[Shape, Any]:
    steps = [step("link", first), *(step("link") for _ in range(length - 1))]
    return chain_shape(workflow, length, first), chain(*steps)


def chord_of(workflow: str, payloads: list[int]) -> tuple[Shape, Any]:
    children = wf.group(step("square", p) for p in payloads)
    return chord_shape(workflow, payloads), chord(children, step("total"))


async def check(fleet: Fleet, group: str, url: str, shapes: list[Shape]) -> str:
    """The plain history check and the workflows' check of every shape: both clean."""
    raw = raw_client(url)
    try:
        report = await fleet.check(raw, group)
    finally:
        raw.close()
    flows = workflow_check(fleet.history, shapes)
    assert report.valid, f"lost {report.lost[:20]}, unexpected {report.unexpected[:20]}"
    assert report.unacked == [], report.unacked[:20]
    assert report.multi_entry == {}, report.multi_entry
    assert report.unexplained == [], report.unexplained
    assert flows.problems() == {}, flows.summary()
    return f"{report.summary()}\n{flows.summary()}"


# -- a SIGKILL at a given step ------------------------------------------------------------------


@pytest.mark.deadline(90)
@pytest.mark.parametrize(
    ("shape", "node"),
    [("chain", 0), ("chain", 5), ("chain", 11), ("chord", 7), ("chord", 40)],
    ids=["chain-first", "chain-middle", "chain-last", "chord-child", "chord-callback"],
)
async def test_a_sigkill_at_a_given_step(
    redis_server: RedisServer, group: str, tmp_path: Path, shape: str, node: int
) -> None:
    """Two workers; the first delivery of node ``node`` runs until its worker is killed
    (SIGKILL as soon as the history shows it started, the worker replaced); the step is
    reclaimed and the workflow ends with the right result: a chain of 12 steps, or a chord
    of 40 children (node 7 a child, 40 its callback). The callback runs from one entry,
    with the 40 results in order."""
    url = redis_server.url
    if shape == "chain":
        expected_shape, workflow = chain_of("c", 12, 100)
        expected = 112
    else:
        expected_shape, workflow = chord_of("h", list(range(40)))
        expected = sum(n * n for n in range(40))
    async with (
        open_fleet(url, tmp_path, options(group, linger=[node])) as fleet,
        trunner.open_client(url, group) as client,
        trio.open_nursery() as nursery,
    ):
        await fleet.start(2)
        handle = await client.dispatch(workflow, workflow_id=expected_shape.workflow)
        dispatched(fleet, expected_shape, handle)
        target = f"{expected_shape.workflow}.{node}"
        victim, _ = await running(fleet, lambda r: r.id == target)
        kill(fleet, victim, nursery)
        assert await handle.result(timeout=60) == expected
        summary = await check(fleet, group, url, [expected_shape])
    runs = fleet.history.runs()[target]
    assert [(r.pid == victim.pid, r.finished) for r in runs] == [(True, False), (False, True)]
    print(f"\n[workflow SIGKILL at {target}] {summary}")


# -- random kills over many workflows -----------------------------------------------------------


@pytest.mark.deadline(120)
async def test_random_sigkills_over_many_workflows(
    redis_server: RedisServer, group: str, tmp_path: Path
) -> None:
    """Three workers run workflows dispatched over time, a chain of 8 steps and a chord of
    30 children at a time, steps of 0-20 ms, until ``KILLS`` (6) were made: each time, a random
    worker running a step (every other time a chord's child, in the middle of its fan-in)
    is SIGKILLed and replaced. Every workflow's result is right and the history of every
    step is clean."""
    url = redis_server.url
    rng = random.Random(34)
    least, kills, length, width = 8, KILLS, 8, 30
    shapes: list[Shape] = []
    expected: dict[str, int] = {}
    handles: list[Any] = []
    killed, fed = trio.Event(), trio.Event()
    async with (
        open_fleet(url, tmp_path, options(group)) as fleet,
        trunner.open_client(url, group) as client,
        trio.open_nursery() as nursery,
    ):
        await fleet.start(3)

        async def feed() -> None:
            n = 0
            while n < least or not killed.is_set():
                payloads = [n + i for i in range(width)]
                for shape, workflow in (
                    chain_of(f"c{n}", length, n),
                    chord_of(f"h{n}", payloads),
                ):
                    shapes.append(shape)
                    handle = await client.dispatch(workflow, workflow_id=shape.workflow)
                    handles.append(dispatched(fleet, shape, handle))
                expected[f"c{n}"] = n + length
                expected[f"h{n}"] = sum(p * p for p in payloads)
                n += 1
                await trio.sleep(rng.uniform(0.05, 0.25))
            fed.set()

        nursery.start_soon(feed)
        hit: list[str] = []
        for k in range(kills):
            child = k % 2 == 0

            def wanted(r: Run, child: bool = child) -> bool:
                if child:  # a chord's child: its callback has not started
                    return r.id.startswith("h") and not r.id.endswith(f".{width}")
                return r.id.startswith("c")

            victim, run = await running(fleet, wanted)
            hit.append(run.id)
            kill(fleet, victim, nursery)
            await trio.sleep(rng.uniform(0.1, 0.5))  # spreads the kills out
        killed.set()
        await fed.wait()
        results = {h.id: await h.result(timeout=60) for h in handles}
        summary = await check(fleet, group, url, shapes)
    assert results == expected
    print(f"\n[{len(handles)} workflows, {kills} SIGKILLs, hit {hit}] {summary}")


# -- fail-fast across processes -----------------------------------------------------------------


@pytest.mark.deadline(90)
async def test_fail_fast_cancels_the_siblings_running_in_another_process(
    redis_server: RedisServer, group: str, tmp_path: Path
) -> None:
    """Worker A runs a chord's 8 sleeping children (its capacity, so it never takes the
    ninth); worker B, started then, takes the ninth, which fails: A's children are
    cancelled where they run (interrupted, none finished), the callback never starts, and
    ``result()`` raises one ``StepFailed``, only after A's children ended (each takes half
    a second to end once cancelled: a workflow that settled sooner would raise first)."""
    url, sleepers = redis_server.url, 8
    opts = options(group, wind_down=0.5)  # each takes a while to end, once cancelled
    opts["config"]["num_workers"] = sleepers
    async with (
        open_fleet(url, tmp_path, opts) as fleet,
        trunner.open_client(url, group) as client,
    ):
        (a,) = await fleet.start(1)
        children = [step("nap", 600.0) for _ in range(sleepers)]
        workflow = chord(wf.group([*children, step("refuse", "x")]), step("total"))
        handle = await client.dispatch(workflow, workflow_id="ff")
        for n in range(sleepers):
            await running(fleet, lambda r, n=n: r.id == f"ff.{n}" and r.pid == a.pid)
        (b,) = await fleet.start(1)
        with pytest.raises(WorkflowFailed) as caught:
            await handle.result(timeout=60)
        raised = time.time()
        status = await handle.status()
        fleet.poll()
    runs = fleet.history.runs()
    naps = [runs[f"ff.{n}"] for n in range(sleepers)]
    ends = [[(r.pid, r.interrupted, r.finished) for r in rs] for rs in naps]
    assert ends == [[(a.pid, True, False)]] * sleepers, "cancelled where they ran, by then"
    assert max(rs[0].end or raised for rs in naps) <= raised, "raised before they ended"
    assert [r.pid for r in runs[f"ff.{sleepers}"]] == [b.pid]
    assert f"ff.{sleepers + 1}" not in runs, "the callback never starts"
    (failure,) = caught.value.failures
    assert isinstance(failure, StepFailed)
    assert (failure.node, failure.task_name, failure.error.type_name) == (
        sleepers,
        "refuse",
        "ValueError",
    )
    assert (status.failed, status.cancelled, status.succeeded) == (1, sleepers, 0)
