"""A group's workflows seen from outside (Admin.workflows, Admin.workflow_steps, the line
of inspect): what the marks, counts and failures say exactly, and bad data contained to
its workflow."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import trunner
from trunner import chain, chord, step
from trunner import workflows as wf
from trunner.admin import StepState
from trunner.errors import BadData, WorkflowFailed
from trunner.keys import Keys
from trunner.status import WorkflowState

from ..conftest import config, open_checked_runner

tasks = trunner.TaskRegistry()


@tasks.task()
async def double(number: int) -> int:
    return 2 * number


@tasks.task()
async def total(numbers: list[int]) -> int:
    return sum(numbers)


@tasks.task(max_retry=0)
async def broken(_: object) -> int:
    raise ValueError("broken <b>")


async def test_live_workflows_are_listed_oldest_first_with_their_steps(
    url: str, group: str
) -> None:
    async with trunner.open_client(url, group, tasks=tasks) as client:
        # Ids in the order of their dispatch: two dispatched in one millisecond have one
        # score, and the index orders those by id.
        first = await client.dispatch(
            chain(step(double, 1), step(double)), name="first", workflow_id="a-first"
        )
        await client.dispatch(
            chord(wf.group(step(double, n) for n in range(5)), step(total)), workflow_id="second"
        )
        admin = client.admin
        listed = await admin.workflows()
        assert [w.id for w in listed] == [first.id, "second"]
        assert listed[0].status is not None
        assert listed[0].status.name == "first"
        assert listed[0].dispatched_at is not None
        assert [w.id for w in await admin.workflows(count=1, offset=1)] == ["second"]
        info = await admin.inspect()
        assert info.workflows == 2
        assert info.oldest_workflow_at == listed[0].dispatched_at
        steps = await admin.workflow_steps("second")
        assert steps.status.state is WorkflowState.RUNNING
        assert steps.states == (StepState.LIVE,) * 5 + (StepState.WAITING,)
        page = await admin.workflow_steps("second", start=4, count=1)
        assert (page.start, page.states) == (4, (StepState.LIVE,))
        assert (await admin.workflow_steps("second", count=0)).states == ()
        # no runner holds a step: the cancel takes the queued ones out, and it settles
        assert (await client.workflow("second").cancel()) is WorkflowState.CANCELLED
        cancelled = await admin.workflow_steps("second")
        assert cancelled.states == (StepState.CANCELLED,) * 5 + (StepState.NEVER,)
        gone = await admin.workflow_steps("nothing-here")
        assert (gone.status.state, gone.states) == (WorkflowState.UNKNOWN, ())


async def test_the_steps_of_a_settled_workflow_say_how_each_ended(
    memory_url: str, group: str
) -> None:
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        ok = await runner.dispatch(chain(step(double, 1), step(double)))
        assert await ok.result() == 4
        failing = await runner.dispatch(
            chain(wf.group([step(double, 1), step(broken, 2)]), step(total)),
            fail_fast=False,
        )
        with pytest.raises(WorkflowFailed):
            await failing.result()
        admin = runner.admin
        assert (await admin.workflow_steps(ok.id)).states == (StepState.SUCCEEDED,) * 2
        steps = await admin.workflow_steps(failing.id)
        assert steps.status.state is WorkflowState.FAILED
        assert steps.states == (StepState.SUCCEEDED, StepState.FAILED, StepState.NEVER)
        (failure,) = steps.failures
        assert (failure.node, failure.task_name, failure.error.type_name) == (
            1,
            "broken",
            "ValueError",
        )
        assert steps.counts() == {
            StepState.SUCCEEDED: 1,
            StepState.FAILED: 1,
            StepState.NEVER: 1,
        }
        assert await admin.workflows() == [], "settled: out of the index"
        assert (await admin.inspect()).workflows == 0


async def test_an_ended_step_is_told_only_as_exactly_as_the_counts_allow(
    url: str, group: str, raw: Any
) -> None:
    async with trunner.open_client(url, group, tasks=tasks) as client:
        handle = await client.dispatch(wf.group(step(double, n) for n in range(3)))
        flow = Keys("trunner", group)._workflow(handle.id)
        raw.setbit(flow.marks, 1, 1)  # step 0 ended, while the workflow counts ...
        raw.hset(flow.wf, mapping={"ok": 1, "cancelled": 1})  # ... one of each way
        assert (await client.admin.workflow_steps(handle.id)).states[0] is StepState.ENDED
        raw.hset(flow.wf, mapping={"ok": 0})
        assert (await client.admin.workflow_steps(handle.id)).states[0] is StepState.CANCELLED


async def test_bad_data_of_a_workflow_is_told_for_it_alone(url: str, group: str, raw: Any) -> None:
    async with trunner.open_client(url, group, tasks=tasks) as client:
        good = await client.dispatch(step(double, 1))
        bad = await client.dispatch(step(double, 2))
        keys = Keys("trunner", group)
        raw.hset(keys._workflow(bad.id).wf, "state", "<script>x</script>")
        raw.hset(keys._workflow(bad.id).err, mapping={"zero": "{}", "0": "[1, 2]"})
        raw.zadd(keys.workflows, {"has space": 1, "no-such": float("inf")})
        listed = {w.id: w for w in await client.admin.workflows()}
        assert listed[good.id].status is not None
        assert listed[bad.id].status is None
        assert "is not a workflow state" in listed[bad.id].problem
        assert listed["has space"].problem, "an id no workflow can have"
        assert listed["no-such"].dispatched_at is None
        assert listed["no-such"].status is not None
        assert listed["no-such"].status.state is WorkflowState.UNKNOWN
        with pytest.raises(BadData):
            await client.admin.workflow_steps(bad.id)
        raw.hset(keys._workflow(bad.id).wf, mapping={"state": "running", "ok": "²"})
        raw.hset(keys._workflow(bad.id).err, "³", "{}")  # digits, but not a step's index
        steps = await client.admin.workflow_steps(bad.id)
        assert [f.error.type_name for f in steps.failures] == ["BadData"]
        assert (steps.status.succeeded, steps.states) == (0, (StepState.LIVE,))
        raw.hset(keys._workflow(bad.id).wf, "created", "9" * 400)  # no int64: read as none
        listed = {w.id: w for w in await client.admin.workflows()}
        shown = listed[bad.id].status
        assert shown is not None
        assert shown.created_at is None
        assert (await bad.status()).created_at is None
        with pytest.raises(ValueError, match=r"whitespace|space"):
            await client.admin.workflow_steps("has space")
        with trio.fail_after(10):
            assert (await client.admin.inspect()).workflows == 4


#: Set to let ``held`` return (a new one per test).
gates = {"held": trio.Event()}


@tasks.task()
async def held(number: int) -> int:
    await gates["held"].wait()
    return number


async def test_the_live_workflows_are_a_gauge_of_the_metrics(memory_url: str, group: str) -> None:
    """Read from the group's index at each scrape of the worker's /metrics, as the queue
    length is."""
    from trunner._worker.serve import _metrics_handler  # noqa: PLC0415 - the worker's tool

    gates["held"] = trio.Event()
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        handle = await runner.dispatch(chain(step(held, 1), step(double)))
        assert await runner.admin.workflow_count() == 1
        _, _, body = await _metrics_handler(runner)()
        assert f'trunner_workflows_live{{group="{group}"}} 1.0' in body.decode()
        gates["held"].set()
        assert await handle.result() == 2
        _, _, body = await _metrics_handler(runner)()
        assert f'trunner_workflows_live{{group="{group}"}} 0.0' in body.decode()


async def test_a_handles_status_says_bad_data_as_the_lists_do(
    url: str, group: str, raw: Any
) -> None:
    async with trunner.open_client(url, group, tasks=tasks) as client:
        handle = await client.dispatch(step(double, 2))
        keys = Keys("trunner", group)
        raw.hset(keys._workflow(handle.id).res, "0", b"x" * 1000)
        raw.hset(keys._workflow(handle.id).wf, "state", "<bad>")
        with pytest.raises(BadData, match="not a workflow state"):
            await handle.status()
