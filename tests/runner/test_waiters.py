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
from trunner._redis import Broker, Subscriber
from trunner._waiting.waiters import Waiters
from trunner.errors import RedisUnavailable
from trunner.keys import Keys

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
        except trunner.errors.RunnerNotRunning as exc:
            outcome.append(exc)

    async with trio.open_nursery() as nursery, trunner.open_client(url, group) as client:
        handle = await client.dispatch("echo", 1)  # no runner: it stays queued
        nursery.start_soon(wait, handle)
        await _registered(client._open_waiters(), str(handle))
    assert len(outcome) == 1
    with pytest.raises(trunner.errors.RunnerNotRunning):
        await handle.result()  # and after: at once


async def test_a_waiter_is_told_when_its_runner_stops(url: str, group: str) -> None:
    outcome: list[BaseException] = []

    async def wait(handle: trunner.TaskHandle[Any]) -> None:
        try:
            await handle.result()
        except trunner.errors.RunnerNotRunning as exc:
            outcome.append(exc)

    async with (
        trio.open_nursery() as nursery,
        open_checked_runner(url, config(group), registry()) as runner,
    ):
        handle = await runner.dispatch_delayed("echo", 1, 3600)
        nursery.start_soon(wait, handle)
        await _registered(runner._open_waiters(), str(handle))
    assert len(outcome) == 1


async def test_a_waiter_that_subscribed_first_is_told_when_its_client_closes(
    url: str, group: str
) -> None:
    """Closed while it waits for its first subscription (Redis refuses it): it is told,
    it does not wait for a subscription that never comes."""
    outcome: list[BaseException] = []
    async with trunner.open_client(url, group) as client:
        failing = FailingSubscriptions(client._open_broker(), failures=10**6)
        waiters = Waiters(failing)  # type: ignore[arg-type]
        client._waiters = waiters
        handle = client.handle("some-task")
        async with trio.open_nursery() as nursery:
            await nursery.start(waiters.run)

            async def wait() -> None:
                try:
                    await handle.result()
                except trunner.errors.RunnerNotRunning as exc:
                    outcome.append(exc)

            nursery.start_soon(wait)
            await failing.failed.wait()
            waiters.stop()
    assert len(outcome) == 1


class FailingSubscriptions:
    """A broker whose done-subscribers fail to subscribe the first ``failures`` times
    (Redis refused the connection), then subscribe as the real one does."""

    def __init__(self, broker: Broker, failures: int) -> None:
        self._broker = broker
        self.failures = failures
        self.failed = trio.Event()

    def open_done_subscriber(self) -> Subscriber:
        inner = self._broker.open_done_subscriber()
        if self.failures <= 0:
            return inner
        self.failures -= 1
        return _Refused(inner, self.failed)


class _Refused(Subscriber):
    def __init__(self, inner: Subscriber, failed: trio.Event) -> None:
        self._inner = inner
        self._failed = failed

    async def subscribe(self) -> None:
        await trio.lowlevel.checkpoint()
        self._failed.set()
        raise RedisUnavailable("injected: connection refused")

    async def next_message(self) -> bytes:
        await self.subscribe()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        await self._inner.aclose()


async def test_a_waiter_whose_subscription_fails_at_first_gets_its_result(
    url: str, group: str
) -> None:
    gate = Gate()
    async with (
        open_checked_runner(url, config(group), registry(gate)),
        trunner.open_client(url, group) as client,
    ):
        failing = FailingSubscriptions(client._open_broker(), failures=2)
        waiters = Waiters(failing)  # type: ignore[arg-type]
        client._waiters = waiters
        results: list[Any] = []
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            await nursery.start(waiters.run)
            handle = await client.dispatch("echo", "through")
            await gate.wait_started()

            async def wait() -> None:
                results.append(await handle.result())
                done.set()

            nursery.start_soon(wait)
            await failing.failed.wait()
            gate.open.set()
            await done.wait()
            waiters.stop()
        assert results == ["through"]
        assert failing.failures == 0


async def test_result_with_timeout_zero_returns_an_outcome_there_already(
    url: str, group: str
) -> None:
    async with open_checked_runner(url, config(group), registry()) as runner:
        handle = await runner.dispatch("echo", {"a": 1})
        assert await handle.result() == {"a": 1}
        assert await handle.result(timeout=0) == {"a": 1}
        assert await runner.handle(str(handle)).result(timeout=0) == {"a": 1}
        with pytest.raises(trunner.ResultNotFound):
            await runner.handle("never-dispatched").result(timeout=0)
        later = await runner.dispatch_delayed("echo", 2, 3600)
        with pytest.raises(trio.TooSlowError):
            await later.result(timeout=0)


async def test_result_refuses_a_timeout_that_is_not_a_duration(url: str, group: str) -> None:
    async with trunner.open_client(url, group) as client:
        handle = client.handle("some-task")
        for bad in (-1, float("nan"), -float("inf")):
            with pytest.raises(ValueError, match="timeout"):
                await handle.result(timeout=bad)
        with pytest.raises(trunner.ResultNotFound):
            await handle.result(timeout=float("inf"))


@pytest.mark.parametrize("task_id", ["a b", "tab\there", "new\nline", " lead"])
async def test_a_waiter_on_an_id_with_whitespace_is_woken(
    url: str, group: str, keys: Keys, task_id: str
) -> None:
    """The channel of finished tasks says their ids joined by spaces; a task id holding
    whitespace (from a producer that wrote its own) is woken all the same."""
    async with trunner.open_client(url, group) as client:
        waiters = client._open_waiters()
        with waiters.register(task_id) as announced:
            await waiters.subscribed()
            # as ack.lua says a batch of three finished
            transport = client._open_broker().transport
            await transport.execute("PUBLISH", keys.done, f"1-1 {task_id} 2-2")
            await announced.wait()
