"""The engine's side of workflows (design/workflows.md §3.6, §4): a runner's attempts end
their steps with the acknowledgement (results passed on byte for byte, exactly once),
fail-fast cancels the running siblings through the workflow's cancel mark, a step of a
workflow that no longer runs is not retried (tests/redis/test_workflow_scripts.py). The
workflows are written by hand through the
broker, as the producer will write them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import trio

import trunner
from trunner._redis import Broker, WorkflowLook
from trunner._wire.envelope import encode_message, message_template
from trunner._wire.message import MessageOptions
from trunner._wire.workflow import Literal, Results, StepRef

from ..conftest import config, open_checked_runner, parts, redis_state

W = "wflow"


def root(group: str, task: str, node: int, payload: Any, nxt: str = "", keep: bool = True) -> bytes:
    return encode_message(
        task, payload, enqueued_at=1.0, task_id=f"{W}.{node}",
        options=MessageOptions(workflow=StepRef(W, node, nxt, keep)), group=group,
        max_bytes=1 << 20,
    )  # fmt: skip


def template(
    group: str, task: str, node: int, parts_: Sequence[Any], nxt: str = "", keep: bool = True
) -> bytes:
    ref = StepRef(W, node, nxt, keep)
    return message_template(
        task, parts_, task_id=f"{W}.{node}", options=MessageOptions(workflow=ref), group=group
    )


async def settled(broker: Broker) -> WorkflowLook:
    look: WorkflowLook | None = None

    async def done() -> bool:
        nonlocal look
        look = await broker.workflow_look(W)
        return look.fields.get("state") in ("succeeded", "failed", "cancelled")

    await redis_state(done)
    assert look is not None
    return look


async def test_a_chain_runs_through_a_runner(memory_url: str, group: str) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task()  # keeps no result of its own: the workflow keeps what it needs
    async def add_one(x: int) -> int:
        return x + 1

    @tasks.task()
    async def pair(xs: list[int]) -> dict[str, int]:
        return {"first": xs[0], "sum": sum(xs)}

    plan: list[tuple[str, bytes | int]] = [
        ("t:1", template(group, "add_one", 1, [Results(0, 0)], "2")),
        ("w:1", 1),
        ("t:2", template(group, "pair", 2, [Literal(b"["), Results(1, 1), Literal(b",5]")])),
        ("w:2", 1),
    ]
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        broker = parts(runner).broker
        start = [(0, root(group, "add_one", 0, 1, "1"))]
        assert await broker.start_workflow(W, 3, plan, start, keep_ms=60_000, max_life_ms=600_000)
        look = await settled(broker)
    assert look.fields["state"] == "succeeded"
    assert json.loads(look.results[2]) == {"first": 3, "sum": 8}
    assert runner.statistics().succeeded == 3


async def test_fail_fast_cancels_a_running_sibling_and_the_callback_never_runs(
    memory_url: str, group: str
) -> None:
    tasks = trunner.TaskRegistry()
    started = trio.Event()
    ran: list[str] = []

    @tasks.task()
    async def slow(_: int) -> int:
        started.set()
        await trio.sleep_forever()
        raise AssertionError("cancelled")

    @tasks.task()  # no retry: it fails for good at once
    async def boom(_: int) -> int:
        await started.wait()
        raise ValueError("no")

    @tasks.task()
    async def merge(xs: list[int]) -> int:
        ran.append("merge")
        return sum(xs)

    plan: list[tuple[str, bytes | int]] = [
        ("t:2", template(group, "merge", 2, [Literal(b"["), Results(0, 1, b","), Literal(b"]")])),
        ("w:2", 2),
    ]
    roots = [(0, root(group, "slow", 0, 0, "2")), (1, root(group, "boom", 1, 1, "2"))]
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        broker = parts(runner).broker
        assert await broker.start_workflow(W, 3, plan, roots, keep_ms=60_000, max_life_ms=600_000)
        look = await settled(broker)
        stats = runner.statistics()
    assert look.fields["state"] == "failed"
    assert (look.fields["failures"], look.fields["cancelled"]) == ("1", "1")
    failure = json.loads(look.failures[1])
    assert (failure["type"], failure["message"], failure["task"]) == ("ValueError", "no", "boom")
    assert ran == [], "no later step starts"
    assert stats.cancelled == 1, "the running sibling, through the workflow's mark"
    assert stats.dead_lettered == 1


async def test_a_step_that_fails_for_good_is_dead_lettered_and_fails_the_workflow(
    memory_url: str, group: str
) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task(max_retry=0)
    async def boom(_: int) -> int:
        raise KeyError("missing")

    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        broker = parts(runner).broker
        roots = [(0, root(group, "boom", 0, 0))]
        assert await broker.start_workflow(W, 1, [], roots, keep_ms=60_000, max_life_ms=600_000)
        look = await settled(broker)
        dead = await broker.dead_entries(10)
    assert look.fields["state"] == "failed"
    assert json.loads(look.failures[0])["type"] == "KeyError"
    assert len(dead) == 1, "its message is in the dead letters, as any task's"
