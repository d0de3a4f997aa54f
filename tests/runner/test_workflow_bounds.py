"""Workflows are bounded (design/workflows.md, section 2.5): a runner holds nothing per
workflow once it settled, and Redis holds nothing of a finished workflow past its
``keep_result``. Checked on a real redis-server (key lifetimes are Redis's own) with the
issue's sizes: a chord of 10 000 children and a chain of 1 000 steps, then workflows in a
row, each followed by a look at the runner's maps and at the group's keys."""

from __future__ import annotations

import os
from typing import Any

import pytest
import trio

import trunner
from trunner import workflows as wf
from trunner.errors import TaskCancelled, WorkflowFailed
from trunner.keys import Keys
from trunner.workflows import chain, chord, step

from ..conftest import config, open_checked_runner, parts, raw_client, redis_state
from ..support.servers import RedisServer

tasks = trunner.TaskRegistry()


@tasks.task
async def square(n: int) -> int:
    return n * n


@tasks.task
async def total(values: list[int]) -> int:
    return sum(values)


@tasks.task
async def link(n: int) -> int:
    return n + 1


@tasks.task
async def broken(n: int) -> int:
    raise ValueError(n)


#: How long a finished workflow's keys stay (seconds): short, so that their expiry is seen.
KEEP = 0.5
#: Workflows in a row after the two of the issue's sizes (an environment variable raises
#: it for a longer local run).
ROUNDS = int(os.environ.get("TRUNNER_WORKFLOW_ROUNDS", "20"))
#: Their sizes: a chord of CHORD children, a chain of CHAIN steps, in turn.
CHORD = int(os.environ.get("TRUNNER_WORKFLOW_CHORD", "200"))
CHAIN = int(os.environ.get("TRUNNER_WORKFLOW_CHAIN", "50"))


def held(runner: trunner.Runner) -> dict[str, int]:
    """The sizes of everything a runner keeps per message, per task or per wait."""
    c = parts(runner)
    acks = c.acks
    return {
        "running": len(c.holdings.running),
        "finished": len(c.holdings.finished),
        "kept": len(c.holdings.kept),
        "to_release": c.holdings.to_release,
        "cancel_marks": len(c.holdings.cancelled),
        "ready": len(c.pool._ready),
        "acks": len(acks._ids) + len(acks._started),
        "ack_details": sum(
            len(m)
            for m in (
                acks._locks,
                acks._moved,
                acks._records,
                acks._forget,
                acks._slots,
                acks._steps,
            )
        ),
        "waiters": len(c.waiters._waiting),
    }


def group_keys(raw: Any, group: str) -> dict[str, int]:
    """The group's keys that do not expire or live longer than a minute, with their sizes
    (the others: a finished workflow's, the group's leases; and the timing metrics, one
    field per task name and figure, taken by the leader: left out)."""
    metrics = Keys("trunner", group).metrics
    found: dict[str, int] = {}
    for name in raw.scan_iter(match=f"*{{{group}}}*", count=1000):
        key = name.decode()
        if 0 <= raw.pttl(key) <= 60_000 or key == metrics or not raw.exists(key):
            continue
        kind = raw.type(key).decode()
        size = {
            "stream": raw.xlen,
            "hash": raw.hlen,
            "zset": raw.zcard,
            "set": raw.scard,
            "list": raw.llen,
        }.get(kind, lambda _: 1)(key)
        found[key] = int(size)
    return found


def workflow_keys(group: str, workflow_id: str) -> tuple[str, ...]:
    return Keys("trunner", group)._workflow(workflow_id).names()


#: Set when ``hang`` started (a new one per test).
started = {"hang": trio.Event()}


@tasks.task
async def hang(_: int) -> int:
    started["hang"].set()
    await trio.sleep_forever()
    raise AssertionError


