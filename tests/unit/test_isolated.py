"""Isolated (trunner/_executors/isolated.py): a coroutine run step by step in its own context
inside a shared worker task, reporting its first wait, and otherwise awaited as if directly."""

from __future__ import annotations

import contextvars
from typing import Any

import outcome
import pytest
import trio
import trio.lowlevel

from trunner._executors.isolated import Isolated

var: contextvars.ContextVar[str] = contextvars.ContextVar("test_isolated_var")


def no_wait(_: object) -> None:
    pass


async def test_a_coroutine_that_never_waits_returns_without_a_wait_reported() -> None:
    waits: list[str] = []

    async def quick() -> int:
        return 42

    result = await Isolated(quick(), contextvars.copy_context(), waits.append, "waited")
    assert (result, waits) == (42, [])


async def test_the_first_wait_is_reported_once_before_it_reaches_trio() -> None:
    events: list[str] = []

    async def slow() -> str:
        events.append("started")
        await trio.lowlevel.checkpoint()
        events.append("resumed")
        await trio.sleep(0.01)
        return "done"

    result = await Isolated(slow(), contextvars.copy_context(), events.append, "wait")
    assert result == "done"
    assert events == ["started", "wait", "resumed"]


async def test_each_step_runs_in_the_given_context_and_leaves_the_callers_alone() -> None:
    var.set("caller")
    seen: list[str] = []

    async def job() -> None:
        seen.append(var.get())
        var.set("job")
        await trio.lowlevel.checkpoint()
        seen.append(var.get())  # still the job's own value after a suspension

    context = contextvars.copy_context()
    await Isolated(job(), context, lambda _: seen.append(var.get()), None)
    assert seen == ["caller", "caller", "job"], "the wait callback runs in the caller's context"
    assert var.get() == "caller"
    assert context[var] == "job"


async def test_trio_answers_reach_the_coroutine_unchanged() -> None:
    """Cancellation is delivered into the coroutine (it can clean up) and goes on out."""
    cleaned: list[type[BaseException]] = []

    async def waits_forever() -> None:
        try:
            await trio.sleep_forever()
        except BaseException as exc:
            cleaned.append(type(exc))
            raise

    with trio.move_on_after(0.01) as scope:
        await Isolated(waits_forever(), contextvars.copy_context(), no_wait, None)
    assert scope.cancelled_caught
    assert cleaned == [trio.Cancelled]

    async def fails() -> None:
        await trio.lowlevel.checkpoint()
        raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        await Isolated(fails(), contextvars.copy_context(), no_wait, None)


async def test_values_sent_back_by_trio_reach_the_coroutine() -> None:
    """A job parking its task and being woken with a value (a low-level primitive)."""
    woken: list[Any] = []

    def abort(_: Any) -> trio.lowlevel.Abort:
        return trio.lowlevel.Abort.FAILED

    async def park() -> None:
        trio.lowlevel.reschedule(trio.lowlevel.current_task(), outcome.Value("hello"))
        woken.append(await trio.lowlevel.wait_task_rescheduled(abort))

    await Isolated(park(), contextvars.copy_context(), no_wait, None)
    assert woken == ["hello"]


async def test_the_coroutines_frames_show_in_trios_task_introspection() -> None:
    """Stack dumps of a waiting worker show the task's own frames, as for a plain await."""
    parked = trio.Event()
    release = trio.Event()
    frames: list[str] = []

    async def user_task_body() -> None:
        parked.set()
        await release.wait()

    async def worker() -> None:
        await Isolated(user_task_body(), contextvars.copy_context(), no_wait, None)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker, name="worker")
        await parked.wait()
        [task] = [t for t in nursery.child_tasks if t.name == "worker"]
        frames = [frame.f_code.co_name for frame, _ in task.iter_await_frames()]
        release.set()
    assert frames[:2] == ["worker", "user_task_body"]
    assert "wait" in frames[2:]


async def test_closing_the_awaiting_coroutine_closes_the_job_in_its_context() -> None:
    var.set("caller")
    seen: list[str] = []

    async def job() -> None:
        var.set("job")
        try:
            await trio.lowlevel.checkpoint()
        finally:
            seen.append(var.get())

    async def outer() -> None:
        await Isolated(job(), contextvars.copy_context(), no_wait, None)

    coro = outer()
    coro.send(None)  # runs to the job's first suspension (a trap Trio would answer)
    coro.close()
    assert seen == ["job"]
