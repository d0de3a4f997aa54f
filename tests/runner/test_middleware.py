"""Middleware on a runner and a client: around each attempt (order, outcomes, errors
contained, cancellation not swallowable) and at each dispatch (headers added, errors
refusing the dispatch)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

import trunner
from trunner import CancelOutcome, TaskState
from trunner.middleware import AttemptOutcome
from trunner.testing import capture_errors, run_until_idle

from ..conftest import config, open_checked_runner, parts, redis_state


class Journal(trunner.Middleware):
    """Records each attempt it wraps and what it saw; tests await counts."""

    def __init__(self, name: str, log: list[Any]) -> None:
        self.name = name
        self.log = log
        self.exits: list[trunner.middleware.AttemptInfo] = []
        self._lot = trio.lowlevel.ParkingLot()

    @contextlib.asynccontextmanager
    async def around_attempt(self, attempt: trunner.middleware.AttemptInfo) -> AsyncIterator[None]:
        self.log.append((self.name, "enter", attempt.attempt))
        try:
            yield
        finally:
            self.log.append((self.name, "exit", attempt.attempt, attempt.outcome))
            self.exits.append(attempt)
            self._lot.unpark_all()

    async def wait(self, count: int) -> None:
        while len(self.exits) < count:
            await self._lot.park()


class Stamp(trunner.Middleware):
    """A dispatch hook adding a header, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def on_dispatch(self, dispatch: trunner.middleware.DispatchInfo) -> None:
        self.calls += 1
        dispatch.headers["stamp"] = f"{dispatch.group}:{dispatch.task_name}:{self.calls}"


class Swallower(trunner.Middleware):
    """Swallows whatever the attempt raises (which it may not)."""

    @contextlib.asynccontextmanager
    async def around_attempt(self, attempt: trunner.middleware.AttemptInfo) -> AsyncIterator[None]:
        with contextlib.suppress(BaseException):
            yield


class FailsOnExit(trunner.Middleware):
    def __init__(self, error: Exception) -> None:
        self.error = error

    @contextlib.asynccontextmanager
    async def around_attempt(self, attempt: trunner.middleware.AttemptInfo) -> AsyncIterator[None]:
        yield
        raise self.error


def registry(started: trio.Event | None = None) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def answer(payload: Any) -> Any:
        return {"answer": payload, "headers": dict(trunner.current_message().headers)}

    @tasks.task(max_retry=1, retry_backoff=0.01)
    async def fails_once(payload: Any) -> None:
        if trunner.current_message().attempt == 1:
            raise RuntimeError("first attempt")

    @tasks.task(max_retry=1, retry_backoff=0.01)
    async def succeeds(payload: Any) -> str:
        return "ok"

    @tasks.task(timeout=0.05)
    async def too_slow(payload: Any) -> None:
        await trio.sleep_forever()

    @tasks.task(keep_result=60)
    async def hangs(payload: Any) -> None:
        assert started is not None
        started.set()
        await trio.sleep_forever()

    return tasks


async def test_middleware_wraps_each_attempt_first_outermost(url: str, group: str) -> None:
    log: list[Any] = []
    outer, inner = Journal("outer", log), Journal("inner", log)
    cfg = config(group, middleware=[outer, inner])
    async with open_checked_runner(url, cfg, registry()) as runner:
        with capture_errors(runner) as errors:
            await runner.dispatch("fails_once", None, headers={"k": "v"})
            await outer.wait(2)
            errors.expect(RuntimeError)
        await run_until_idle(runner)
    assert log == [
        ("outer", "enter", 1),
        ("inner", "enter", 1),
        ("inner", "exit", 1, AttemptOutcome.FAILED),
        ("outer", "exit", 1, AttemptOutcome.FAILED),
        ("outer", "enter", 2),
        ("inner", "enter", 2),
        ("inner", "exit", 2, AttemptOutcome.SUCCEEDED),
        ("outer", "exit", 2, AttemptOutcome.SUCCEEDED),
    ]
    first, second = outer.exits
    assert isinstance(first.error, RuntimeError)
    assert (first.attempt, second.attempt) == (1, 2)
    assert first.task_id == second.task_id
    assert first.message_id != second.message_id
    assert first.headers == second.headers == {"k": "v"}
    assert first.group == group
    assert first.task_name == "fails_once"


