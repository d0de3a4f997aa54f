"""Cancelling tasks that do not go quietly: tasks with nurseries of their own, clean-up
that raises, code that swallows the cancellation; and cancels racing with the ends of
attempts.

Crosses pool.py (a cancelled job loop, and what it takes next), outcomes.py (the
'cancelled' outcome), cancellation.py (the marks an instance keeps) and handles.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

import trunner
import trunner._engine.cancellation
from trunner import CancelOutcome, TaskState
from trunner._redis import SCRIPTS, Broker, open_transport
from trunner._wire.envelope import encode_message
from trunner.keys import Keys

from ..conftest import Gate, config, open_checked_runner, parts, raw_client
from ..support.faults import FaultyTransport, script_call
from ..support.pools import bare_pool, entry, pool_parts


class Cleanup(Exception):
    """Raised by a task's clean-up."""


def registry(gate: Gate, ran: list[Any]) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    async def child(payload: Any, fail: bool) -> None:
        try:
            await trio.sleep_forever()
        finally:
            if fail:
                raise Cleanup(f"child of {payload}")

    @tasks.task(keep_result=60, max_retry=3, retry_backoff=0.05)
    async def parent(payload: Any) -> str:
        """Runs children in a nursery of its own; with ``fail``, they raise when cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child, payload, payload["fail"])
            nursery.start_soon(child, payload, payload["fail"])
            await trio.lowlevel.checkpoint()
            gate.enter(payload)
            await gate.open.wait()
            nursery.cancel_scope.cancel()
        return "finished"

    @tasks.task(keep_result=60, max_retry=3, retry_backoff=0.05)
    async def messy(payload: Any) -> str:
        """Its clean-up raises another exception when it is cancelled."""
        gate.enter(payload)
        try:
            await gate.open.wait()
        except trio.Cancelled:
            raise Cleanup("while cleaning up") from None
        return "finished"

    @tasks.task(keep_result=60, max_retry=3, retry_backoff=0.05)
    async def stubborn(payload: Any) -> str:
        """Swallows the cancellation and returns."""
        gate.enter(payload)
        try:
            await gate.open.wait()
        except trio.Cancelled:
            gate.cancelled.append(payload)
        return "swallowed"

    @tasks.task(keep_result=60)
    async def record(payload: Any) -> str:
        ran.append(payload)
        await trio.lowlevel.checkpoint()
        return f"ran {payload}"

    return tasks


async def _cancelled_cleanly(runner: trunner.Runner, handle: trunner.TaskHandle[Any]) -> None:
    with pytest.raises(trunner.TaskCancelled):
        await handle.result()
    status = await handle.status()
    assert status.state is TaskState.CANCELLED
    assert status.attempt == 1
    stats = runner.statistics()
    assert stats.cancelled == 1
    assert stats.retried == 0
    assert stats.failed == 0
    assert await runner.admin.dead_letter_count() == 0
    assert await runner.admin.pending_count() == 0
    assert await runner.admin.delayed_count() == 0


@pytest.mark.parametrize("fail", [False, True], ids=["quiet-children", "failing-children"])
async def test_a_task_with_children_of_its_own_is_cancelled(
    url: str, group: str, fail: bool
) -> None:
    gate, ran = Gate(), list[Any]()
    async with open_checked_runner(url, config(group), registry(gate, ran)) as runner:
        handle = await runner.dispatch("parent", {"fail": fail})
        await gate.wait_started()
        assert await handle.cancel(wait=True) is CancelOutcome.CANCELLING
        await _cancelled_cleanly(runner, handle)
        # the runner goes on
        assert await (await runner.dispatch("record", 1)).result() == "ran 1"


async def test_a_task_whose_clean_up_raises_is_still_cancelled(url: str, group: str) -> None:
    handled: list[Any] = []

    async def handler(message: trunner.TaskMessage, _: BaseException) -> None:
        handled.append(message)

    gate, ran = Gate(), list[Any]()
    cfg = config(group, failed_task_handler=handler)
    async with open_checked_runner(url, cfg, registry(gate, ran)) as runner:
        handle = await runner.dispatch("messy", 1)
        await gate.wait_started()
        assert await handle.cancel(wait=True) is CancelOutcome.CANCELLING
        await _cancelled_cleanly(runner, handle)
        assert gate.started == [1]  # never run again
        assert not handled


async def test_a_task_that_swallows_its_cancellation_ends_its_job_loop(
    url: str, group: str
) -> None:
    """The job loop whose scope was cancelled takes no other job: one queued behind the
    stubborn task runs to its end elsewhere, with its own outcome. The stubborn task
    returned: its outcome is what it returned (it did not stop)."""
    gate, ran = Gate(), list[Any]()
    cfg = config(group, num_workers=2)
    async with open_checked_runner(url, cfg, registry(gate, ran)) as runner:
        handle = await runner.dispatch("stubborn", 1)
        await gate.wait_started()
        # it was not cancelled in the end: it returned
        assert await handle.cancel(wait=True) is CancelOutcome.FINISHED
        assert gate.cancelled == [1]
        assert await handle.result() == "swallowed"
        assert (await handle.status()).state is TaskState.SUCCEEDED
        handles = [await runner.dispatch("record", i) for i in range(20)]
        for i, other in enumerate(handles):
            assert await other.result() == f"ran {i}"
        assert sorted(ran) == list(range(20))
        assert await runner.admin.pending_count() == 0
        assert runner.statistics().succeeded == 21


async def test_jobs_ready_behind_a_cancelled_one_run_to_their_ends(url: str, group: str) -> None:
    """Jobs fetched in the same read as the cancelled task, still ready when its loop is
    cancelled, run (none is left pending without an outcome)."""
    gate, ran = Gate(), list[Any]()
    cfg = config(group, num_workers=8)
    async with trunner.open_client(url, group) as client:
        stubborn = await client.dispatch("stubborn", "s")
        messy = await client.dispatch("messy", "m")
        others = [await client.dispatch("record", i) for i in range(6)]
        async with open_checked_runner(url, cfg, registry(gate, ran)) as runner:
            await gate.wait_started(2)
            assert await stubborn.cancel(wait=True) is CancelOutcome.FINISHED  # it returned
            assert await messy.cancel(wait=True) is CancelOutcome.CANCELLING
            for i, other in enumerate(others):
                assert await other.result() == f"ran {i}"
            with pytest.raises(trunner.TaskCancelled):
                await messy.result()
            assert await stubborn.result() == "swallowed"
            assert await runner.admin.pending_count() == 0


async def test_a_job_loop_whose_task_swallowed_its_cancellation_takes_no_other_job(
    memory_url: str, group: str
) -> None:
    """A job made ready while the stubborn task swallows its cancellation would be the
    next one its job loop takes, in the cancelled scope: it is cut off at its first
    checkpoint, with no outcome (neither acknowledged nor released). It runs in a loop of
    its own instead."""
    tasks = trunner.TaskRegistry()
    started = trio.Event()
    ran: list[str] = []
    submit: list[Any] = []

    @tasks.task
    async def stubborn(_: Any) -> None:
        started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            submit[0]()  # a fetch hands the pool a message meanwhile
        ran.append("stubborn")

    @tasks.task
    async def after(_: Any) -> None:
        await trio.lowlevel.checkpoint()
        ran.append("after")

    async with bare_pool(memory_url, group, tasks, num_workers=2) as parts:
        pool = parts.pool
        async with trio.open_nursery() as nursery:
            pool.bind(nursery)
            submit.append(lambda: pool.submit([entry(2, "after")], pool.slots.take_nowait(1), "c"))
            pool.submit([entry(1, "stubborn")], pool.slots.take_nowait(1), "c")
            await started.wait()
            job = pool._running_jobs["1-0"]
            assert pool.cancel_task(job.fields[4])
            await pool.wait_idle()
        assert ran == ["stubborn", "after"]
        assert parts.counters.succeeded == 2
        assert set(parts.holdings.finished) == {"1-0", "2-0"}  # both to be acknowledged
        assert parts.holdings.take_releases() == []


async def test_an_instance_forgets_the_marks_redis_forgot(
    url: str, group: str, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every instance hears of every cancel of a running task; the marks it keeps go once
    Redis forgot them (the task was acknowledged by the instance that ran it, or the
    janitor forgot the mark past its time), or it would keep one per cancel for a day."""
    monkeypatch.setattr(trunner._engine.cancellation, "RESYNC_INTERVAL", 0.0)
    gate, ran = Gate(), list[Any]()
    cfg = config(group, reclaim_delay=3600)  # what the ghost holds stays the ghost's
    async with trunner.open_client(url, group) as client:
        handles = [await client.dispatch("record", i) for i in range(3)]
        raw = raw_client(url)
        try:
            raw.xgroup_create(keys.stream, group, id="0", mkstream=True)
            assert raw.xreadgroup(group, "ghost", {keys.stream: ">"}, count=3)
            async with open_checked_runner(url, cfg, registry(gate, ran)) as runner:
                marks = parts(runner).pool._cancel_marks
                assert await handles[0].cancel() is CancelOutcome.CANCELLING
                await wait_for(lambda: str(handles[0]) in marks)
                raw.hdel(keys.cancelled, str(handles[0]))  # acknowledged elsewhere
                raw.hset(keys.cancelled, str(handles[1]), 1)  # past its time
                assert await handles[2].cancel() is CancelOutcome.CANCELLING
                # the next read of the marks, after the announcement, drops the others
                await wait_for(lambda: set(marks) == {str(handles[2])})
        finally:
            raw.close()
    assert ran == []


