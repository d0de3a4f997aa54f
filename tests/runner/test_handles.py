"""Task handles: typed dispatch, results, status, timeouts, expiry, progress, giving up.

Crosses _producer/ (dispatch encodes and validates, returns the handle), handles.py (the
handle and the waiters), pool.py and outcomes.py (a task's options, its outcome record),
acks.py and the ack/retry/dead-letter scripts (the outcome is written with the ack),
progress.py and status.py. Cancellation has its own module (test_cancel.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import decimal
import enum
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any, TypedDict

import attrs
import pytest
import trio

import trunner
from trunner import TaskState
from trunner.keys import Keys
from trunner.testing import run_until_idle

from ..conftest import Gate, config, open_checked_runner, raw_client, redis_state


class Size(enum.Enum):
    SMALL = "small"
    LARGE = "large"


@attrs.frozen
class ResizeRequest:
    path: str
    width: int
    size: Size
    at: datetime.datetime
    price: decimal.Decimal


@dataclasses.dataclass(frozen=True)
class Thumbnail:
    path: str
    id: uuid.UUID
    made: datetime.datetime


class Totals(TypedDict):
    count: int
    names: list[str]


def request(width: int = 3) -> ResizeRequest:
    return ResizeRequest(
        "a.png",
        width,
        Size.LARGE,
        datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC),
        decimal.Decimal("1.50"),
    )


def registry(gate: Gate | None = None) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.task(keep_result=60)
    async def resize(req: ResizeRequest) -> Thumbnail:
        assert isinstance(req.at, datetime.datetime)
        assert isinstance(req.size, Size)
        assert isinstance(req.price, decimal.Decimal)
        return Thumbnail(f"{req.path}.{req.width}", uuid.UUID(int=req.width), req.at)

    @tasks.task(keep_result=60)
    async def totals(names: list[str]) -> Totals:
        return {"count": len(names), "names": sorted(names)}

    @tasks.task
    async def unkept(n: int) -> int:
        return n

    @tasks.task(keep_result=60, max_retry=1, retry_backoff=0.05)
    async def boom(message: str) -> None:
        raise ValueError(message)

    @tasks.task(keep_result=60)
    async def nothing(_: None) -> None:
        return None

    @tasks.task(keep_result=60, max_retry=2, retry_backoff=0.05)
    async def gives_up(_: None) -> None:
        raise trunner.GiveUp("the file is gone")

    @tasks.task(keep_result=60, max_retry=2, retry_backoff=0.05, give_up_on=(KeyError,))
    async def lookup(key: str) -> str:
        return {"a": "found"}[key]

    @tasks.task(keep_result=60, max_retry=2, retry_backoff=0.05)
    async def unjsonable(_: None) -> Any:
        return {"value": object()}

    @tasks.task(keep_result=60, timeout=0.2, max_retry=1, retry_backoff=0.05)
    async def slow(seconds: float) -> str:
        await trio.sleep(seconds)
        return "done"

    @tasks.task(keep_result=60)
    async def own(_: None) -> str:
        handle = trunner.current_runner().handle(trunner.current_message().task_id)
        try:
            await handle.result()
        except trunner.errors.SelfWait:
            return "refused"
        return "waited"

    if gate is not None:

        @tasks.task(keep_result=60)
        async def gated(payload: Any) -> str:
            gate.enter(payload)
            await trunner.report_progress(0.25, "quarter")
            await trunner.report_progress(0.5, "half way")  # within the interval: kept
            await gate.open.wait()
            return "opened"

    return tasks


async def test_a_typed_result_comes_back_as_its_declared_type(url: str, group: str) -> None:
    tasks = registry()
    async with open_checked_runner(url, config(group), tasks) as runner:
        handle = await runner.dispatch(tasks.get("resize").action, request(4))
        thumbnail = await handle.result()
        assert thumbnail == Thumbnail("a.png.4", uuid.UUID(int=4), request().at)
        assert type(thumbnail) is Thumbnail
        assert type(thumbnail.id) is uuid.UUID
        assert thumbnail.made.tzinfo is not None

        typed = await runner.dispatch("totals", ["b", "a"])
        assert await typed.result() == {"count": 2, "names": ["a", "b"]}


async def test_the_handle_is_the_task_id(url: str, group: str, keys: Keys) -> None:
    async with open_checked_runner(url, config(group), registry()) as runner:
        handle = await runner.dispatch("totals", ["x"])
        assert isinstance(handle, str)
        assert handle == handle.id
        assert repr(handle) == f"<TaskHandle {handle.id!r}>"
        await handle.result()
        status = await runner.handle(str(handle)).status()
        assert status.id == handle
        assert status.state is TaskState.SUCCEEDED
        raw = raw_client(url)
        try:
            assert raw.exists(keys.task(handle)) == 1
        finally:
            raw.close()


async def test_a_handle_made_from_an_id_decodes_by_the_task_it_is_given(
    url: str, group: str
) -> None:
    tasks = registry()
    resize = tasks.get("resize")
    assert resize is not None
    async with open_checked_runner(url, config(group), tasks) as runner:
        task_id = str(await runner.dispatch("resize", request(2)))
        async with trunner.open_client(url, group) as client:
            typed = await client.handle(task_id, resize.action).result()
            plain = await client.handle(task_id).result()
        assert typed == Thumbnail("a.png.2", uuid.UUID(int=2), request().at)
        assert plain == {
            "path": "a.png.2",
            "id": str(uuid.UUID(int=2)),
            "made": "2026-12-01T12:00:00Z",
        }


async def test_a_payload_that_does_not_match_is_refused_at_dispatch_and_nothing_is_sent(
    url: str, group: str
) -> None:
    async with open_checked_runner(url, config(group), registry()) as runner:
        with pytest.raises(trunner.InvalidPayload) as info:
            await runner.dispatch("resize", {"path": "a", "width": "wide"})
        assert "ResizeRequest" in str(info.value)
        with pytest.raises(trunner.InvalidPayload, match="width"):
            await runner.dispatch("resize", {"path": "a", "width": "wide"})
        assert await runner.admin.queue_length() == 0


async def test_a_payload_that_does_not_validate_on_the_runner_is_given_up_with_the_path(
    url: str, group: str
) -> None:
    """A client that does not know the task's types sends what it is given: the runner
    validates, and gives the task up at once (retrying cannot fix a payload)."""
    handled: list[BaseException] = []

    async def handler(_: trunner.TaskMessage, error: BaseException) -> None:
        handled.append(error)

    cfg = config(group, failed_task_handler=handler)
    async with open_checked_runner(url, cfg, registry()) as runner:
        async with trunner.open_client(url, group) as client:
            handle = await client.dispatch("resize", {"path": "a", "width": "wide"})
            with pytest.raises(trunner.TaskFailed) as info:
                await handle.result()
            assert (await handle.status()).state is TaskState.DEAD
        remote = info.value.error
        assert isinstance(remote, trunner.errors.RemoteFailure)
        assert remote.type_name == "InvalidPayload"
        assert "$.width" in remote.message
        assert await runner.admin.dead_letter_count() == 1
        assert len(handled) == 1
        assert isinstance(handled[0], trunner.InvalidPayload)


async def test_a_failure_keeps_its_type_message_and_traceback(url: str, group: str) -> None:
    async with open_checked_runner(url, config(group), registry()) as runner:
        handle = await runner.dispatch("boom", "out of paper")
        with pytest.raises(trunner.TaskFailed) as info:
            await handle.result()
        failure = info.value
        assert failure.task_name == "boom"
        assert failure.attempt == 2
        assert isinstance(failure.error, trunner.errors.RemoteFailure)
        assert failure.error.type_name == "ValueError"
        assert failure.error.message == "out of paper"
        assert "raise ValueError(message)" in failure.error.traceback
        status = await handle.status()
        assert status.state is TaskState.FAILED
        assert status.attempt == 2
        assert status.error is not None
        assert status.error.type == "ValueError"
        assert status.finished_at is not None
        assert status.started_at is not None


async def test_a_retrying_task_says_so_with_its_last_error(url: str, group: str) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task(keep_result=60, max_retry=1, retry_backoff=3600)
    async def flaky(_: None) -> None:
        raise RuntimeError("not yet")

    async with open_checked_runner(url, config(group), tasks) as runner:
        handle = await runner.dispatch(flaky, None)
        await redis_state(lambda: _state_is(handle, TaskState.RETRYING))
        status = await handle.status()
        assert status.attempt == 2
        assert status.due_at is not None
        assert status.error is not None
        assert status.error.message == "not yet"
        with pytest.raises(trio.TooSlowError, match=r"it was retrying \(attempt 2\)"):
            await handle.result(timeout=0.2)  # a retrying task has no outcome yet
        assert await handle.cancel() is trunner.CancelOutcome.REMOVED


async def _state_is(handle: trunner.TaskHandle[Any], state: TaskState) -> bool:
    return (await handle.status()).state is state


async def test_a_task_that_keeps_no_result_has_none_to_give(url: str, group: str) -> None:
    async with open_checked_runner(url, config(group), registry()) as runner:
        handle = await runner.dispatch("unkept", 5)
        await run_until_idle(runner)
        with pytest.raises(trunner.ResultNotFound, match="keep_result"):
            await handle.result()
        assert (await handle.status()).state is TaskState.UNKNOWN
        kept = await runner.dispatch("unkept", 6, keep_result=30)
        assert await kept.result() == 6
        with pytest.raises(trunner.ResultNotFound):
            await runner.handle("no-such-task").result()


async def test_a_waiter_on_a_task_that_keeps_no_result_is_told_when_it_finished(
    url: str, group: str
) -> None:
    """The finished-tasks channel announces every finished task, not only kept ones: a
    waiter on a queued task learns there is nothing to wait for."""
    async with trunner.open_client(url, group) as client:
        handle = await client.dispatch("unkept", 1)
        outcome: list[BaseException] = []
        told = trio.Event()

        async def wait() -> None:
            try:
                await handle.result()
            except trunner.ResultNotFound as exc:
                outcome.append(exc)
            told.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await client._open_waiters().subscribed()
            async with open_checked_runner(url, config(group), registry()):
                await told.wait()
        assert isinstance(outcome[0], trunner.ResultNotFound)


async def test_a_result_not_kept_is_told_from_one_expired_and_from_an_unknown_id(
    url: str, group: str, keys: Keys
) -> None:
    """Nothing is stored for a task that keeps no result; its handle knows, from its
    dispatch, whether the task keeps one: it tells a result never kept (naming
    keep_result) from one kept and gone, and both from an id it knows nothing of."""
    async with open_checked_runner(url, config(group), registry()) as runner:
        unkept = await runner.dispatch("unkept", 5)
        kept = await runner.dispatch("totals", ["a"])  # its task keeps it 60 s
        asked = await runner.dispatch("unkept", 6, keep_result=30)
        await run_until_idle(runner)
        with pytest.raises(trunner.errors.ResultNotKept, match="keeps no result") as not_kept:
            await unkept.result()
        assert "keep_result=SECONDS" in str(not_kept.value)
        assert isinstance(not_kept.value, trunner.ResultNotFound)
        assert (not_kept.value.task_id, not_kept.value.task_name) == (unkept.id, "unkept")
        assert await kept.result() == {"count": 1, "names": ["a"]}
        assert await asked.result() == 6
        raw = raw_client(url)
        try:
            raw.delete(keys.task(kept), keys.task(asked))  # as if they expired
        finally:
            raw.close()
        with pytest.raises(trunner.errors.ResultExpired, match=r"60 s .*declared here") as expired:
            await kept.result()
        assert expired.value.keep_result == 60
        with pytest.raises(trunner.errors.ResultExpired, match=r"30 s .*its dispatch"):
            await asked.result()
        for unknown in (runner.handle("no-such-task"), runner.handle(str(unkept))):
            with pytest.raises(trunner.ResultNotFound, match="nothing is known") as caught:
                await unknown.result()
            assert type(caught.value) is trunner.ResultNotFound
        # Given the task, a handle made from an id knows what the task keeps, not whether
        # the id was ever dispatched: it does not claim to.
        with pytest.raises(trunner.ResultNotFound, match="nothing is known") as caught:
            await runner.handle(str(unkept), "unkept").result()
        assert type(caught.value) is trunner.ResultNotFound


async def test_a_handle_made_from_an_id_learns_from_the_message_it_sees(
    url: str, group: str
) -> None:
    """A handle made from a bare id that saw the task's message (while it was queued, or
    as its entry left in the stream) knows it was dispatched, and what it keeps."""
    tasks = registry()
    async with trunner.open_client(url, group, tasks=tasks) as client:
        gone = await client.dispatch("unkept", 1)
        left = await client.dispatch("unkept", 2)
        seen = client.handle(str(gone))
        with pytest.raises(trunner.ResultTimeout, match="queued"):
            await seen.result(timeout=0)
        async with open_checked_runner(url, config(group), tasks) as runner:
            await run_until_idle(runner)
        with pytest.raises(trunner.errors.ResultNotKept, match="'unkept'"):
            await seen.result()
        with pytest.raises(trunner.ResultNotFound, match="nothing is known"):
            await client.handle(str(left)).result()  # it saw nothing: it cannot tell
        left = await client.dispatch("unkept", 3)
        async with open_checked_runner(url, config(group, delete_on_ack=False), tasks) as runner:
            await run_until_idle(runner)
        # Its entry stays in the stream, acknowledged: a fresh handle reads it there.
        with pytest.raises(trunner.errors.ResultNotKept, match="'unkept'"):
            await client.handle(str(left)).result()


async def test_a_task_dispatched_by_a_name_the_client_does_not_know_is_not_called_unkept(
    url: str, group: str
) -> None:
    """A client without a registry cannot tell whether the task keeps its result, nor
    whether the runners know the name: the error says so, and where to look."""
    async with (
        open_checked_runner(url, config(group), registry()) as runner,
        trunner.open_client(url, group) as client,
    ):
        misspelt = await client.dispatch("unkpet", 1)
        unkept = await client.dispatch("unkept", 1)
        await run_until_idle(runner)
        for handle, name in ((misspelt, "'unkpet'"), (unkept, "'unkept'")):
            with pytest.raises(trunner.ResultNotFound, match="dead letters") as caught:
                await handle.result()
            assert type(caught.value) is trunner.ResultNotFound
            assert "keep_result" in str(caught.value)
            assert name in str(caught.value)


async def test_result_none_is_a_result(url: str, group: str) -> None:
    async with open_checked_runner(url, config(group), registry()) as runner:
        assert await (await runner.dispatch("nothing", None)).result() is None


async def test_result_with_a_timeout_gives_up_waiting_not_the_task(url: str, group: str) -> None:
    gate = Gate()
    async with open_checked_runner(url, config(group), registry(gate)) as runner:
        handle = await runner.dispatch("gated", 1)
        with pytest.raises(trio.TooSlowError):
            await handle.result(timeout=0.1)
        gate.open.set()
        assert await handle.result() == "opened"


async def test_a_result_wait_that_times_out_says_what_it_waited_for(url: str, group: str) -> None:
    gate = Gate()
    async with open_checked_runner(url, config(group), registry(gate)) as runner:
        handle = await runner.dispatch("gated", 1)
        await gate.wait_started()
        with pytest.raises(trio.TooSlowError) as caught:
            await handle.result(timeout=0.1)
        error = caught.value
        assert isinstance(error, trunner.ResultTimeout)
        assert str(error).startswith(
            f"no outcome of task {handle} ('gated') within 0.1 s: at the last look it was "
            f"running on {runner.consumer_name} (the task goes on"
        )
        assert (error.task_id, error.task_name, error.timeout) == (handle.id, "gated", 0.1)
        assert error.state is TaskState.RUNNING
        gate.open.set()
        assert await handle.result() == "opened"
    async with trunner.open_client(url, group) as client:  # no registry: named by its message
        queued = await client.dispatch("gated", 2)
        for waited in (queued, client.handle(str(queued))):
            with pytest.raises(
                trunner.ResultTimeout, match="within 0 s: at the last look it was queued"
            ) as late:
                await waited.result(timeout=0)
            assert late.value.task_name == "gated"
            assert late.value.state is TaskState.QUEUED


async def test_a_running_task_shows_its_instance_attempt_and_progress(url: str, group: str) -> None:
    gate = Gate()
    async with open_checked_runner(url, config(group), registry(gate)) as runner:
        handle = await runner.dispatch("gated", 1)
        await gate.wait_started()
        seen: list[trunner.TaskStatus] = []
        await redis_state(lambda: _shows_progress(handle, seen))
        status = seen[-1]  # one read: the record as one script saw it
        assert status.state is TaskState.RUNNING
        assert status.task == "gated"
        assert status.attempt == 1
        assert status.instance == runner.consumer_name
        # The first report is written at once; the running record, written with the next
        # flush, may carry the later one already: a read shows one of them, whole.
        assert (status.progress, status.progress_message) in {
            (0.25, "quarter"),
            (0.5, "half way"),
        }
        assert status.started_at is not None
        gate.open.set()
        await handle.result()
        done = await handle.status()
        assert done.state is TaskState.SUCCEEDED
        # the report kept within the interval is written with the outcome
        assert done.progress == 0.5
        assert done.progress_message == "half way"


async def _shows_progress(handle: trunner.TaskHandle[Any], seen: list[trunner.TaskStatus]) -> bool:
    seen.append(await handle.status())
    return seen[-1].progress is not None


async def test_scheduled_and_queued_states(url: str, group: str) -> None:
    async with trunner.open_client(url, group) as client:
        later = await client.dispatch_delayed("totals", ["a"], 3600)
        status = await later.status()
        assert status.state is TaskState.SCHEDULED
        assert status.task == "totals"
        assert status.due_at is not None
        assert status.enqueued_at is not None
        queued = await client.dispatch("totals", ["b"])
        assert (await queued.status()).state is TaskState.QUEUED
        assert (await client.handle("nobody").status()).state is TaskState.UNKNOWN
        for handle in (later, queued):
            assert await handle.cancel() is trunner.CancelOutcome.REMOVED


async def test_give_up_dead_letters_at_once(url: str, group: str) -> None:
    async with open_checked_runner(url, config(group), registry()) as runner:
        handle = await runner.dispatch("gives_up", None)
        with pytest.raises(trunner.TaskFailed) as info:
            await handle.result()
        assert info.value.attempt == 1
        assert isinstance(info.value.error, trunner.errors.RemoteFailure)
        assert info.value.error.type_name == "GiveUp"
        [letter] = await runner.admin.dead_letters()
        assert letter.reason == "given up by the task (no retry)"
        assert "the file is gone" in letter.error


async def test_give_up_on_listed_exceptions(url: str, group: str) -> None:
    async with open_checked_runner(url, config(group), registry()) as runner:
        handle = await runner.dispatch("lookup", "missing")
        with pytest.raises(trunner.TaskFailed) as info:
            await handle.result()
        assert info.value.attempt == 1  # not retried, though max_retry=2
        assert info.value.error.type_name == "KeyError"  # type: ignore[attr-defined]
        assert await (await runner.dispatch("lookup", "a")).result() == "found"


async def test_a_result_with_no_json_form_is_given_up_not_retried(url: str, group: str) -> None:
    async with open_checked_runner(url, config(group), registry()) as runner:
        handle = await runner.dispatch("unjsonable", None)
        with pytest.raises(trunner.TaskFailed) as info:
            await handle.result()
        assert info.value.attempt == 1
        assert info.value.error.type_name == "InvalidResult"  # type: ignore[attr-defined]


async def test_a_timeout_fails_the_attempt_and_is_retried(url: str, group: str) -> None:
    async with open_checked_runner(url, config(group), registry()) as runner:
        handle = await runner.dispatch("slow", 30.0)
        with pytest.raises(trunner.TaskFailed) as info:
            await handle.result()
        assert info.value.attempt == 2
        assert info.value.error.type_name == "TaskTimeout"  # type: ignore[attr-defined]
        assert "0.2 s" in str(info.value.error)
        # a dispatch's own timeout replaces the task's
        assert await (await runner.dispatch("slow", 0.3, timeout=30)).result() == "done"


class Passing(trunner.Middleware):
    """Wraps each attempt and changes nothing: the attempt runs inside the hooks."""

    @contextlib.asynccontextmanager
    async def around_attempt(self, attempt: trunner.middleware.AttemptInfo) -> AsyncIterator[None]:
        yield


@pytest.mark.parametrize("hooks", [False, True], ids=["plain", "middleware"])
async def test_an_attempt_that_returns_past_its_timeout_fails_with_task_timeout(
    url: str, group: str, hooks: bool
) -> None:
    """A task that swallowed the cancellation of its timeout, or shielded itself from it,
    and returned late ended ``succeeded``; its attempt fails with ``TaskTimeout`` and is
    retried, as the docs say (eager calls too)."""
    tasks = trunner.TaskRegistry()
    returned: list[str] = []

    @tasks.task(keep_result=60, timeout=0.1, max_retry=1, retry_backoff=0.01)
    async def swallows(_: None) -> str:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            returned.append("swallows")
            return "late"

    @tasks.task(keep_result=60, timeout=0.1, max_retry=1, retry_backoff=0.01)
    async def shields(_: None) -> str:
        with trio.CancelScope(shield=True):
            await trio.sleep(0.2)  # past its timeout, whatever the load
        returned.append("shields")
        return "late"

    cfg = config(group, middleware=[Passing()] if hooks else [])
    async with open_checked_runner(url, cfg, tasks) as runner:
        for name in ("swallows", "shields"):
            with pytest.raises(trunner.TaskFailed) as info:
                await (await runner.dispatch(name, None)).result()
            assert info.value.attempt == 2, "retried per its policy"
            assert info.value.error.type_name == "TaskTimeout"  # type: ignore[attr-defined]
            assert returned.count(name) == 2, "each attempt returned late"
    for name in ("swallows", "shields"):
        with pytest.raises(trunner.MaxRetryExceeded) as eager:
            await tasks.call(name, None)
        assert isinstance(eager.value.__cause__, trunner.TaskTimeout)


async def test_an_attempt_whose_clean_up_raises_at_its_timeout_fails_with_task_timeout(
    url: str, group: str
) -> None:
    """The cancellation of its timeout made its clean-up raise: the attempt timed out
    all the same, and is retried as a timeout. (It failed with the clean-up's error, and
    a task that gives up on that error was given up at its first attempt.)"""
    tasks = trunner.TaskRegistry()

    @tasks.task(keep_result=60, timeout=0.1, max_retry=1, retry_backoff=0.01, give_up_on=[KeyError])
    async def cleans_up(_: None) -> None:
        try:
            await trio.sleep_forever()
        finally:
            raise KeyError("the clean-up failed")

    async with open_checked_runner(url, config(group), tasks) as runner:
        with pytest.raises(trunner.TaskFailed) as info:
            await (await runner.dispatch("cleans_up", None)).result()
        assert info.value.attempt == 2, "retried per its policy"
        assert info.value.error.type_name == "TaskTimeout"  # type: ignore[attr-defined]


async def test_a_task_not_started_before_it_expires_is_dropped(url: str, group: str) -> None:
    gate = Gate()
    handled: list[Any] = []

    async def handler(message: trunner.TaskMessage, _: BaseException) -> None:
        handled.append(message)

    async with trunner.open_client(url, group) as client:
        expired = await client.dispatch("totals", ["x"], expires=0.001)
        past = await client.dispatch(
            "totals", ["y"], expires=datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
        )
        unkept = await client.dispatch("unkept", 1, expires=0.001)  # its outcome is kept too
        fresh = await client.dispatch("totals", ["z"], expires=3600)
        await trio.sleep(0.01)  # the first one's expiry passes on the wall clock
        cfg = config(group, failed_task_handler=handler)
        async with open_checked_runner(url, cfg, registry(gate)) as runner:
            for handle in (expired, past, unkept):
                with pytest.raises(trunner.TaskExpired):
                    await handle.result()
                assert (await handle.status()).state is TaskState.EXPIRED
            assert await fresh.result() == {"count": 1, "names": ["z"]}
            assert runner.statistics().expired == 3
            assert await runner.admin.dead_letter_count() == 0
            assert not handled


async def test_an_expiry_is_refused_when_it_makes_no_sense(url: str, group: str) -> None:
    async with trunner.open_client(url, group) as client:
        for bad in (-1, float("nan"), True, "soon", datetime.datetime(2030, 1, 1)):
            with pytest.raises((TypeError, ValueError)):
                await client.dispatch("totals", [], expires=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="keep_result"):
            await client.dispatch("totals", [], keep_result=0)
        with pytest.raises(ValueError, match="timeout"):
            await client.dispatch("totals", [], timeout=-1)
        assert await client.admin.queue_length() == 0


async def test_a_task_awaiting_its_own_result_is_refused(url: str, group: str) -> None:
    async with open_checked_runner(url, config(group), registry()) as runner:
        assert await (await runner.dispatch("own", None)).result() == "refused"


async def test_a_result_expires_after_keep_result(url: str, group: str, keys: Keys) -> None:
    async with open_checked_runner(url, config(group), registry()) as runner:
        handle = await runner.dispatch("unkept", 1, keep_result=0.3)
        assert await handle.result() == 1
        raw = raw_client(url)
        try:
            assert 0 < raw.pttl(keys.task(handle)) <= 300
        finally:
            raw.close()
        await redis_state(lambda: _state_is(handle, TaskState.UNKNOWN))
        with pytest.raises(
            trunner.errors.ResultExpired, match=r"kept its outcome 0\.3 s"
        ) as caught:
            await handle.result()
        assert caught.value.keep_result == 0.3
        assert caught.value.task_name == "unkept"


async def test_many_waiters_share_one_subscription(url: str, group: str) -> None:
    async with open_checked_runner(url, config(group), registry()) as runner:
        handles = [await runner.dispatch("totals", [str(i)]) for i in range(50)]
        results: dict[int, Any] = {}

        async def wait(i: int) -> None:
            results[i] = await handles[i].result()

        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(wait, i)
        assert results == {i: {"count": 1, "names": [str(i)]} for i in range(50)}


async def test_a_stored_result_that_is_not_what_was_written_is_bad_data(
    url: str, group: str, keys: Keys
) -> None:
    tasks = registry()
    resize = tasks.get("resize")
    async with open_checked_runner(url, config(group), tasks) as runner:
        handle = await runner.dispatch(resize.action, request(1))
        await handle.result()
        raw = raw_client(url)
        key = keys.task(handle)
        try:
            # The outcome of a success is one JSON object (a string key).
            stored = json.loads(raw.get(key))
            assert next(iter(stored)) == "state"
            stored["result"] = {"path": 1}  # JSON, not a Thumbnail
            raw.set(key, json.dumps(stored))
            with pytest.raises(trunner.errors.BadData, match="does not match Thumbnail"):
                await handle.result()
            assert await runner.handle(str(handle)).result() == {"path": 1}
            # A record as a hash (as the other outcomes are written), with bad fields.
            fields = {name: str(value) for name, value in stored.items() if name != "result"}
            raw.delete(key)
            raw.hset(key, mapping={**fields, "result": "{not json", "attempt": "many"})
            with pytest.raises(trunner.errors.BadData, match="not JSON"):
                await handle.result()
            status = await handle.status()  # the fields that read go on being read
            assert status.state is TaskState.SUCCEEDED
            assert status.attempt is None
            raw.hset(key, "state", "exploded")  # not a state: no record
            assert (await handle.status()).state is TaskState.UNKNOWN
            raw.delete(key)
            raw.set(key, "{not json")  # a string that is no JSON object: no record
            assert (await handle.status()).state is TaskState.UNKNOWN
            raw.delete(key)
            raw.set(key, json.dumps({**stored, "attempt": "many", "state": "succeeded"}))
            status = await handle.status()  # a JSON record's bad field reads as unknown
            assert status.state is TaskState.SUCCEEDED
            assert status.attempt is None
        finally:
            raw.close()