async def test_a_step_cancelled_by_its_workflow_keeps_no_record_of_its_own(
    memory_url: str, group: str
) -> None:
    """A step that keeps no result, cancelled because its workflow failed fast, writes no
    task record (it would outlive the workflow's ``keep_result`` by an hour: 10 000 of
    them for a wide chord); one cancelled on its own keeps its record, so that its handle
    says it was cancelled."""
    started["hang"] = trio.Event()
    raw = raw_client(memory_url)
    task_key = Keys("trunner", group).task
    try:
        async with trunner.open_client(memory_url, group, tasks=tasks) as client:
            alone = await client.dispatch(chain(step(link, 0), step(link)), keep_result=KEEP)
            await alone.step_handle(0).cancel()
            async with open_checked_runner(memory_url, config(group), tasks) as runner:
                failing = await runner.dispatch(
                    wf.group([step(hang, 0), step(broken, 1)]), keep_result=KEEP
                )
                with pytest.raises(WorkflowFailed):
                    await failing.result()
                with pytest.raises(WorkflowFailed):
                    await alone.result()
                with pytest.raises(TaskCancelled):
                    await alone.step_handle(0).result()
                assert (await failing.status()).cancelled == 1
        assert raw.exists(task_key(f"{failing.id}.0")) == 0, "cancelled by its workflow"
    finally:
        raw.close()


async def settled_and_forgotten(runner: trunner.Runner) -> None:
    """Wait until the runner holds nothing (its last acknowledgements' replies are read
    after the settle); what it still holds after a while is said."""

    async def empty() -> bool:
        await trio.lowlevel.checkpoint()
        return not any(held(runner).values())

    with trio.move_on_after(20):
        await redis_state(empty)
    still = {name: size for name, size in held(runner).items() if size}
    assert not still, f"the runner still holds {still}"


@pytest.mark.deadline(120)
async def test_a_finished_workflow_leaves_nothing_behind_but_its_kept_keys(
    redis_server: RedisServer, group: str
) -> None:
    """A chord of 10 000 children, a chain of 1 000 steps, then ``ROUNDS`` smaller ones in
    a row (chords and chains in turn; every fifth a chord that fails fast, whose cancel
    mark must be forgotten and whose cancelled steps keep nothing of their own). After
    each: the runner's maps are empty again; the group's keys that do not expire are
    those it had before the first, at the same sizes (but the dead letters of the steps
    that failed); each workflow's own keys live at most ``KEEP`` (the plan is gone at the
    settle), and are gone at the end."""
    url = redis_server.url
    raw = raw_client(url)
    sizes = [("chord", 10_000), ("chain", 1_000)]
    sizes += [("chord", CHORD) if n % 2 else ("chain", CHAIN) for n in range(ROUNDS)]
    sizes[4::5] = [("failing", CHORD)] * len(sizes[4::5])  # fail fast: a cancel mark
    try:
        async with open_checked_runner(url, config(group, num_workers=200), tasks) as runner:
            first = await runner.dispatch(chain(step(link, 0), step(link)), keep_result=KEEP)
            assert await first.result() == 2
            await settled_and_forgotten(runner)
            before = group_keys(raw, group)
            finished: list[str] = [first.id]
            failed = 0  # steps dead-lettered: the failing ones, as any task given up
            for n, (shape, size) in enumerate(sizes):
                if shape == "chord":
                    header = wf.group(step(square, i) for i in range(size))
                    workflow: Any = chord(header, step(total))
                    expected = sum(i * i for i in range(size))
                elif shape == "chain":
                    workflow = chain(step(link, 0), *(step(link) for _ in range(size - 1)))
                    expected = size
                else:
                    header = wf.group([step(broken, 0), *(step(square, i) for i in range(size))])
                    workflow, expected = chord(header, step(total)), None
                handle = await runner.dispatch(workflow, keep_result=KEEP, workflow_id=f"w{n}")
                if expected is None:
                    with pytest.raises(WorkflowFailed):
                        await handle.result(timeout=60)
                else:
                    assert await handle.result(timeout=60) == expected
                await settled_and_forgotten(runner)
                failed += shape == "failing"
                now = group_keys(raw, group)
                dead = now.pop(Keys("trunner", group).dead, 0)
                assert (now, dead) == (before, failed), f"after {shape} of {size}"
                names = workflow_keys(group, handle.id)
                assert not raw.exists(names[1]), "the plan is deleted at the settle"
                lives = [raw.pttl(k) for k in names]  # -2: gone already (a slow machine)
                assert all(ms == -2 or 0 < ms <= KEEP * 1000 for ms in lives), lives
                finished.append(handle.id)

            async def expired() -> bool:
                await trio.lowlevel.checkpoint()
                return not any(raw.exists(*workflow_keys(group, w)) for w in finished)

            await redis_state(expired)
            now = group_keys(raw, group)
            dead = now.pop(Keys("trunner", group).dead, 0)
            assert (now, dead) == (before, failed)
    finally:
        raw.close()
