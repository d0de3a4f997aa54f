"""Plain ``def`` tasks run in worker threads (trunner/_executors/threads.py).

Crosses _task.py (a ``def`` is accepted, ``run_in``), the pool and attempts.py (the body
comes from the task's executor), the thread executor's own limiter, eager mode, and the
outcome scripts (an abandoned thread's late return records nothing).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio

import trunner
from trunner import TaskState
from trunner._executors.threads import ThreadExecutor

from ..conftest import config, open_checked_runner, parts


class Latch:
    """A threading.Event the test awaits without blocking the event loop."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def set(self) -> None:
        self.event.set()

    async def wait(self) -> None:
        await trio.to_thread.run_sync(self.event.wait)


async def test_a_def_task_runs_in_a_worker_thread_and_sees_its_run(url: str, group: str) -> None:
    tasks = trunner.TaskRegistry()
    loop_thread = threading.get_ident()
    seen: dict[str, Any] = {}

    @tasks.task(keep_result=60)
    def convert(payload: dict[str, int]) -> dict[str, Any]:
        seen["thread"] = threading.get_ident()
        message = trunner.current_message()
        trio.from_thread.run(trunner.report_progress, 0.5, "half way")
        redis = trunner.current_runner().redis
        trio.from_thread.run(redis.set, f"{group}:converted", str(payload["n"]))
        stored = trio.from_thread.run(redis.get, f"{group}:converted")
        assert isinstance(stored, bytes)
        return {"task": message.task_name, "attempt": message.attempt, "stored": stored.decode()}

    assert tasks.get("convert").run_in == "thread"
    async with open_checked_runner(url, config(group), tasks) as runner:
        handle = await runner.dispatch("convert", {"n": 7})
        result = await handle.result()
        assert result == {"task": "convert", "attempt": 1, "stored": "7"}
        assert seen["thread"] != loop_thread
        status = await handle.status()
        assert status.state is TaskState.SUCCEEDED
        assert runner.statistics().succeeded == 1


async def test_a_timeout_fails_the_attempt_at_once_and_the_late_return_records_nothing(
    url: str, group: str
) -> None:
    tasks = trunner.TaskRegistry()
    entered, release, returned = Latch(), Latch(), Latch()

    @tasks.task(keep_result=60, timeout=0.2)
    def stuck(_: None) -> str:
        entered.set()
        release.event.wait()  # blocks its thread far past the timeout
        returned.set()
        return "late"

    async with open_checked_runner(url, config(group), tasks) as runner:
        handle = await runner.dispatch("stuck", None)
        with pytest.raises(trunner.TaskFailed) as info:
            await handle.result()  # while the thread is still blocked
        assert info.value.error.type_name == "TaskTimeout"  # type: ignore[attr-defined]
        assert not release.event.is_set()
        assert runner.statistics().dead_lettered == 1
        release.set()
        await returned.wait()  # the abandoned thread returned: its result goes nowhere
        await trio.testing.wait_all_tasks_blocked()
        stats = runner.statistics()
        assert (stats.succeeded, stats.failed, stats.dead_lettered) == (0, 1, 1)
        assert stats.threads_abandoned == 1
        assert (await handle.status()).state is TaskState.FAILED
        assert await runner.admin.dead_letter_count() == 1
        assert await runner.admin.pending_count() == 0


async def test_a_cancel_ends_the_attempt_at_once_and_a_checking_thread_stops_early(
    url: str, group: str
) -> None:
    tasks = trunner.TaskRegistry()
    entered, stopped = Latch(), Latch()

    @tasks.task(keep_result=60)
    def polling(_: None) -> str:
        entered.set()
        try:
            while True:
                trio.from_thread.check_cancelled()
                stopped.event.wait(0.01)
        except trio.Cancelled:
            stopped.set()
            raise

    async with open_checked_runner(url, config(group), tasks) as runner:
        handle = await runner.dispatch("polling", None)
        await entered.wait()
        await handle.cancel(wait=True)
        with pytest.raises(trunner.TaskCancelled):
            await handle.result()
        await stopped.wait()  # the thread saw the cancellation and stopped by itself
        assert runner.statistics().cancelled == 1


async def test_task_threads_have_a_limiter_of_their_own(memory_url: str, group: str) -> None:
    """With ``max_threads=1`` a second def task waits for the first's thread; the runner's
    own thread work (Trio's default limiter) never waits behind them."""
    tasks = trunner.TaskRegistry()
    first_in, release = Latch(), Latch()
    order: list[str] = []

    @tasks.task(keep_result=60)
    def hold(name: str) -> str:
        order.append(name)
        first_in.set()
        release.event.wait()
        return name

    async with open_checked_runner(
        memory_url, config(group, num_workers=4, max_threads=1), tasks
    ) as runner:
        a = await runner.dispatch("hold", "a")
        await first_in.wait()
        b = await runner.dispatch("hold", "b")
        threads = parts(runner).pool.executors["thread"]
        assert isinstance(threads, ThreadExecutor)
        while threads.limiter.statistics().tasks_waiting < 1:  # noqa: ASYNC110 - b's attempt
            await trio.sleep(0.01)  # waits for the thread (no event to await on a limiter)
        default = trio.to_thread.current_default_thread_limiter()
        # the runner's own threads are free while the task thread is taken
        assert await trio.to_thread.run_sync(lambda: "free") == "free"
        assert default.borrowed_tokens == 0
        assert order == ["a"], "b waits for the one task thread"
        release.set()
        assert (await a.result(), await b.result()) == ("a", "b")


async def test_an_eager_call_runs_a_def_task_in_a_thread() -> None:
    tasks = trunner.TaskRegistry()
    loop_thread = threading.get_ident()

    @tasks.task(timeout=5)
    def where(n: int) -> dict[str, Any]:
        return {
            "n": n,
            "thread": threading.get_ident() != loop_thread,
            "task": trunner.current_message().task_name,
        }

    assert await tasks.call(where, 3) == {"n": 3, "thread": True, "task": "where"}


def test_a_def_returning_an_awaitable_fails_with_a_hint() -> None:
    async def later() -> None:
        pass

    def wrong(_: None) -> Any:
        return later()

    tasks = trunner.TaskRegistry()
    tasks.task(wrong)

    async def main() -> None:
        with pytest.raises(trunner.MaxRetryExceeded) as info:
            await tasks.call("wrong", None)
        assert isinstance(info.value.__cause__, TypeError)
        assert "async def" in str(info.value.__cause__)

    trio.run(main)