async def wait_for(condition: Any) -> None:
    """Wait until ``condition()`` holds (state of this process, changed by a Redis reply)."""
    while not condition():  # noqa: ASYNC110 - no event to await
        await trio.sleep(0.01)


async def test_a_cancel_that_comes_while_a_failed_attempts_retry_is_written_removes_it(
    url: str, group: str
) -> None:
    """The attempt failed, and its retry is being written (acknowledged and scheduled in
    one script) when the cancel comes: the cancel found it still delivered, so it left a
    mark, and the retry would wait out its backoff (an hour) before the mark dropped it.
    The runner removes the retry once it is written: the task is cancelled at once."""
    tasks = trunner.TaskRegistry()

    @tasks.task(keep_result=60, max_retry=3, retry_backoff=3600)
    async def flaky(_: Any) -> None:
        raise RuntimeError("later")

    async with open_transport(url, client_name="t", max_connections=4, connect_timeout=5) as t:
        faulty = FaultyTransport(t)
        broker = Broker(faulty, Keys("trunner", group))
        await broker.ensure_group()
        [message_id] = await broker.enqueue_many(
            [encode_message("flaky", None, enqueued_at=1.0, max_bytes=1000)]
        )
        reader = broker.open_reader()
        entries = await broker.read(reader, "c", 1, 0.1)
        await reader.aclose()
        parts_ = pool_parts(broker, tasks, config(group))
        pool = parts_.pool
        faulty.hold(script_call(SCRIPTS.retry))
        async with trio.open_nursery() as nursery:
            pool.bind(nursery)
            pool.submit(entries, pool.slots.take_nowait(1), "c")
            while not faulty.held:  # noqa: ASYNC110 - the retry reached Redis
                await trio.sleep(0.01)
            assert pool.cancel_task(message_id)  # the canceller heard of the cancel
            faulty.release_held()
            await pool.wait_idle()
        async with trunner.open_client(url, group) as client:
            handle = client.handle(message_id)
            assert (await handle.status()).state is TaskState.CANCELLED
            with pytest.raises(trunner.TaskCancelled):
                await handle.result(timeout=0)
            assert await client.admin.delayed_count() == 0
        assert parts_.counters.cancelled == 1
        assert parts_.counters.retried == 0


