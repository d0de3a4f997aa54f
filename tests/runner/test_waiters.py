"""Waiting for results when things go wrong: the producer closes under a waiter, the
subscription cannot be made at first, a timeout of zero, many waiters, ids that name no
task.

Crosses handles.py (``TaskHandle.result``, ``Waiters``), client.py and runner.py (what
closing does to their waiters) and the transports' subscribers.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

import trunner
from trunner.handles import Waiters

from ..conftest import Gate, config, open_checked_runner


def registry(gate: Gate | None = None) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.task(keep_result=60)
    async def echo(payload: Any) -> Any:
        if gate is not None:
            gate.enter(payload)
            await gate.open.wait()
        return payload

    return tasks


async def _registered(waiters: Waiters, task_id: str) -> None:
    """Wait until a waiter of ``task_id`` registered (in-process state)."""
    while task_id not in waiters._waiting:  # noqa: ASYNC110 - state of this process
        await trio.sleep(0.005)


async def test_a_waiter_is_told_when_its_client_closes(url: str, group: str) -> None:
    outcome: list[BaseException] = []

    async def wait(handle: trunner.TaskHandle[Any]) -> None:
        try:
            await handle.result()
        except trunner.RunnerNotRunning as exc:
            outcome.append(exc)

    async with trio.open_nursery() as nursery, trunner.open_client(url, group) as client:
        handle = await client.dispatch("echo", 1)  # no runner: it stays queued
        nursery.start_soon(wait, handle)
        await _registered(client._open_waiters(), str(handle))
    assert len(outcome) == 1
    with pytest.raises(trunner.RunnerNotRunning):
        await handle.result()  # and after: at once


async def test_a_waiter_is_told_when_its_runner_stops(url: str, group: str) -> None:
    outcome: list[BaseException] = []

    async def wait(handle: trunner.TaskHandle[Any]) -> None:
        try:
            await handle.result()
        except trunner.RunnerNotRunning as exc:
            outcome.append(exc)

    async with (
        trio.open_nursery() as nursery,
        open_checked_runner(url, config(group), registry()) as runner,
    ):
        handle = await runner.dispatch_delayed("echo", 1, 3600)
        nursery.start_soon(wait, handle)
        await _registered(runner._open_waiters(), str(handle))
    assert len(outcome) == 1
