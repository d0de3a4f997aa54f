"""Worker tasks (the pool's job loops, trunner/_engine/pool.py): jobs run one after another
in shared Trio tasks, yet as if each had its own.

A worker runs job after job; each job gets a fresh copy of the context, and the first time a
job waits, every job still ready gets an idle worker. These tests pin those promises down,
and that jobs which never wait really share workers (the point of the design). The
wrapper that runs each job in its own context, Isolated, is tested on its own in
tests/unit/test_isolated.py.
"""

from __future__ import annotations

import contextvars
from collections import Counter
from typing import Any

import pytest
import trio
import trio.lowlevel

import trunner
from trunner._wire.keys import RELEASED_CONSUMER
from trunner.keys import Keys

from ..conftest import Tally, config, open_checked_runner, redis_state

var: contextvars.ContextVar[str] = contextvars.ContextVar("test_workers_var")


class SpawnCounter(trio.abc.Instrument):
    def __init__(self) -> None:
        self.spawned = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1


async def test_tasks_never_see_the_context_variables_of_tasks_run_before_them(
    url: str, group: str, tally: Tally
) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def setter(payload: Any) -> None:
        var.set(f"set by {payload}")
        tally.record(payload)

    @tasks.task
    async def reader(payload: Any) -> None:
        tally.record(var.get("unset"))

    async with trunner.open_client(url, group) as client:  # all fetched in one read
        for i in range(10):
            await client.dispatch("setter", i)
            await client.dispatch("reader", i)
    async with open_checked_runner(url, config(group, batch_size=100), tasks):
        await tally.wait(20)
    seen = Counter(map(str, tally.payloads))
    assert seen == {"unset": 10, **{str(i): 1 for i in range(10)}}


async def test_every_task_fetched_together_runs_at_once_when_they_all_wait(
    url: str, group: str
) -> None:
    """Each task waits until all of them have started: if any waited behind another, none
    would ever finish (the test's deadline would end it)."""
    n = 50
    tasks = trunner.TaskRegistry()
    started = 0
    everyone = trio.Event()

    @tasks.task
    async def barrier(_: Any) -> None:
        nonlocal started
        started += 1
        if started == n:
            everyone.set()
        await everyone.wait()

    async with trunner.open_client(url, group) as client:
        await client.dispatch_many("barrier", [None] * n)
    cfg = config(group, num_workers=n, batch_size=n)
    async with open_checked_runner(url, cfg, tasks) as runner:
        await everyone.wait()

        async def acknowledged() -> bool:
            return runner.statistics().acked == n

        await redis_state(acknowledged)
        assert runner.statistics().max_in_flight == n


async def test_a_waiting_task_never_holds_back_tasks_fetched_after_it(url: str, group: str) -> None:
    tasks = trunner.TaskRegistry()
    release = trio.Event()
    order: list[str] = []

    @tasks.task
    async def first(_: Any) -> None:
        order.append("first started")
        await release.wait()
        order.append("first finished")

    @tasks.task
    async def quick(_: Any) -> None:
        order.append("quick")

    @tasks.task
    async def last(_: Any) -> None:
        order.append("last")
        release.set()

    async with trunner.open_client(url, group) as client:
        await client.dispatch("first", None)
        await client.dispatch_many("quick", [None] * 5)
        await client.dispatch("last", None)
    # As many workers as tasks: no later read comes along while they run.
    async with open_checked_runner(url, config(group, num_workers=7, batch_size=7), tasks):
        while len(order) < 8:  # noqa: ASYNC110 - the tasks record in order
            await trio.sleep(0.01)
    assert order[-1] == "first finished"
    assert sorted(order[:-1]) == sorted(["first started", *["quick"] * 5, "last"])


async def test_tasks_that_never_wait_share_worker_tasks(url: str, group: str, tally: Tally) -> None:
    """500 tasks that finish without waiting start far fewer than 500 Trio tasks."""
    n = 500
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def quick(payload: Any) -> None:
        tally.record(payload)

    async with trunner.open_client(url, group) as client:
        await client.dispatch_many("quick", [None] * n)
    counter = SpawnCounter()
    cfg = config(group, num_workers=100, batch_size=100)
    async with open_checked_runner(url, cfg, tasks):
        trio.lowlevel.add_instrument(counter)
        try:
            await tally.wait(n)
        finally:
            trio.lowlevel.remove_instrument(counter)
    assert counter.spawned < n / 10, f"{counter.spawned} Trio tasks for {n} messages"


async def test_tasks_fetched_with_one_that_ends_the_runner_are_released_unrun(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    """A task raising BaseException (not a task failure) ends its worker and the runner;
    the messages queued behind it never ran: they are handed back at once, not left
    pending until reclaim_delay."""
    tasks = trunner.TaskRegistry()
    ran: list[str] = []

    @tasks.task
    async def fatal(_: Any) -> None:
        raise SystemExit(3)

    @tasks.task
    async def other(_: Any) -> None:
        ran.append("other")

    async with trunner.open_client(url, group) as client:
        await client.dispatch("fatal", None)
        others = await client.dispatch_many("other", [None] * 3)
    cfg = config(group, batch_size=10, reclaim_delay=600.0)
    with pytest.raises(BaseExceptionGroup) as info:
        async with trunner.open_runner(url, cfg, tasks):
            await trio.sleep_forever()
    assert info.group_contains(SystemExit)
    assert ran == []
    stream = keys.stream
    pending = {
        entry["message_id"].decode(): entry
        for entry in raw.xpending_range(stream, group, "-", "+", 10)
    }
    for message_id in others:
        entry = pending[message_id]
        assert entry["consumer"] == RELEASED_CONSUMER.encode()
        assert entry["times_delivered"] == 0, "given back: the delivery did not count"
