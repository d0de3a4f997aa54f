"""``trunner.testing.call_workflow``: a workflow run eagerly, without Redis, as runners run
it: the same payloads between steps, steps side by side in a nursery, the same outcome and
errors as a dispatched workflow's ``result()``."""

from __future__ import annotations

import attrs
import pytest
import trio

import trunner
from trunner import chain, chord, step
from trunner import workflows as wf
from trunner.errors import StepFailed, WorkflowFailed
from trunner.testing import call_workflow

from ..conftest import config, open_checked_runner


@attrs.frozen
class Page:
    url: str
    words: int


tasks = trunner.TaskRegistry()
ran: list[str] = []


@tasks.task()
async def fetch(url: str) -> Page:
    ran.append(f"fetch {url}")
    return Page(url, len(url))


@tasks.task()
async def count(page: Page) -> int:
    assert isinstance(page, Page)  # the typed result arrives typed
    return page.words


@tasks.task()
async def total(counts: list[int]) -> int:
    ran.append(f"total {counts}")
    return sum(counts)


@tasks.task(max_retry=0)
async def broken(_: object) -> int:
    raise ValueError("broken")


#: Set once ``hang`` runs (a new one per test).
hung: dict[str, trio.Event] = {}


@tasks.task(max_retry=0)
async def broken_once_hung(_: object) -> int:
    await hung["started"].wait()
    raise ValueError("broken")


#: The steps of ``meet`` that started, and the event the last one sets.
met: dict[str, object] = {}


@tasks.task()
async def meet(width: int) -> int:
    """Returns only once ``width`` of them run at the same time."""
    arrived = met.setdefault("arrived", [])
    assert isinstance(arrived, list)
    arrived.append(width)
    everyone = met.setdefault("everyone", trio.Event())
    assert isinstance(everyone, trio.Event)
    if len(arrived) == width:
        everyone.set()
    await everyone.wait()
    return len(arrived)


@tasks.task()
async def plus(number: int) -> int:
    ran.append(f"plus {number}")
    return number + 1


@tasks.task()
async def hang(_: object) -> int:
    hung["started"].set()
    ran.append("hang started")
    try:
        await trio.sleep_forever()
    finally:
        ran.append("hang ended")
    raise AssertionError


flaky_attempts: list[int] = []


@tasks.task(max_retry=2, retry_backoff=lambda _: 30.0)
async def flaky(number: int) -> int:
    flaky_attempts.append(number)
    if len(flaky_attempts) < 3:
        raise RuntimeError("not yet")
    return number + 1


@tasks.task(unique=True, unique_for=60, unique_key=lambda key: key)
async def once(_: object) -> None:
    pass


@pytest.fixture(autouse=True)
def forget() -> None:
    ran.clear()
    met.clear()
    hung["started"] = trio.Event()
    flaky_attempts.clear()


def words() -> wf.Step[object, int]:
    return chord(wf.group(chain(step(fetch, "x" * n), step(count)) for n in (3, 1, 2)), step(total))


async def test_a_chord_gives_what_a_runner_gives(memory_url: str, group: str) -> None:
    eager = await call_workflow(tasks, words())
    assert eager == 6
    assert ran[-1] == "total [3, 1, 2]"  # once, its inputs in the group's order
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        assert await (await runner.dispatch(words())).result() == eager
    typed = await call_workflow(tasks, chain(step(fetch, "abcd"), step(count)))
    assert typed == 4
    assert await call_workflow(tasks, wf.group(step(fetch, u) for u in "ab")) == [
        Page("a", 1),
        Page("b", 1),
    ]


async def test_a_bound_unique_step_runs_as_a_task_called_eagerly() -> None:
    # No lock: an eager call takes none (call_task); the step is checked as dispatch does.
    assert await call_workflow(tasks, chain(step(once, "k"), step(fetch, "a"))) == Page("a", 1)


async def test_a_groups_steps_run_side_by_side() -> None:
    with trio.fail_after(10):  # one after the other, the first would wait for ever
        assert await call_workflow(tasks, wf.group(step(meet, 3) for _ in range(3))) == [3, 3, 3]


async def test_a_failure_cancels_the_running_steps_as_a_nursery_does() -> None:
    failing = wf.group([step(hang, 0), step(broken_once_hung, 0)])
    with trio.fail_after(10), pytest.raises(WorkflowFailed) as caught:
        await call_workflow(tasks, chord(failing, step(total)))
    assert ran == ["hang started", "hang ended"]  # cancelled; the callback never ran
    [failure] = caught.value.failures
    assert isinstance(failure, StepFailed)
    assert (failure.node, failure.task_name, failure.attempt) == (1, "broken_once_hung", 1)
    assert (failure.error.type_name, failure.error.message) == ("ValueError", "broken")


