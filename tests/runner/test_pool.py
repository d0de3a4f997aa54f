"""The pool (trunner/_engine/pool.py): slots, submission and job loops."""

from __future__ import annotations

from typing import Any

import trio

import trunner

from ..support.pools import bare_pool, entry


async def test_a_fetch_never_starts_tasks_beyond_a_lowered_capacity(
    memory_url: str, group: str
) -> None:
    """Slots were reserved for 4, then the capacity dropped to 2 while the read blocked."""
    tasks = trunner.TaskRegistry()
    hold = trio.Event()

    @tasks.task
    async def slow(_: Any) -> None:
        await hold.wait()

    async with (
        bare_pool(memory_url, group, tasks, num_workers=4) as parts,
        trio.open_nursery() as nursery,
    ):
        pool = parts.pool
        pool.bind(nursery)
        slots = pool.slots.take_nowait(4)
        assert slots == 4
        pool.capacity = 2
        entries = [entry(i, "slow") for i in range(1, 5)]
        queued = pool.submit(entries, slots, "c")
        assert (pool.in_flight, queued) == (2, 2), "two started, two handed back"
        assert [mid for _, mid, _ in parts.holdings.take_releases()] == ["3-0", "4-0"]
        assert pool.slots.borrowed_tokens == 2
        hold.set()


async def test_job_loops_cancelled_while_their_jobs_wait_leave_the_pool_able_to_start_more(
    memory_url: str, group: str
) -> None:
    """Jobs that waited, then were cancelled with their job loops (the runner crashed): the
    pool's count of busy loops must come back to zero, or a message submitted later
    (a read that returned during the crash) would never get a job loop."""
    tasks = trunner.TaskRegistry()
    started = 0
    both = trio.Event()
    ran = trio.Event()

    @tasks.task
    async def stuck(_: Any) -> None:
        nonlocal started
        started += 1
        if started == 2:
            both.set()
        await trio.sleep_forever()

    @tasks.task
    async def quick(_: Any) -> None:
        ran.set()

    async with bare_pool(memory_url, group, tasks, num_workers=4) as parts:
        pool = parts.pool
        async with trio.open_nursery() as nursery:
            pool.bind(nursery)
            pool.submit([entry(1, "stuck"), entry(2, "stuck")], pool.slots.take_nowait(2), "c")
            await both.wait()
            nursery.cancel_scope.cancel()
        assert pool.in_flight == 0
        async with trio.open_nursery() as nursery:
            pool.bind(nursery)
            pool.submit([entry(3, "quick")], pool.slots.take_nowait(1), "c")
            await ran.wait()
