"""The cancel of a whole workflow across real worker processes on a real redis-server
(design/workflows.md, sections 4.1, 4.2 and 6.5): at the moment of ``cancel()`` its steps
are running on two workers, waiting for a concurrency slot, in a retry's backoff, queued
in a lane no worker reads, or not started yet. Each state is reached by observing it (the
workers' history, tests/support/history.py, and Redis), never by waiting a while; what
the cancel did is read from the history and from Redis afterwards.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import trio

import trunner
from trunner import workflows as wf
from trunner._wire.workflow import workflow_mark
from trunner.errors import WorkflowCancelled
from trunner.keys import Keys
from trunner.status import WorkflowState
from trunner.workflows import chord, step

from ..conftest import raw_client, redis_state
from ..processes.reliability_worker import PARKED, park_key
from ..support.fleet import Fleet, WorkerProcess, open_fleet
from ..support.servers import RedisServer
from .test_workflows_kills import options, running

#: What the producer must know of the workers' ``park`` (tests/processes/
#: reliability_worker.py) to lock it as they do: a unique task, in the lane ``parked``.
stubs = trunner.TaskRegistry()


@stubs.task(unique=True, unique_key=park_key, unique_for=600.0, priority=PARKED)
async def park(seconds: float) -> None:
    raise AssertionError("runs in the worker processes only")


#: The workflow's id, its ``keep_result``, the key of ``solo``'s concurrency limit and of
#: ``park``'s unique lock.
W, KEEP = "swept", 30.0
SOLO, PARK = "4:solo", "4:park:one"
#: Its steps: 0 runs on worker A, 1 on worker B, 2 and 3 want the one slot of ``solo``
#: (one holds it, the other waits), 4 fails and is retried in an hour, 5 waits in a lane
#: no worker reads, 6 (the callback) waits for them all.
STEPS = 7
CALLBACK = f"{W}.6"


def reading(base: dict[str, Any], *lanes: str) -> dict[str, Any]:
    """``base``'s worker options for a worker that reads the default lane and ``lanes``."""
    return {**base, "config": {**base["config"], "lanes": ["default", *lanes]}}


def step_runs(fleet: Fleet) -> dict[str, list[tuple[int, str]]]:
    """The runs of the workflow's steps so far: per step id, (pid, run) of each."""
    fleet.poll()
    return {
        task_id: [(r.pid, r.run) for r in runs]
        for task_id, runs in fleet.history.runs().items()
        if task_id.startswith(f"{W}.")
    }


def leftovers(raw: Any, keys: Keys) -> dict[str, Any]:
    """What Redis still holds of the workflow's steps outside its own keys: where-map
    entries, waiters of a concurrency slot, retries, the lane no worker reads, the unique
    lock of its ``park`` step."""
    found = {
        "where": [f for f in raw.hkeys(keys.where) if f.decode().startswith(f"{W}.")],
        "waiters": [f for f in raw.hkeys(keys.concurrency_waiters) if f.startswith(W.encode())],
        "waiting": raw.llen(keys.concurrency_waiting(SOLO)),
        "retries": [m for m in raw.zrange(keys.retries, 0, -1) if m.startswith(W.encode())],
        "retry messages": [f for f in raw.hkeys(keys.retry_messages) if f.startswith(W.encode())],
        "parked": raw.xlen(keys.lane_stream(PARKED)),
        "lock": raw.exists(keys.unique(PARK)),
    }
    return {name: value for name, value in found.items() if value}


async def states_reached(
    fleet: Fleet, raw: Any, keys: Keys, a: WorkerProcess, b: WorkerProcess
) -> set[str]:
    """Wait until every step is where the test wants it at the cancel; the ids of those
    running."""
    await running(fleet, lambda r: r.id == f"{W}.0" and r.pid == a.pid)
    await running(fleet, lambda r: r.id == f"{W}.1" and r.pid == b.pid)
    _, holder = await running(fleet, lambda r: r.id in (f"{W}.2", f"{W}.3"))
    waiter = f"{W}.3" if holder.id == f"{W}.2" else f"{W}.2"

    async def waiting() -> bool:
        await trio.lowlevel.checkpoint()
        return bool(raw.hexists(keys.concurrency_waiters, waiter))

    async def backing_off() -> bool:
        await trio.lowlevel.checkpoint()
        return raw.zscore(keys.retries, f"{W}.4") is not None

    await redis_state(waiting)
    await redis_state(backing_off)
    return {f"{W}.0", f"{W}.1", holder.id}