async def test_without_fail_fast_only_the_steps_after_a_failure_are_blocked() -> None:
    work = wf.group([chain(step(broken, 0), step(plus)), chain(step(fetch, "ab"), step(count))])
    with trio.fail_after(10), pytest.raises(WorkflowFailed) as caught:
        await call_workflow(tasks, work, fail_fast=False)
    assert ran == ["fetch ab"]  # the other branch ran to its end; plus never started
    assert [f.node for f in caught.value.failures] == [0]


async def test_a_steps_retries_are_its_own() -> None:
    with trio.fail_after(10):  # the 30 s backoffs are not slept
        assert await call_workflow(tasks, chain(step(flaky, 1), step(flaky))) == 3
    assert flaky_attempts == [1, 1, 1, 2]


async def test_what_dispatch_refuses_is_refused_before_a_step_runs() -> None:
    with pytest.raises(ValueError, match="open step of a unique task"):
        await call_workflow(tasks, chain(step(fetch, "a"), step(once)))
    with pytest.raises(ValueError, match="payload"):
        await call_workflow(tasks, chain(step(fetch), step(count)))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await call_workflow(tasks, wf.group([step(fetch, "a")]), fail_fast=1)  # type: ignore[arg-type]
    assert ran == []


@tasks.task()
async def nap(seconds: float) -> float:
    await trio.sleep(seconds)
    return seconds


async def test_a_steps_own_timeout_and_headers_apply() -> None:
    seen: list[dict[str, str]] = []

    @tasks.task(name="look_at_headers")
    async def look(_: object) -> None:
        seen.append(dict(trunner.current_message().headers))

    await call_workflow(tasks, step(look, 0, headers={"tenant": "a"}))
    assert seen == [{"tenant": "a"}]
    with trio.fail_after(10), pytest.raises(WorkflowFailed) as caught:
        await call_workflow(tasks, step(nap, 3600.0, timeout=0.01))
    assert caught.value.failures[0].error.type_name == "TaskTimeout"


@tasks.task()
async def pair(both: tuple[Page, int]) -> str:
    page, number = both
    assert isinstance(page, Page)
    return f"{page.url}:{number}"


async def test_a_graphs_join_gets_its_parents_results_in_order() -> None:
    g = wf.Graph()
    page = g.add(step(fetch, "abc"))
    words = g.then(page, step(count))
    joined = g.join(step(pair), page, words)
    assert await call_workflow(tasks, g.returning(joined)) == "abc:3"
    named = wf.graph(
        {"p": step(fetch, "ab"), "n": (step(count), "p"), "j": (step(pair), ["p", "n"])}
    )
    assert await call_workflow(tasks, named) == "ab:2"
    assert ran == ["fetch abc", "fetch ab"]  # each node once


@tasks.task()
async def quick(number: int) -> int:
    ran.append(f"quick {number}")  # no checkpoint: a cancel cannot reach it
    return number


async def test_after_a_failure_no_step_starts_even_when_none_noticed_the_cancel() -> None:
    work = wf.group([step(broken, 1), chain(step(quick, 2), step(quick), step(quick))])
    with pytest.raises(WorkflowFailed):
        await call_workflow(tasks, work)
    assert ran.count("quick 2") <= 1, ran  # at most the one started with the failing step


async def test_a_bound_payload_is_checked_before_any_step_runs() -> None:
    with pytest.raises(trunner.errors.InvalidPayload):
        await call_workflow(tasks, chain(step(fetch, "a"), step(fetch, 42)))  # type: ignore[arg-type]
    with pytest.raises(trunner.errors.InvalidPayload):
        await call_workflow(tasks, chain(step(fetch, "a"), step(hang, {1, 2})))  # no JSON form
    assert ran == []


@tasks.task()
async def wants_a_runner(_: object) -> None:
    await hung["started"].wait()
    trunner.current_runner()


@tasks.task()
async def no_json(_: object) -> object:
    return {1, 2}


async def test_a_wrong_set_up_is_raised_bare_as_call_task_raises_it() -> None:
    with pytest.raises(trunner.errors.RunnerNotRunning):
        await call_workflow(tasks, wf.group([step(wants_a_runner, 0), step(hang, 0)]))
    assert ran == ["hang started", "hang ended"]


async def test_a_result_nothing_reads_is_not_encoded_as_on_a_runner() -> None:
    g = wf.Graph()
    a = g.add(step(quick, 1))
    g.then(a, step(no_json))
    assert await call_workflow(tasks, g.returning(a)) == 1
