"""A workflow's cancel takes out the steps no runner holds (design/workflows.md §4.2):
after ``cancel()`` returns no step that was not already running starts, and a workflow
with nothing running settles within the call, whether a runner is up or not."""

from __future__ import annotations

import time
from typing import Any

import pytest
import trio

import trunner
from trunner import chain, chord, step
from trunner import workflows as wf
from trunner.errors import WorkflowCancelled
from trunner.keys import Keys
from trunner.status import WorkflowState

from ..conftest import config, open_checked_runner, parts, redis_state

tasks = trunner.TaskRegistry()

#: The history of the bodies that started (node payloads, in order), and an event set by
#: the first: new ones per test.
ran: list[int] = []
holding = {"slot": trio.Event()}


@tasks.task()
async def double(number: int) -> int:
    ran.append(number)
    return 2 * number


@tasks.task()
async def total(numbers: list[int]) -> int:
    return sum(numbers)


@tasks.task(concurrency=1, max_retry=0)
async def one_at_a_time(number: int) -> int:
    ran.append(number)
    holding["slot"].set()
    await trio.sleep_forever()
    raise AssertionError


@tasks.task(max_retry=3, retry_backoff=3600.0)
async def flaky(number: int) -> int:
    ran.append(number)
    raise ValueError("again later")


def fresh() -> None:
    ran.clear()
    holding["slot"] = trio.Event()


async def test_a_cancel_with_no_runner_up_settles_the_workflow(memory_url: str, group: str) -> None:
    fresh()
    async with trunner.open_client(memory_url, group, tasks=tasks) as client:
        handle = await client.dispatch(
            chord(wf.group(chain(step(double, n), step(double)) for n in range(3)), step(total))
        )
        assert await handle.cancel() is WorkflowState.CANCELLED, "settled within the call"
        with pytest.raises(WorkflowCancelled):
            await handle.result(timeout=0)
        status = await handle.status()
        assert (status.cancelled, status.live, status.succeeded) == (3, 0, 0)
        assert await client.admin.queue_length() == 0, "nothing left for a runner to fetch"
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        assert await runner.admin.queue_length() == 0
    assert ran == [], "no step ever started"


async def test_steps_waiting_for_a_limit_never_reach_a_runner_after_the_cancel(
    memory_url: str, group: str
) -> None:
    """Three steps wait for the slot the first one holds: the cancel takes them out, so that
    the slot freed by the first one's end grants none of them; only the running one is
    cancelled by a runner."""
    fresh()
    async with open_checked_runner(memory_url, config(group, num_workers=4), tasks) as runner:
        handle = await runner.dispatch(wf.group(step(one_at_a_time, n) for n in range(4)))
        await holding["slot"].wait()

        while runner.statistics().deferred_concurrency < 3:  # noqa: ASYNC110 - its counter
            await trio.sleep(0.01)
        assert await handle.cancel() is WorkflowState.CANCELLING, "one still runs"
        with pytest.raises(WorkflowCancelled):
            await handle.result()
        status = await handle.status()
    assert len(ran) == 1, "only the step running at the cancel ever started"
    assert runner.statistics().cancelled == 1, "the waiting ones never reached a runner"
    assert (status.cancelled, status.live) == (4, 0)


async def test_a_step_in_its_retry_backoff_is_taken_out_and_the_workflow_settles(
    memory_url: str, group: str
) -> None:
    fresh()
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        kept = await runner.dispatch(chain(step(flaky, 1, keep_result=60), step(double)))
        while runner.statistics().retried < 1:  # noqa: ASYNC110 - the runner's own counter
            await trio.sleep(0.01)
        assert await kept.cancel() is WorkflowState.CANCELLED, "nothing was running"
        with pytest.raises(WorkflowCancelled):
            await kept.result(timeout=0)
        with pytest.raises(trunner.TaskCancelled):  # it keeps a result: its record says so
            await kept.step_handle(0).result(timeout=0)
        plain = await runner.dispatch(chain(step(flaky, 2), step(double)))
        while runner.statistics().retried < 2:  # noqa: ASYNC110 - the runner's own counter
            await trio.sleep(0.01)
        assert await plain.cancel() is WorkflowState.CANCELLED
        with pytest.raises(WorkflowCancelled):
            await plain.result(timeout=0)
        with pytest.raises(trunner.errors.ResultNotFound):  # none: the workflow's keys tell
            await plain.step_handle(0).result(timeout=0)
    assert ran == [1, 2], "each ran once, its retry never"


@tasks.task(max_retry=0)
async def fails_once_flaky_waits(number: int) -> int:
    """Fails once ``flaky`` has failed and waits for its retry's backoff (an hour)."""
    await holding["retrying"].wait()
    ran.append(number)
    raise ValueError("for good")


async def _retried(runner: trunner.Runner) -> bool:
    await trio.lowlevel.checkpoint()
    if runner.statistics().retried >= 1:
        holding["retrying"].set()
        return True
    return False


async def test_a_failing_workflow_takes_out_its_steps_no_runner_holds_and_settles(
    url: str, group: str
) -> None:
    """Fail-fast while a sibling waits for its retry's backoff (an hour): the leader sweeps
    the failing workflow, so it settles now, not when the retry would be due."""
    fresh()
    holding["retrying"] = trio.Event()
    async with open_checked_runner(url, config(group), tasks) as runner:
        work = chord(wf.group([step(flaky, 1), step(fails_once_flaky_waits, 2)]), step(total))
        handle = await runner.dispatch(work)
        await redis_state(lambda: _retried(runner))
        with trio.fail_after(30), pytest.raises(trunner.WorkflowFailed) as caught:
            await handle.result()
        status = await handle.status()
    assert [f.task_name for f in caught.value.failures] == ["fails_once_flaky_waits"]
    assert (status.failed, status.cancelled, status.live) == (1, 1, 0)
    assert ran == [1, 2], "flaky's retry never ran"


async def test_a_bad_workflow_mark_is_passed_over_and_the_leaders_chores_go_on(
    url: str, group: str, raw: Any, keys: Keys
) -> None:
    """A cancel mark that names no workflow trunner writes ("<group> a b") is held when the
    runner starts: the leader's sweep passes over it, and its janitor's rounds go on."""
    fresh()
    holding["retrying"] = trio.Event()
    raw.hset(keys.cancelled, f"{group} a b", int(time.time() * 1000) + 60_000)
    async with open_checked_runner(url, config(group, janitor_interval=0.1), tasks) as runner:
        janitor = parts(runner).janitor
        with trio.fail_after(30):
            await janitor.wait_rounds(2)
        work = chord(wf.group([step(flaky, 1), step(fails_once_flaky_waits, 2)]), step(total))
        handle = await runner.dispatch(work)
        await redis_state(lambda: _retried(runner))
        with trio.fail_after(30), pytest.raises(trunner.WorkflowFailed):
            await handle.result()