async def test_middleware_sees_the_result_and_a_timeout(url: str, group: str) -> None:
    journal = Journal("j", [])
    async with open_checked_runner(url, config(group, middleware=[journal]), registry()) as runner:
        with capture_errors(runner) as errors:
            await runner.dispatch("answer", 42)
            await runner.dispatch("too_slow", None)
            await journal.wait(2)

            async def dead_lettered() -> bool:
                return await runner.admin.dead_letter_count() == 1

            await redis_state(dead_lettered)  # after its only attempt
            errors.clear()
        await run_until_idle(runner)
    by_task = {a.task_name: a for a in journal.exits}
    assert by_task["answer"].outcome is AttemptOutcome.SUCCEEDED
    assert by_task["answer"].result == {"answer": 42, "headers": {}}
    assert by_task["too_slow"].outcome is AttemptOutcome.TIMED_OUT
    assert isinstance(by_task["too_slow"].error, trunner.TaskTimeout)


async def test_an_error_of_a_middleware_fails_the_attempt_and_follows_the_retry_rules(
    url: str, group: str
) -> None:
    cfg = config(group, middleware=[FailsOnExit(ValueError("middleware bug"))])
    async with open_checked_runner(url, cfg, registry()) as runner:
        with capture_errors(runner) as errors:
            await runner.dispatch("succeeds", None)

            async def dead_lettered() -> bool:
                return await runner.admin.dead_letter_count() == 1

            await redis_state(dead_lettered)
            errors.clear()
        await run_until_idle(runner)
        stats = runner.statistics()
        (letter,) = await runner.admin.dead_letters()
    assert (stats.failed, stats.retried, stats.dead_lettered) == (2, 1, 1)
    assert letter.cause == "ValueError: middleware bug"
    assert letter.reason == "max retries exceeded"


async def test_a_middleware_may_give_a_task_up_by_raising_give_up(url: str, group: str) -> None:
    cfg = config(group, middleware=[FailsOnExit(trunner.GiveUp("refused by policy"))])
    async with open_checked_runner(url, cfg, registry()) as runner:
        with capture_errors(runner) as errors:
            await runner.dispatch("succeeds", None)

            async def dead_lettered() -> bool:
                return await runner.admin.dead_letter_count() == 1

            await redis_state(dead_lettered)
            errors.clear()
        await run_until_idle(runner)
        assert runner.statistics().retried == 0


class OwnTimeLimit(trunner.Middleware):
    """Bounds each attempt with a cancel scope of its own, which swallows its Cancelled."""

    @contextlib.asynccontextmanager
    async def around_attempt(self, attempt: trunner.middleware.AttemptInfo) -> AsyncIterator[None]:
        with trio.move_on_after(0.05):
            yield


async def test_a_middleware_cancel_scope_fails_the_attempt_it_cancels(url: str, group: str) -> None:
    # The Cancelled went on up past the middleware as if the task had been cancelled:
    # no scope caught it, the message was never acknowledged nor retried and stayed
    # pending (run_until_idle timed out).
    tasks = trunner.TaskRegistry()

    @tasks.task(keep_result=60)
    async def hangs(payload: Any) -> None:
        await trio.sleep_forever()

    journal = Journal("outer", [])
    cfg = config(group, middleware=[journal, OwnTimeLimit()])
    async with open_checked_runner(url, cfg, tasks) as runner:
        with capture_errors(runner) as errors:
            handle = await runner.dispatch("hangs", None)

            async def dead_lettered() -> bool:
                return await runner.admin.dead_letter_count() == 1

            await redis_state(dead_lettered)
            errors.clear()
        await run_until_idle(runner)
        stats = runner.statistics()
        (letter,) = await runner.admin.dead_letters()
        state = (await handle.status()).state
    (seen,) = journal.exits
    assert seen.outcome is AttemptOutcome.FAILED
    assert isinstance(seen.error, trunner.errors.MiddlewareError)
    assert (stats.failed, stats.cancelled, stats.dead_lettered) == (1, 0, 1)
    assert letter.cause.startswith("MiddlewareError: the attempt of task 'hangs'")
    assert state is TaskState.FAILED


