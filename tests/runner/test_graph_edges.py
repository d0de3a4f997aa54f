"""Graphs at their edges, run by runners: a parent joined twice, and what follows a graph
in a chain waiting for the nodes of it that nothing reads."""

from __future__ import annotations

import trio

import trunner
from trunner import chain, step
from trunner import workflows as wf

from ..conftest import config, open_checked_runner, redis_state

tasks = trunner.TaskRegistry()
ran: list[str] = []
gate: dict[str, trio.Event] = {}


@tasks.task()
async def five(_: object) -> int:
    return 5


@tasks.task()
async def add(pair: tuple[int, int]) -> int:
    return pair[0] + pair[1]


@tasks.task()
async def side(_: object) -> None:
    ran.append("side started")
    await gate["side"].wait()
    ran.append("side ended")


@tasks.task()
async def after(number: int) -> int:
    ran.append("after")
    return number + 1


async def test_a_parent_joined_twice_keeps_its_result_for_its_other_readers(
    url: str, group: str
) -> None:
    g = wf.Graph()
    a = g.add(step(five, 0))
    twice = g.join(step(add), a, a)
    later = g.then(a, step(after))
    async with open_checked_runner(url, config(group), tasks) as runner:
        handle = await runner.dispatch(g.returning(twice, later, a))
        assert await handle.result() == [10, 6, 5]


async def test_a_step_after_a_graph_waits_for_its_side_nodes(url: str, group: str) -> None:
    ran.clear()
    gate["side"] = trio.Event()
    g = wf.Graph()
    a = g.add(step(five, 0))
    g.then(a, step(side))
    async with open_checked_runner(url, config(group), tasks) as runner:
        handle = await runner.dispatch(chain(g.returning(a), step(after)))
        await redis_state(lambda: _ran(["side started"]))
        status = await handle.status()
        assert status.succeeded == 1, "a ended; after waits for side"
        gate["side"].set()
        assert await handle.result() == 6
    assert ran == ["side started", "side ended", "after"]


async def _ran(expected: list[str]) -> bool:
    await trio.lowlevel.checkpoint()
    return ran == expected
