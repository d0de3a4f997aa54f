"""Workflows as users write them (trunner.workflows, WorkflowHandle): chains, groups and
chords dispatched from a client, run by a runner, with a nursery's semantics."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio

import trunner
from trunner import chain, chord, step
from trunner import workflows as wf
from trunner.errors import StepFailed, WorkflowCancelled, WorkflowFailed
from trunner.status import WorkflowState

from ..conftest import config, open_checked_runner, parts, redis_state


@attrs.frozen
class Page:
    url: str
    words: int


tasks = trunner.TaskRegistry()


@tasks.task()
async def fetch(url: str) -> Page:
    return Page(url, len(url))


@tasks.task()
async def count(page: Page) -> int:
    return page.words


@tasks.task()
async def total(counts: list[int]) -> int:
    return sum(counts)


@tasks.task()
async def double(number: int) -> int:
    return 2 * number


@tasks.task(max_retry=0)
async def broken(_: object) -> int:
    raise ValueError("broken")


#: Set when ``hang`` started (a new one per test).
started = {"hang": trio.Event()}


@tasks.task()
async def hang(_: object) -> int:
    started["hang"].set()
    await trio.sleep_forever()
    raise AssertionError


@tasks.task(unique=True, unique_for=60, unique_key=lambda key: key)
async def once(_: object) -> None:
    pass


async def test_a_typed_chain_gives_its_last_result(memory_url: str, group: str) -> None:
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        handle = await runner.dispatch(chain(step(fetch, "abcd"), step(count)))
        assert await handle.result() == 4
        status = await handle.status()
    assert (status.state, status.steps, status.succeeded, status.live) == (
        WorkflowState.SUCCEEDED,
        2,
        2,
        0,
    )


async def test_a_group_gives_its_list_and_a_chord_merges_it_once(
    memory_url: str, group: str
) -> None:
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        pages = wf.group(step(fetch, "x" * n) for n in range(1, 6))
        assert await (await runner.dispatch(pages)).result() == [
            Page("x" * n, n) for n in range(1, 6)
        ]
        counted = wf.group(chain(step(fetch, "y" * n), step(count)) for n in range(1, 6))
        merged = await runner.dispatch(chord(counted, step(total)))
        assert await merged.result() == 15
        assert runner.statistics().succeeded == 5 + 10 + 1


async def test_a_step_that_fails_fails_the_workflow_as_a_nursery_does(
    memory_url: str, group: str
) -> None:
    started["hang"] = trio.Event()
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        workflow = chord(wf.group([step(hang, 0), step(broken, 1)]), step(total))
        handle = await runner.dispatch(workflow)
        with pytest.raises(WorkflowFailed) as caught:
            await handle.result()
        status = await handle.status()
    failed = caught.value
    assert failed.workflow == handle.id
    assert failed.failed_count == 1
    (step_failed,) = failed.exceptions
    assert isinstance(step_failed, StepFailed)
    assert (step_failed.node, step_failed.task_name) == (1, "broken")
    assert step_failed.error.type_name == "ValueError"
    assert (status.failed, status.cancelled, status.succeeded) == (1, 1, 0), "hang cancelled"
    matched, rest = failed.split(StepFailed)  # what except* StepFailed does
    assert isinstance(matched, WorkflowFailed)
    assert matched.workflow == handle.id
    assert rest is None


async def test_without_fail_fast_the_other_branches_run_to_their_end(
    memory_url: str, group: str
) -> None:
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        workflow = wf.group(
            [chain(step(broken, 0), step(double)), chain(step(fetch, "ab"), step(count))]
        )
        handle = await runner.dispatch(workflow, fail_fast=False)
        with pytest.raises(WorkflowFailed):
            await handle.result()
        status = await handle.status()
    assert (status.succeeded, status.failed, status.cancelled) == (2, 1, 0)


async def test_cancel_cancels_the_running_steps_and_starts_no_more(
    memory_url: str, group: str
) -> None:
    started["hang"] = trio.Event()
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        handle = await runner.dispatch(chain(step(hang, 0), step(double)))
        await started["hang"].wait()
        assert await handle.cancel() in (WorkflowState.CANCELLING, WorkflowState.CANCELLED)
        with pytest.raises(WorkflowCancelled):
            await handle.result()
        assert await handle.cancel() is WorkflowState.CANCELLED
    assert runner.statistics().cancelled == 1


async def test_a_workflow_id_dispatches_once(memory_url: str, group: str) -> None:
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        first = await runner.dispatch(chain(step(fetch, "a"), step(count)), workflow_id="nightly")
        again = await runner.dispatch(chain(step(fetch, "zz"), step(count)), workflow_id="nightly")
        assert first == again == "nightly"
        assert await again.result() == 1
    assert runner.statistics().succeeded == 2, "the second dispatch added nothing"


async def test_what_cannot_run_is_refused_before_anything_is_written(
    memory_url: str, group: str
) -> None:
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        with pytest.raises(ValueError, match="needs its payload"):
            await runner.dispatch(chain(step(count), step(double)))  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="open step of a unique task"):
            await runner.dispatch(chain(step(fetch, "a"), step(once)))
        with pytest.raises(trunner.InvalidPayload):
            await runner.dispatch(chain(step(fetch, "a"), step(count, {"url": 1})))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="no payload"):
            await runner.dispatch(wf.group([step(fetch, "a")]), "payload")  # type: ignore[call-overload]
        assert await runner.admin.queue_length() == 0


async def test_a_wait_runs_out_and_says_where_the_workflow_was(memory_url: str, group: str) -> None:
    started["hang"] = trio.Event()
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        handle = await runner.dispatch(chain(step(hang, 0), step(double)))
        await started["hang"].wait()
        with pytest.raises(trunner.ResultTimeout, match="running"):
            await handle.result(timeout=0)
        await handle.cancel()
        with pytest.raises(WorkflowCancelled):
            await handle.result()


async def test_a_wide_chord_fans_in_every_result(memory_url: str, group: str) -> None:
    children = 300
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        header = wf.group(chain(step(fetch, "w" * (n % 7)), step(count)) for n in range(children))
        handle = await runner.dispatch(chord(header, step(total)))
        assert await handle.result() == sum(n % 7 for n in range(children))


async def test_a_step_cancelled_on_its_own_fails_its_workflow(memory_url: str, group: str) -> None:
    async with trunner.open_client(memory_url, group, tasks=tasks) as client:
        handle = await client.dispatch(chain(step(fetch, "a"), step(count)))
        first = handle.step_handle(0)
        assert await first.cancel() is trunner.CancelOutcome.CANCELLING, "marked, not removed"
        async with open_checked_runner(memory_url, config(group), tasks) as runner:
            with pytest.raises(WorkflowFailed) as caught:
                await handle.result()
        (failure,) = caught.value.failures
        assert (failure.node, failure.error.type_name) == (0, "StepCancelled")
        assert runner.statistics().cancelled == 1
        assert (await handle.status()).succeeded == 0, "the next step never started"


async def test_a_settled_workflows_mark_is_forgotten_and_its_id_can_run_again(
    memory_url: str, group: str
) -> None:
    """A failing workflow's mark cancels its steps; once it settled, the runners forget it
    (told on the cancel channel), so that a workflow dispatched again with the same id,
    after the first one's outcome expired, runs."""
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        first = await runner.dispatch(
            wf.group([step(broken, 0), step(fetch, "a")]), workflow_id="again", keep_result=0.2
        )
        with pytest.raises(WorkflowFailed):
            await first.result()
        marks = parts(runner).holdings.cancelled
        await redis_state(lambda: _forgotten(marks, f"{group} again"))
        await redis_state(lambda: _gone(first))
        second = await runner.dispatch(chain(step(fetch, "abc"), step(count)), workflow_id="again")
        assert await second.result() == 3