async def test_a_swallowed_task_error_stands_and_is_reported(url: str, group: str) -> None:
    journal = Journal("inner", [])
    cfg = config(group, middleware=[Swallower(), journal])
    async with open_checked_runner(url, cfg, registry()) as runner:
        with capture_errors(runner) as errors:
            await runner.dispatch("fails_once", None)
            await journal.wait(2)
            broken = await errors.wait_for(trunner.errors.MiddlewareError, "Swallower swallowed")
            assert isinstance(broken.__cause__, RuntimeError)
            errors.clear()
        await run_until_idle(runner)
        stats = runner.statistics()
    assert (stats.failed, stats.retried, stats.succeeded) == (1, 1, 1), "retried all the same"


async def test_a_cancellation_cannot_be_swallowed(url: str, group: str) -> None:
    started = trio.Event()
    journal = Journal("inner", [])
    cfg = config(group, middleware=[Swallower(), journal])
    async with open_checked_runner(url, cfg, registry(started)) as runner:
        with capture_errors(runner) as errors:
            handle = await runner.dispatch("hangs", None)
            await started.wait()
            assert await handle.cancel(wait=True) is CancelOutcome.CANCELLING
            with pytest.raises(trunner.TaskCancelled):
                await handle.result()
            broken = errors.expect(trunner.errors.MiddlewareError, "swallowed a cancellation")
            assert isinstance(broken.__cause__, trio.Cancelled)
        assert (await handle.status()).state is TaskState.CANCELLED
        assert journal.exits[0].outcome is AttemptOutcome.CANCELLED
        stats = runner.statistics()
        assert (stats.cancelled, stats.failed, stats.succeeded) == (1, 0, 0)
        await run_until_idle(runner)


async def test_dispatch_hooks_add_headers_once_per_message(url: str, group: str) -> None:
    stamp = Stamp()
    cfg = config(group, middleware=[stamp])
    async with open_checked_runner(url, cfg, registry()) as runner:
        handle = await runner.dispatch("answer", 1, keep_result=60)
        assert (await handle.result())["headers"] == {"stamp": f"{group}:answer:1"}
        many = await runner.dispatch_many("answer", [2, 3], headers={"k": "v"}, keep_result=60)
        results = [await h.result() for h in many]
        assert [r["headers"] for r in results] == [
            {"k": "v", "stamp": f"{group}:answer:2"},
            {"k": "v", "stamp": f"{group}:answer:3"},
        ]
        async with trunner.open_client(url, group, middleware=[stamp]) as client:
            handle = await client.dispatch_delayed("answer", 4, 0, keep_result=60)
            assert (await handle.result())["headers"] == {"stamp": f"{group}:answer:4"}
        await run_until_idle(runner)
    assert stamp.calls == 4


async def test_a_dispatch_hook_that_raises_writes_nothing(url: str, group: str) -> None:
    class Broken(trunner.Middleware):
        def on_dispatch(self, dispatch: trunner.middleware.DispatchInfo) -> None:
            if dispatch.payload == 2:
                raise LookupError("no tenant")

    async with trunner.open_client(url, group, middleware=[Broken()]) as client:
        with pytest.raises(trunner.errors.MiddlewareError, match="no tenant") as caught:
            await client.dispatch_many("answer", [1, 2, 3])
        assert isinstance(caught.value.__cause__, LookupError)
        with pytest.raises(trunner.errors.MiddlewareError):
            await client.dispatch("answer", 2)
        with pytest.raises(trunner.errors.MiddlewareError):
            await client.dispatch_delayed("answer", 2, 10)
        assert await client.admin.queue_length() == 0
        assert await client.admin.delayed_count() == 0


async def test_without_attempt_hooks_the_pool_keeps_its_hot_path(url: str, group: str) -> None:
    """No middleware, or only dispatch hooks: the pool runs tasks as it always did."""
    for middleware in ([], [Stamp()]):
        cfg = config(group, middleware=middleware)
        async with open_checked_runner(url, cfg, registry()) as runner:
            assert parts(runner).pool._attempt_hooks is None
    cfg = config(group, middleware=[Journal("j", [])])
    async with open_checked_runner(url, cfg, registry()) as runner:
        assert parts(runner).pool._attempt_hooks is not None
