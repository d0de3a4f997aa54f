"""A step's options keep working inside a workflow, as for a task dispatched on its own:
its lane, its timeout, its task's retries, group-wide limits, where its body runs (a thread,
a process), and its own kept result."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio

import trunner
from trunner import chain, chord, step
from trunner import workflows as wf
from trunner.errors import WorkflowFailed

from ..conftest import config, open_checked_runner, redis_state

LANES = {"urgent": 9, "default": 1}

tasks = trunner.TaskRegistry()
seen: dict[str, list[Any]] = {"lane": [], "running": [], "most": [], "attempts": []}


@tasks.task()
async def where(n: int) -> int:
    seen["lane"].append(trunner.current_message().message_id)
    return n


@tasks.task()
async def total(numbers: list[int]) -> int:
    return sum(numbers)


@tasks.task(max_retry=0)
async def nap(seconds: float) -> float:
    await trio.sleep(seconds)
    return seconds


@tasks.task(max_retry=2, retry_backoff=0)
async def flaky(n: int) -> int:
    seen["attempts"].append(trunner.current_message().attempt)
    if trunner.current_message().attempt < 3:
        raise RuntimeError("not yet")
    return n


#: Set once ``one_at_a_time`` may return: every other of its steps is then deferred.
gate: dict[str, trio.Event] = {}


@tasks.task(concurrency=1)
async def one_at_a_time(n: int) -> int:
    seen["running"].append(n)
    seen["most"].append(len(seen["running"]))
    await gate["open"].wait()
    seen["running"].remove(n)
    return n


@tasks.task(run_in="thread")
def in_a_thread(n: int) -> str:
    return f"{n} in {threading.current_thread() is not threading.main_thread()}"


@tasks.task(run_in="process")
def in_a_process(n: int) -> int:
    return n * n


@pytest.fixture(autouse=True)
def forget() -> None:
    for values in seen.values():
        values.clear()
    gate["open"] = trio.Event()


async def test_a_step_runs_in_its_lane(url: str, group: str) -> None:
    async with open_checked_runner(url, config(group, lanes=LANES), tasks) as runner:
        work = chord(wf.group([step(where, 1, priority="urgent"), step(where, 2)]), step(total))
        assert await (await runner.dispatch(work)).result() == 3
    assert sorted(i.endswith("@urgent") for i in seen["lane"]) == [False, True]


async def test_a_steps_timeout_fails_it_and_its_workflow(memory_url: str, group: str) -> None:
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        handle = await runner.dispatch(chain(step(nap, 3600.0, timeout=0.05), step(nap)))
        with pytest.raises(WorkflowFailed) as caught:
            await handle.result()
    [failed] = caught.value.failures
    assert (failed.node, failed.error.type_name) == (0, "TaskTimeout")


async def test_a_steps_retries_are_its_tasks(memory_url: str, group: str) -> None:
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        handle = await runner.dispatch(chain(step(flaky, 5), step(where)))
        assert await handle.result() == 5
    assert seen["attempts"] == [1, 2, 3]


async def test_a_groups_steps_keep_their_tasks_concurrency_limit(url: str, group: str) -> None:
    async with open_checked_runner(url, config(group), tasks) as runner:
        handle = await runner.dispatch(
            chord(wf.group(step(one_at_a_time, n) for n in range(4)), step(total))
        )
        await redis_state(lambda: _deferred(runner))  # the others wait for the slot
        gate["open"].set()
        assert await handle.result() == 6
    assert max(seen["most"]) == 1


async def _deferred(runner: trunner.Runner) -> bool:
    await trio.lowlevel.checkpoint()
    return runner.statistics().deferred_concurrency >= 1


async def test_steps_run_in_threads_and_processes(memory_url: str, group: str) -> None:
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        work = chain(step(in_a_process, 3), wf.group([step(in_a_thread), step(in_a_process)]))
        handle = await runner.dispatch(work)
        with trio.fail_after(60):  # a process worker's start on a busy machine
            assert await handle.result() == ["9 in True", 81]


async def test_a_steps_own_kept_result_is_read_by_its_handle(memory_url: str, group: str) -> None:
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        handle = await runner.dispatch(chain(step(where, 7, keep_result=60), step(where)))
        assert await handle.result() == 7
        assert await handle.step_handle(0).result() == 7