async def test_two_groups_workflows_of_one_id_on_one_queue_stay_apart(
    memory_url: str, group: str
) -> None:
    """Group a's workflow failing fast cancels its own steps, not those of group b's
    workflow of the same id on the same queue."""
    queue = f"{group}-q"
    started["hang"] = trio.Event()
    async with (
        open_checked_runner(memory_url, config("a", queue=queue), tasks) as a,
        open_checked_runner(memory_url, config("b", queue=queue), tasks) as b,
    ):
        other = await b.dispatch(chain(step(hang, 0), step(double)), workflow_id="same")
        await started["hang"].wait()
        failing = await a.dispatch(wf.group([step(broken, 0)]), workflow_id="same")
        with pytest.raises(WorkflowFailed):
            await failing.result()
        assert (await other.status()).state is WorkflowState.RUNNING, "b's goes on"
        await other.cancel()
        with pytest.raises(WorkflowCancelled):
            await other.result()


async def _forgotten(marks: dict[str, int], mark: str) -> bool:
    await trio.lowlevel.checkpoint()
    return mark not in marks


async def _gone(handle: trunner.WorkflowHandle[Any]) -> bool:
    return (await handle.status()).state is WorkflowState.UNKNOWN


async def test_failures_win_over_a_cancel_and_the_error_says_both(
    memory_url: str, group: str
) -> None:
    started["hang"] = trio.Event()
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        handle = await runner.dispatch(wf.group([step(broken, 0), step(hang, 1)]), fail_fast=False)
        await started["hang"].wait()
        await redis_state(lambda: _failed(handle, 1))
        assert await handle.cancel() is WorkflowState.CANCELLING
        with pytest.raises(WorkflowFailed) as caught:
            await handle.result()
    assert caught.value.cancelled, "an error is never lost: failed, and cancelled too"
    assert [f.task_name for f in caught.value.failures] == ["broken"]


