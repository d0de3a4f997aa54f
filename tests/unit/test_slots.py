"""Worker slots (trunner/_engine/slots.py): a counting limiter with FIFO hand-over."""

from __future__ import annotations

import pytest
import trio
from trio.testing import wait_all_tasks_blocked

from trunner._engine.slots import WorkerSlots


async def test_slots_are_taken_up_to_the_capacity_and_waited_for_beyond_it() -> None:
    slots = WorkerSlots(3)
    assert slots.take_nowait(2) == 2
    assert slots.take_nowait(5) == 1
    assert slots.take_nowait(1) == 0
    assert (slots.borrowed_tokens, slots.take_nowait(1)) == (3, 0)
    got: list[int] = []

    async def waiter() -> None:
        got.append(await slots.take(10))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await wait_all_tasks_blocked()
        assert got == [], "no slot is free: the taker waits"
        slots.give(2)
    assert got == [2], "woken by the slots given back, takes what is free"
    assert slots.borrowed_tokens == 3


async def test_a_lowered_capacity_refuses_slots_until_enough_are_given_back() -> None:
    slots = WorkerSlots(4)
    assert slots.take_nowait(4) == 4
    slots.total_tokens = 2
    slots.give(1)
    assert slots.take_nowait(1) == 0, "3 held, capacity 2"
    slots.give(2)
    assert slots.take_nowait(5) == 1
    with pytest.raises(ValueError, match="integer >= 1"):
        slots.total_tokens = 0
    with pytest.raises(RuntimeError, match="more worker slots given back"):
        slots.give(3)


async def test_a_raised_capacity_wakes_every_waiting_taker() -> None:
    slots = WorkerSlots(1)
    assert slots.take_nowait(1) == 1
    got: list[int] = []

    async def waiter() -> None:
        got.append(await slots.take(1))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        nursery.start_soon(waiter)
        await wait_all_tasks_blocked()
        slots.total_tokens = 3
    assert got == [1, 1]


async def test_a_cancelled_taker_takes_nothing_and_the_next_one_is_served() -> None:
    slots = WorkerSlots(1)
    assert slots.take_nowait(1) == 1
    got: list[str] = []

    async def waiter(name: str, scope: trio.CancelScope) -> None:
        with scope:
            await slots.take(1)
            got.append(name)

    first, second = trio.CancelScope(), trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter, "first", first)
        await wait_all_tasks_blocked()
        nursery.start_soon(waiter, "second", second)
        await wait_all_tasks_blocked()
        first.cancel()
        await wait_all_tasks_blocked()
        assert slots.borrowed_tokens == 1
        slots.give(1)
    assert got == ["second"]
    assert slots.borrowed_tokens == 1


async def test_takers_that_give_back_and_take_again_at_once_share_the_slots() -> None:
    """Two fetch loops: each takes, reads (a checkpoint), gives back, and takes again with
    no checkpoint in between. A slot given back while the other waits goes to it."""
    slots = WorkerSlots(2)
    turns = {"a": 0, "b": 0}

    async def loop(name: str) -> None:
        while sum(turns.values()) < 200:
            taken = await slots.take(2)
            turns[name] += 1
            await trio.lowlevel.checkpoint()  # the read
            slots.give(taken)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(loop, "a")
        nursery.start_soon(loop, "b")
    assert min(turns.values()) >= 50, turns
