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
from trunner import CancelOutcome, TaskState

from ..conftest import Gate, config, open_checked_runner


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
    assert await runner.dead_letter_count() == 0
    assert await runner.pending_count() == 0
    assert await runner.delayed_count() == 0


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