async def _failed(handle: trunner.WorkflowHandle[Any], count: int) -> bool:
    return (await handle.status()).failed >= count


#: What ``joined`` was given, per run (a new list per test).
joined: list[Any] = []


@tasks.task()
async def combine(pair: tuple[Page, int]) -> str:
    joined.append(pair)
    page, words = pair
    return f"{page.url}:{words}"


@tasks.task()
async def collect(parts: list[Any]) -> list[Any]:
    joined.append(parts)
    return parts


async def test_a_diamonds_join_gets_both_inputs_in_order_once(memory_url: str, group: str) -> None:
    joined.clear()
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        g = trunner.Graph()
        a = g.add(step(fetch, "abc"))
        b = g.then(a, step(count))
        c = g.then(a, chain(step(count), step(double)))
        d = g.join(step(collect), c, b)
        handle = await runner.dispatch(g.returning(d))
        assert await handle.result() == [6, 3]
        by_name = wf.graph(
            {"d": (step(collect), ["b", "c"]), "a": step(fetch, "xy"), "b": (step(count), "a"),
             "c": (step(count), "a")}
        )  # fmt: skip
        assert await (await runner.dispatch(by_name)).result() == [2, 2]
    assert joined == [[6, 3], [2, 2]], "each join ran once, its parents' results in order"


async def test_a_typed_joins_tuple_arrives_typed(memory_url: str, group: str) -> None:
    joined.clear()
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        g = wf.Graph()
        page = g.add(step(fetch, "abcd"))
        words = g.then(page, step(count))
        handle = await runner.dispatch(g.returning(g.join(step(combine), page, words)))
        assert await handle.result() == "abcd:4"
    assert joined == [(Page("abcd", 4), 4)], "a tuple of a Page and an int, not lists"


async def test_a_failure_in_one_branch_of_a_graph_cancels_the_others_and_blocks_the_join(
    memory_url: str, group: str
) -> None:
    started["hang"] = trio.Event()
    joined.clear()
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        g = wf.Graph()
        a = g.add(step(fetch, "a"))
        waiting = g.then(a, step(hang))
        failing = g.then(a, step(broken))
        g.then(waiting, step(double))
        handle = await runner.dispatch(g.returning(g.join(step(collect), waiting, failing)))
        with pytest.raises(WorkflowFailed) as caught:
            await handle.result()
        status = await handle.status()
    assert [f.task_name for f in caught.value.failures] == ["broken"]
    assert (status.succeeded, status.failed, status.cancelled, status.live) == (1, 1, 1, 0)
    assert started["hang"].is_set(), "hang ran, and was cancelled"
    assert joined == [], "the join never started"


async def test_a_graph_inside_a_chain_waits_for_the_step_before_it(
    memory_url: str, group: str
) -> None:
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        g = wf.Graph()
        left = g.add(chain(step(fetch, "ab"), step(count)))
        right = g.add(step(double, 5))
        inner = g.returning(g.join(step(total), left, right))
        handle = await runner.dispatch(chain(step(fetch, "first"), inner, step(double)))
        assert await handle.result() == 2 * (2 + 10)
        status = await handle.status()
    assert (status.steps, status.succeeded) == (6, 6)
