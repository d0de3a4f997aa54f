"""Cancelling a task wherever it is: delayed, retrying, queued, moved, running here,
running on another instance, or held by an instance that died.

Crosses handles.py (``TaskHandle.cancel``), cancel_task.lua (where the task is, in one
script), cancellation.py (the canceller: the channel and the marks), pool.py (a running
job's loop is cancelled; a marked job is dropped before it starts), outcomes.py and
ack.lua (a cancelled task is acknowledged, its mark and lock go, its waiters are told).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

import trunner
from trunner import CancelOutcome, TaskState
from trunner.keys import Keys

from ..conftest import Gate, config, open_checked_runner, raw_client, redis_state


def registry(gate: Gate, ran: list[Any]) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.task(keep_result=60, max_retry=3, retry_backoff=0.05)
    async def gated(payload: Any) -> str:
        gate.enter(payload)
        try:
            await gate.open.wait()
        except trio.Cancelled:
            gate.cancelled.append(payload)
            raise
        return "finished"

    @tasks.task(max_retry=3)
    async def plain(payload: Any) -> None:
        gate.enter(payload)
        try:
            await gate.open.wait()
        except trio.Cancelled:
            gate.cancelled.append(payload)
            raise

    @tasks.task(keep_result=60)
    async def record(payload: Any) -> None:
        ran.append(payload)

    @tasks.task(keep_result=60, unique=True, unique_key=lambda p: p, unique_for=600)
    async def once(payload: Any) -> None:
        ran.append(payload)

    @tasks.task(keep_result=60, max_retry=2, retry_backoff=3600)
    async def flaky(_: Any) -> None:
        raise RuntimeError("later")

    return tasks


async def _state_is(handle: trunner.TaskHandle[Any], state: TaskState) -> bool:
    return (await handle.status()).state is state


def _hlen(url: str, key: str) -> int:
    raw = raw_client(url)
    try:
        return int(raw.hlen(key))
    finally:
        raw.close()


async def test_a_running_task_is_cancelled_at_once_not_retried_not_handled(
    url: str, group: str, keys: Keys
) -> None:
    gate, ran = Gate(), list[Any]()
    handled: list[Any] = []

    async def handler(message: trunner.TaskMessage, _: BaseException) -> None:
        handled.append(message)

    cfg = config(group, failed_task_handler=handler)
    async with open_checked_runner(url, cfg, registry(gate, ran)) as runner:
        handle = await runner.dispatch("gated", 1)
        await gate.wait_started()
        assert await handle.cancel(wait=True) is CancelOutcome.CANCELLING
        assert gate.cancelled == [1]
        with pytest.raises(trunner.TaskCancelled):
            await handle.result()
        status = await handle.status()
        assert status.state is TaskState.CANCELLED
        assert status.attempt == 1
        stats = runner.statistics()
        assert stats.cancelled == 1
        assert stats.retried == 0
        assert stats.failed == 0
        assert not handled
        assert await runner.admin.dead_letter_count() == 0
        assert await runner.admin.pending_count() == 0
        assert _hlen(url, keys.cancelled) == 0  # the mark went with the acknowledgement
        assert await handle.cancel() is CancelOutcome.FINISHED
        # the runner goes on: the next task of the same kind runs to its end
        gate.open.set()
        assert await (await runner.dispatch("gated", 2)).result() == "finished"


async def test_a_running_task_that_keeps_no_result_is_cancelled_too(url: str, group: str) -> None:
    gate, ran = Gate(), list[Any]()
    async with open_checked_runner(url, config(group), registry(gate, ran)) as runner:
        handle = await runner.dispatch("plain", 1)
        await gate.wait_started()
        assert await handle.cancel(wait=True) is CancelOutcome.CANCELLING
        assert gate.cancelled == [1]
        # what became of it is kept (an hour) though it keeps no result
        assert (await handle.status()).state is TaskState.CANCELLED
        with pytest.raises(trunner.TaskCancelled):
            await handle.result()
        assert runner.statistics().cancelled == 1
        assert runner.statistics().retried == 0
        assert await runner.admin.pending_count() == 0


async def test_a_delayed_task_is_removed(url: str, group: str) -> None:
    """Cancelled from a client that does not know the task (no registry)."""
    gate, ran = Gate(), list[Any]()
    async with trunner.open_client(url, group) as client:
        handle = await client.dispatch_delayed("record", "later", 0.2)
        other = await client.dispatch_delayed("record", "kept", 0.2)
        assert await handle.cancel() is CancelOutcome.REMOVED
        assert await client.admin.delayed_count() == 1
        async with open_checked_runner(url, config(group), registry(gate, ran)):
            await other.result()
            with pytest.raises(trunner.TaskCancelled):
                await handle.result()
        assert ran == ["kept"]
        assert await handle.cancel() is CancelOutcome.FINISHED


async def test_a_queued_task_is_removed_and_its_unique_lock_released(
    url: str, group: str, keys: Keys
) -> None:
    gate, ran = Gate(), list[Any]()
    tasks = registry(gate, ran)
    async with trunner.open_client(url, group, tasks=tasks) as client:
        first = await client.dispatch("once", "order-1")
        with pytest.raises(trunner.TaskAlreadyDispatched):
            await client.dispatch("once", "order-1")
        assert (await first.status()).state is TaskState.QUEUED
        assert await first.cancel() is CancelOutcome.REMOVED
        assert await client.admin.queue_length() == 0
        second = await client.dispatch("once", "order-1")  # the lock went with it
        async with open_checked_runner(url, config(group), tasks):
            await second.result()
        assert ran == ["order-1"]
        with pytest.raises(trunner.TaskCancelled):
            await first.result()


async def test_a_retrying_task_is_removed_during_its_backoff(url: str, group: str) -> None:
    gate, ran = Gate(), list[Any]()
    async with open_checked_runner(url, config(group), registry(gate, ran)) as runner:
        handle = await runner.dispatch("flaky", None)
        await redis_state(lambda: _state_is(handle, TaskState.RETRYING))
        assert await handle.cancel() is CancelOutcome.REMOVED
        assert (await handle.status()).state is TaskState.CANCELLED
        assert await runner.admin.delayed_count() == 0


async def test_a_moved_task_waiting_in_the_stream_is_removed(
    url: str, group: str, keys: Keys
) -> None:
    """A delayed task that came due lives in the stream under another entry id: the
    where-map finds it."""
    gate, ran = Gate(), list[Any]()
    cfg = config(group, num_workers=1)
    async with open_checked_runner(url, cfg, registry(gate, ran)) as runner:
        busy = await runner.dispatch("gated", "busy")  # takes the only worker
        await gate.wait_started()
        handle = await runner.dispatch_delayed("record", "moved", 0.05)
        await redis_state(lambda: _state_is(handle, TaskState.QUEUED))
        assert _hlen(url, keys.where) == 1
        assert await handle.cancel() is CancelOutcome.REMOVED
        assert _hlen(url, keys.where) == 0
        assert await runner.admin.queue_length() == 1  # the busy task's entry alone
        gate.open.set()
        await busy.result()
        with pytest.raises(trunner.TaskCancelled):
            await handle.result()
    assert ran == []


async def test_a_task_running_on_another_instance_is_cancelled_there(url: str, group: str) -> None:
    gate, ran = Gate(), list[Any]()
    async with open_checked_runner(url, config(group), registry(gate, ran)) as runner:
        async with trunner.open_client(url, group) as client:
            handle = await client.dispatch("gated", "remote")
            await gate.wait_started()
            status = await handle.status()
            assert status.state is TaskState.RUNNING
            assert status.instance == runner.consumer_name
            assert await client.cancel(str(handle)) is CancelOutcome.CANCELLING
            with pytest.raises(trunner.TaskCancelled):
                await handle.result()
        assert gate.cancelled == ["remote"]


async def test_a_task_held_by_a_dead_instance_is_dropped_when_reclaimed(
    url: str, group: str, keys: Keys
) -> None:
    """Delivered to a consumer that is gone: the cancel leaves a mark, and the runner that
    reclaims the message drops it before it starts."""
    gate, ran = Gate(), list[Any]()
    async with trunner.open_client(url, group) as client:
        handle = await client.dispatch("record", "orphan")
        raw = raw_client(url)
        try:
            raw.xgroup_create(keys.stream, group, id="0", mkstream=True)
            assert raw.xreadgroup(group, "ghost", {keys.stream: ">"}, count=1)
        finally:
            raw.close()
        assert (await handle.status()).instance == "ghost"
        assert await handle.cancel() is CancelOutcome.CANCELLING
        assert _hlen(url, keys.cancelled) == 1
        cfg = config(group, reclaim_delay=0.05, reclaim_interval=0.05)
        async with open_checked_runner(url, cfg, registry(gate, ran)) as runner:
            with pytest.raises(trunner.TaskCancelled):
                await handle.result()
            assert runner.statistics().cancelled == 1
            assert await runner.admin.pending_count() == 0
        assert ran == []
        assert _hlen(url, keys.cancelled) == 0


async def test_cancelling_a_finished_or_unknown_task_does_nothing(url: str, group: str) -> None:
    gate, ran = Gate(), list[Any]()
    async with open_checked_runner(url, config(group), registry(gate, ran)) as runner:
        done = await runner.dispatch("record", 1)
        await done.result()
        assert await done.cancel() is CancelOutcome.FINISHED
        assert await runner.cancel("1-1") is CancelOutcome.UNKNOWN
        assert await runner.cancel("not-a-task") is CancelOutcome.UNKNOWN
        assert (await done.status()).state is TaskState.SUCCEEDED
        assert runner.statistics().cancelled == 0


async def test_many_cancels_of_one_running_task_cancel_it_once(url: str, group: str) -> None:
    gate, ran = Gate(), list[Any]()
    async with open_checked_runner(url, config(group), registry(gate, ran)) as runner:
        handle = await runner.dispatch("gated", 1)
        await gate.wait_started()
        outcomes: list[CancelOutcome] = []

        async def cancel() -> None:
            outcomes.append(await handle.cancel(wait=True))

        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(cancel)
        assert set(outcomes) <= {CancelOutcome.CANCELLING, CancelOutcome.FINISHED}
        assert gate.cancelled == [1]
        assert runner.statistics().cancelled == 1