class Escaped(BaseException):
    """Not an Exception: what some libraries raise (asyncio.CancelledError is one)."""


async def test_a_task_raising_a_base_exception_fails_it_not_the_runner(
    url: str, group: str
) -> None:
    """Only a cancellation, KeyboardInterrupt or SystemExit goes past a task: anything else
    it raises is its failure (retried, then given up), and the runner goes on."""
    tasks = trunner.TaskRegistry()

    @tasks.task(keep_result=60, max_retry=1, retry_backoff=0.01)
    async def escapes(kind: str) -> None:
        await trio.lowlevel.checkpoint()
        if kind == "group":
            raise BaseExceptionGroup("children", [Escaped("child"), ValueError("other")])
        raise Escaped(kind)

    @tasks.task(keep_result=60)
    async def fine(_: Any) -> str:
        return "fine"

    async with open_checked_runner(url, config(group), tasks) as runner:
        for kind in ("plain", "group"):
            handle = await runner.dispatch("escapes", kind)
            with pytest.raises(trunner.TaskFailed) as info:
                await handle.result()
            assert info.value.attempt == 2
            error = info.value.error
            assert isinstance(error, trunner.errors.RemoteFailure)
            assert error.type_name == ("Escaped" if kind == "plain" else "BaseExceptionGroup")
        assert await (await runner.dispatch("fine", None)).result() == "fine"
        assert runner.statistics().retried == 2
    # eager mode, as a runner
    for kind in ("plain", "group"):
        with pytest.raises(trunner.MaxRetryExceeded) as eager:
            await tasks.call("escapes", kind)
        assert isinstance(eager.value.__cause__, Escaped | BaseExceptionGroup)


async def test_a_cancel_that_waits_says_when_the_task_finished_first(url: str, group: str) -> None:
    """The task returned, and its acknowledgement waits for the next flush: Redis still
    says it is delivered, so the cancel marks it. ``cancel(wait=True)`` then sees how it
    ended, and says it had finished (it was not cancelled)."""
    done = trio.Event()
    tasks = trunner.TaskRegistry()

    @tasks.task(keep_result=60)
    async def quick(_: Any) -> str:
        done.set()
        return "done"

    cfg = config(group, ack_flush_interval=0.5)
    async with open_checked_runner(url, cfg, tasks) as runner:
        handle = await runner.dispatch("quick", None)
        await done.wait()
        assert await handle.cancel(wait=True) is CancelOutcome.FINISHED
        assert await handle.result() == "done"