@pytest.mark.deadline(60)
async def test_a_cancel_takes_out_every_step_no_runner_holds_and_cancels_the_running_ones(
    redis_server: RedisServer, group: str, tmp_path: Path
) -> None:
    """A chord of six steps into a callback, on worker A (lanes default and ``a``) and B
    (default and ``b``). At the cancel, step 0 runs on A and step 1 on B (naps of ten
    minutes), one ``solo`` step (``concurrency=1``) runs and holds its slot while the other
    waits for it, a ``flaky`` step failed once and waits for its retry (an hour), a unique
    ``park`` step is queued in a lane no worker reads, and the callback has not started.

    ``cancel()`` takes out the waiting, retrying and queued steps within the call (nothing
    of them left in Redis when it returns); the three running steps are cancelled where
    they run (interrupted, not finished: each takes half a second to end, so a settle
    before they end would make ``result()`` raise first); ``result()`` raises
    ``WorkflowCancelled`` after they ended; the status counts the six started steps
    cancelled; the workflow's keys expire within its ``keep_result`` and nothing else of
    it is left. Then a fresh worker that reads every lane, a new ``park`` (refused if its
    lock were still held) and a new ``solo`` (which needs the slot) run, in lanes and a
    waiting list the cancelled steps would be ahead in: no step of the workflow ever
    started after the cancel."""
    url = redis_server.url
    keys = Keys("trunner", group)
    base = options(group, wind_down=0.5)  # each takes a while to end, once cancelled
    raw = raw_client(url)
    workers: dict[str, WorkerProcess] = {}
    try:
        async with (
            open_fleet(url, tmp_path, base) as fleet,
            trunner.open_client(url, group) as client,
        ):

            async def start(lane: str) -> None:
                (workers[lane],) = await fleet.start(1, options=reading(base, lane))

            async with trio.open_nursery() as nursery:
                for lane in ("a", "b"):
                    nursery.start_soon(start, lane)
            a, b = workers["a"], workers["b"]
            children = [
                step("nap", 600.0, priority="a"),
                step("nap", 600.0, priority="b"),
                step("solo", 600.0),
                step("solo", 600.0),
                step("flaky", 0),
                step(park, 600.0),
            ]
            workflow = chord(wf.group(children), step("total"))
            handle = await client.dispatch(workflow, workflow_id=W, keep_result=KEEP)
            was_running = await states_reached(fleet, raw, keys, a, b)
            before = await handle.status()
            assert (before.state, before.steps, before.live) == (WorkflowState.RUNNING, STEPS, 6)
            waits = leftovers(raw, keys)
            assert {f.decode() for f in waits.pop("where")} >= {f"{W}.5", *was_running}
            assert waits == {  # one waits for the slot, one for its retry; park is queued
                "waiters": [({f"{W}.2", f"{W}.3"} - was_running).pop().encode()],
                "waiting": 1,
                "retries": [f"{W}.4".encode()],
                "retry messages": [f"{W}.4".encode()],
                "parked": 1,
                "lock": 1,
            }
            assert raw.zcard(keys.concurrency_holders(SOLO)) == 1, "a running solo holds it"
            runs_then = step_runs(fleet)

            state = await handle.cancel()
            returned = time.time()
            assert state in (WorkflowState.CANCELLING, WorkflowState.CANCELLED)
            swept = leftovers(raw, keys)  # the running steps' ends take their own out
            assert {f.decode() for f in swept.pop("where", ())} <= was_running
            assert swept == {}, "taken out within the call"
            with pytest.raises(WorkflowCancelled):
                await handle.result(timeout=30)
            raised = time.time()
            status = await handle.status()
            assert leftovers(raw, keys) == {}
            mark = workflow_mark(group, W)
            assert raw.hexists(keys.cancelled, mark) == 0, "forgotten at the settle"
            assert raw.zscore(keys.workflows, W) is None
            assert raw.zcard(keys.concurrency_holders(SOLO)) == 0, "its slot is free"
            names = keys._workflow(W).names()
            assert not raw.exists(names[1]), "the plan is deleted at the settle"
            found = {k.decode() for k in raw.scan_iter(match=f"*{{{group}}}*", count=1000)}
            assert [k for k in found - set(names) if W in k] == [], "no record of its steps"
            lives = [raw.pttl(k) for k in names]
            assert all(ms == -2 or 0 < ms <= KEEP * 1000 for ms in lives), lives

            (fresh,) = await fleet.start(1, options=reading(base, "a", "b", PARKED))
            again = [
                await client.dispatch(park, 0.0, keep_result=KEEP),  # its lock is free
                await client.dispatch("solo", 0.0, keep_result=KEEP),  # and its slot
            ]
            for sentinel in again:
                await sentinel.result(timeout=30)
            runs_after = step_runs(fleet)
            history = fleet.history.runs()
    finally:
        raw.close()
    assert runs_after == runs_then, "no step of the workflow started after the cancel"
    assert CALLBACK not in runs_after, "the callback never starts"
    ran = {task_id: history[task_id] for task_id in was_running}
    ends = {i: [(r.pid, r.interrupted, r.finished) for r in rs] for i, rs in ran.items()}
    assert ends[f"{W}.0"] == [(a.pid, True, False)]
    assert ends[f"{W}.1"] == [(b.pid, True, False)]
    assert all(e == [(e[0][0], True, False)] for e in ends.values()), ends
    assert all(rs[0].end is not None and rs[0].end <= raised for rs in ran.values()), (
        "result() raised before the running steps ended"
    )
    (flaky,) = history[f"{W}.4"]
    assert (flaky.end is not None, flaky.finished, flaky.interrupted) == (True, False, False)
    assert set(runs_after) == {*was_running, f"{W}.4"}, "the waiting and parked never ran"
    assert [r.pid for r in history[again[0].id]] == [fresh.pid], "read from the lane"
    assert (status.state, status.steps, status.cancelled) == (WorkflowState.CANCELLED, STEPS, 6)
    assert (status.succeeded, status.failed, status.live) == (0, 0, 0)
    print(
        f"\n[cancel() returned {state.value}; running then {sorted(was_running)}; "
        f"result() raised {raised - returned:.2f} s after it returned]"
    )
