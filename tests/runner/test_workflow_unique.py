"""A unique task as a workflow's step: a bound step takes its lock when it starts and
releases it when it ends, as a dispatch of the task would; a lock held when it would start
fails it (``TaskAlreadyDispatched``); an open one is refused at dispatch (design/workflows.md
§3.7)."""

from __future__ import annotations

import pytest
import trio

import trunner
from trunner import chain, step
from trunner import workflows as wf
from trunner.errors import TaskAlreadyDispatched, WorkflowFailed

from ..conftest import config, open_checked_runner

tasks = trunner.TaskRegistry()
#: ``charge`` started, and may return: new ones per test.
events: dict[str, trio.Event] = {}


@tasks.task()
async def plus_one(n: int) -> int:
    return n + 1


@tasks.task(unique=True, unique_for=60, unique_key=lambda order: order, keep_result=60)
async def charge(order: int) -> int:
    events["started"].set()
    await events["go"].wait()
    return order * 10


@tasks.task(unique=True, unique_for=60, unique_key=lambda order: order, max_retry=0)
async def refuse(order: int) -> int:
    raise RuntimeError(f"order {order} refused")


@pytest.fixture(autouse=True)
def fresh() -> None:
    events["started"], events["go"] = trio.Event(), trio.Event()


async def test_a_bound_unique_step_holds_its_lock_while_it_runs_and_releases_it(
    url: str, group: str
) -> None:
    async with open_checked_runner(url, config(group), tasks) as runner:
        handle = await runner.dispatch(chain(step(plus_one, 1), step(charge, 5), step(plus_one)))
        await events["started"].wait()
        with pytest.raises(TaskAlreadyDispatched) as held:
            await runner.dispatch(charge, 5)
        assert held.value.unique_keys == ["6:charge:5"]
        events["go"].set()
        assert await handle.result() == 51
        again = await runner.dispatch(charge, 5)  # released with the step's end
        assert await again.result() == 50


async def test_a_unique_root_holds_its_lock_while_it_runs(url: str, group: str) -> None:
    async with open_checked_runner(url, config(group), tasks) as runner:
        handle = await runner.dispatch(chain(step(charge, 7), step(plus_one)))
        await events["started"].wait()
        with pytest.raises(TaskAlreadyDispatched):
            await runner.dispatch(charge, 7)
        events["go"].set()
        assert await handle.result() == 71
        assert await (await runner.dispatch(charge, 7)).result() == 70


async def test_a_unique_step_whose_key_is_held_fails_its_workflow(url: str, group: str) -> None:
    async with open_checked_runner(url, config(group), tasks) as runner:
        holder = await runner.dispatch(charge, 3)
        await events["started"].wait()
        work = chain(step(plus_one, 1), wf.group([step(charge, 3), step(plus_one, 2)]))
        with pytest.raises(WorkflowFailed) as caught:
            await (await runner.dispatch(work)).result()
        [failed] = caught.value.failures
        assert (failed.node, failed.task_name) == (1, "charge")
        assert failed.error.type_name == "TaskAlreadyDispatched"
        assert "unique:6:charge:3 is held" in failed.error.message
        events["go"].set()
        assert await holder.result() == 30, "the holder's lock was not touched"
    # The holder and step 0: with fail-fast, step 2 (started after step 1) never started.
    assert runner.statistics().succeeded == 2


async def test_a_unique_root_whose_key_is_held_fails_its_workflow_at_once(
    url: str, group: str
) -> None:
    async with open_checked_runner(url, config(group), tasks) as runner:
        holder = await runner.dispatch(charge, 4)
        await events["started"].wait()
        with pytest.raises(WorkflowFailed) as caught:
            await (await runner.dispatch(chain(step(charge, 4), step(plus_one)))).result()
        [failed] = caught.value.failures
        assert (failed.node, failed.error.type_name) == (0, "TaskAlreadyDispatched")
        events["go"].set()
        assert await holder.result() == 40


async def test_a_unique_step_that_fails_for_good_releases_its_lock(
    memory_url: str, group: str
) -> None:
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        with pytest.raises(WorkflowFailed):
            await (await runner.dispatch(chain(step(plus_one, 1), step(refuse, 9)))).result()
        await runner.dispatch(refuse, 9)  # dead-lettered: its lock went with it


async def test_an_open_unique_step_is_refused_before_anything_is_written(
    memory_url: str, group: str
) -> None:
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        with pytest.raises(ValueError, match=r"step 1 \('charge'\) is an open step of a unique"):
            await runner.dispatch(chain(step(plus_one, 1), step(charge)))
        assert await runner.admin.queue_length() == 0


async def test_two_steps_of_one_key_in_a_chain_run_one_after_the_other(
    memory_url: str, group: str
) -> None:
    events["go"].set()
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        # The first one's end releases the lock before the second one takes it (one call).
        handle = await runner.dispatch(chain(step(charge, 2), step(charge, 2)))
        assert await handle.result() == 20
