"""Group-wide rate and concurrency limits in a runner (memory://): over-limit messages are
deferred with no attempt used, in order; a slot is released with the acknowledgement,
retry, dead letter or cancellation of its holder and granted to the next waiter; a
reclaimed holder keeps its slot."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import trio

import trunner
from trunner.keys import Keys

from ..conftest import config, open_checked_runner, redis_state


class Steps:
    """Tasks that record their start and wait for the test to let each one finish."""

    def __init__(self) -> None:
        self.started: list[tuple[Any, int, float]] = []  # payload, attempt, wall time
        self.gates: dict[Any, trio.Event] = {}
        self.running = 0
        self.most = 0
        self._lot = trio.lowlevel.ParkingLot()

    async def run(self, payload: Any) -> None:
        self.started.append((payload, trunner.current_message().attempt, time.time()))
        self.running += 1
        self.most = max(self.most, self.running)
        self._lot.unpark_all()
        try:
            await self.gates.setdefault(payload, trio.Event()).wait()
        finally:
            self.running -= 1

    def finish(self, payload: Any) -> None:
        self.gates.setdefault(payload, trio.Event()).set()

    async def wait_started(self, count: int) -> None:
        while len(self.started) < count:
            await self._lot.park()

    @property
    def payloads(self) -> list[Any]:
        return [p for p, _, _ in self.started]


def test_limit_options_are_checked() -> None:
    tasks = trunner.TaskRegistry()

    async def action(_: Any) -> None:
        pass

    for bad in ("100", "0/s", "-1/s", "1/d", "x/s", "1.5/s", "", "1/s/s"):
        with pytest.raises(ValueError, match="rate_limit"):
            trunner.Task("a", action, rate_limit=bad)
    with pytest.raises(TypeError, match="rate_limit"):
        trunner.Task("a", action, rate_limit=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rate_burst must be >= 1"):
        trunner.Task("a", action, rate_limit="1/s", rate_burst=0)
    with pytest.raises(ValueError, match="need rate_limit"):
        trunner.Task("a", action, rate_burst=2)
    with pytest.raises(ValueError, match="concurrency must be an int >= 1"):
        trunner.Task("a", action, concurrency=0)
    with pytest.raises(ValueError, match="concurrency_key needs concurrency"):
        trunner.Task("a", action, concurrency_key=lambda p: p)
    task = tasks.task("b", rate_limit=" 10 / m ", rate_burst=3, concurrency=2)(action)
    limits = tasks.get("b").limits
    assert limits is not None
    assert limits.rate is not None
    assert (limits.rate.count, limits.rate.period_ms, limits.rate.burst) == (10, 60_000.0, 3)
    assert limits.concurrency == 2
    assert not tasks.get("b").plain, "a limited task never takes the pool's plain path"
    assert task is action
    assert trunner.Task("c", action).limits is None


async def test_concurrency_limit_defers_in_order_without_using_attempts(
    memory_url: str, group: str, raw_memory: Any
) -> None:
    steps = Steps()
    tasks = trunner.TaskRegistry()
    tasks.task("limited", concurrency=2, max_retry=0)(steps.run)
    keys = Keys("trunner", group)
    async with open_checked_runner(memory_url, config(group, num_workers=10), tasks) as runner:
        for n in range(6):
            await runner.dispatch("limited", n)
        await steps.wait_started(2)

        async def deferred() -> bool:
            return runner.statistics().deferred_concurrency == 4

        await redis_state(deferred)
        assert raw_memory.zcard(keys.concurrency_holders("7:limited")) == 2
        assert (await runner.admin.inspect()).concurrency == {"7:limited": (2, 4)}
        assert runner.statistics().slots_held == 2
        prometheus = pytest.importorskip("trunner.prometheus")
        metrics = prometheus.collect(runner).decode()
        assert f'trunner_concurrency_slots_held{{group="{group}"}} 2.0' in metrics
        waiting = raw_memory.lrange(keys.concurrency_waiting("7:limited"), 0, -1)
        order = [json.loads(item)["payload"] for item in waiting]
        assert sorted(order + steps.payloads) == list(range(6))
        for n, payload in enumerate(steps.payloads[:2] + order):
            steps.finish(payload)
            await steps.wait_started(min(n + 3, 6))
    assert steps.most == 2
    assert sorted(steps.payloads) == list(range(6))
    assert steps.payloads[2:] == order, "granted in the order they were deferred"
    assert {attempt for _, attempt, _ in steps.started} == {1}, "no attempt used"
    assert runner.statistics().succeeded == 6
    assert runner.task_totals()["limited"].deferred_concurrency == 4
    assert raw_memory.zcard(keys.concurrency_holders("7:limited")) == 0


async def test_per_key_concurrency_limits_are_separate(memory_url: str, group: str) -> None:
    steps = Steps()
    tasks = trunner.TaskRegistry()
    tasks.task("export", concurrency=1, concurrency_key=lambda p: p[0])(steps.run)
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        for payload in ("a1", "b2", "a3"):
            await runner.dispatch("export", payload)
        await steps.wait_started(2)

        async def one_deferred() -> bool:
            return runner.statistics().deferred_concurrency == 1

        await redis_state(one_deferred)
        assert sorted(steps.payloads) == ["a1", "b2"], "tenant b does not wait for tenant a"
        steps.finish("a1")
        await steps.wait_started(3)
        assert steps.payloads[2] == "a3"
        steps.finish("b2")
        steps.finish("a3")


async def test_slot_released_by_retry_dead_letter_and_cancel(
    memory_url: str, group: str, raw_memory: Any
) -> None:
    """One slot: each end of the holder (a retry, a dead letter, a cancellation, a success)
    grants it to a waiter; never two at once."""
    steps = Steps()
    tasks = trunner.TaskRegistry()
    task_ids: dict[Any, str] = {}
    failed: set[Any] = set()

    @tasks.task(concurrency=1, max_retry=1, retry_backoff=0)
    async def one(payload: Any) -> None:
        task_ids[payload] = trunner.current_message().task_id
        await steps.run(payload)
        if payload == "dead" or (payload == "retry-me" and payload not in failed):
            failed.add(payload)
            raise RuntimeError(payload)

    holders = Keys("trunner", group).concurrency_holders("3:one")
    async with open_checked_runner(memory_url, config(group, num_workers=10), tasks) as runner:
        for payload in ("retry-me", "dead", "cancel-me", "ok"):
            await runner.dispatch("one", payload)
        # retry-me twice, dead twice (then dead-lettered), cancel-me once, ok once
        for n in range(6):
            await steps.wait_started(n + 1)
            payload = steps.payloads[n]
            if payload == "cancel-me":
                await runner.cancel(task_ids[payload])
            else:
                steps.finish(payload)

        async def all_free() -> bool:
            return raw_memory.zcard(holders) == 0 and runner.statistics().in_flight == 0

        await redis_state(all_free)
        stats = runner.statistics()
    assert steps.most == 1
    assert sorted(steps.payloads) == sorted(["retry-me"] * 2 + ["dead"] * 2 + ["cancel-me", "ok"])
    assert (stats.dead_lettered, stats.cancelled, stats.retried) == (1, 1, 2)
    assert stats.deferred_concurrency >= 3


async def test_rate_limit_defers_to_when_admitted_with_no_attempt_used(
    memory_url: str, group: str
) -> None:
    steps = Steps()
    tasks = trunner.TaskRegistry()
    tasks.task("paced", rate_limit="20/s")(steps.run)
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        began = time.time()
        await runner.dispatch_many("paced", list(range(5)))
        for n in range(5):
            steps.finish(n)
        await steps.wait_started(5)
    # Each admission is reserved 50 ms after the one before: the k-th run starts no
    # earlier than k * 50 ms after the first could have been admitted.
    times = sorted(t for _, _, t in steps.started)
    for k, at in enumerate(times):
        assert at >= began + k * 0.05 - 0.002
    assert {attempt for _, attempt, _ in steps.started} == {1}
    assert runner.statistics().deferred_rate == 4, "each deferred once, admitted on return"
    assert runner.statistics().succeeded == 5


async def test_eager_calls_ignore_limits() -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task(rate_limit="1/h", concurrency=1)
    async def limited(payload: int) -> int:
        return payload + 1

    assert [await tasks.call(limited, n) for n in range(3)] == [1, 2, 3]


@pytest.fixture
def raw_memory(memory_url: str) -> Iterator[Any]:
    from trunner._redis import memory_server_client  # noqa: PLC0415

    client = memory_server_client(memory_url[len("memory://") :])
    yield client
    client.close()


async def test_a_slot_whose_holder_is_gone_is_freed_by_the_janitor(
    memory_url: str, group: str, raw_memory: Any
) -> None:
    """A granted waiter cancelled before anyone fetched it leaves its slot to nobody: the
    leader's janitor sees the holder is gone (pending nowhere, not in the stream) and
    frees the slot for the next waiter; a granted waiter still on its way keeps it."""
    steps = Steps()
    tasks = trunner.TaskRegistry()
    tasks.task("one", concurrency=1)(steps.run)
    keys = Keys("trunner", group)
    holders = keys.concurrency_holders("3:one")
    cfg = config(group, janitor_interval=0.1)
    async with (
        open_checked_runner(memory_url, cfg, tasks) as runner,
        trunner.open_client(memory_url, group) as client,
    ):
        janitor = runner._components.janitor  # type: ignore[union-attr]
        await runner.dispatch("one", "a")
        await steps.wait_started(1)
        b = await runner.dispatch("one", "b")

        async def b_waits() -> bool:
            return bool(raw_memory.llen(keys.concurrency_waiting("3:one")) == 1)

        await redis_state(b_waits)
        assert await client.admin.pause() is True
        await runner.wait_paused()
        steps.finish("a")  # its ack grants the slot to b, whose message waits unfetched

        async def b_granted() -> bool:
            waiting = raw_memory.llen(keys.concurrency_waiting("3:one"))
            return bool(waiting == 0 and raw_memory.zcard(holders) == 1)

        await redis_state(b_granted)
        await janitor.wait_rounds(janitor.rounds + 2)
        assert raw_memory.zcard(holders) == 1, "a granted waiter on its way keeps its slot"
        assert await b.cancel() is trunner.CancelOutcome.REMOVED
        await runner.dispatch("one", "c")
        assert await client.admin.resume() is True
        await steps.wait_started(2)  # c: only once the janitor freed b's slot
        assert steps.payloads == ["a", "c"]
        assert janitor.slots_freed == 1
        steps.finish("c")


async def test_a_deferred_message_keeps_its_expiry_and_its_end_frees_its_slot(
    memory_url: str, group: str
) -> None:
    """A task dispatched with ``expires`` that waits for a slot is dropped (expired) when
    it is granted too late; the slot it was granted goes on to the next waiter at once
    (with its acknowledgement: the janitor is off)."""
    steps = Steps()
    tasks = trunner.TaskRegistry()
    tasks.task("one", concurrency=1)(steps.run)
    async with open_checked_runner(
        memory_url, config(group, janitor_interval=None), tasks
    ) as runner:
        await runner.dispatch("one", "a")
        await steps.wait_started(1)
        expires = time.time() + 0.2
        await runner.dispatch("one", "b", expires=0.2)  # seconds from now
        await runner.dispatch("one", "c")

        async def both_wait() -> bool:
            return runner.statistics().deferred_concurrency == 2

        await redis_state(both_wait)
        while time.time() <= expires:  # noqa: ASYNC110 - b's expiry is a wall-clock time
            await trio.sleep(0.05)
        steps.finish("a")
        await steps.wait_started(2)
        steps.finish("c")
    assert steps.payloads == ["a", "c"]
    assert runner.statistics().expired == 1


async def test_one_limit_the_janitor_cannot_reconcile_leaves_the_others_reconciled(
    memory_url: str, group: str, raw_memory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = Keys("trunner", group)
    tasks = trunner.TaskRegistry()
    tasks.task("one", concurrency=1)(Steps().run)
    async with open_checked_runner(memory_url, config(group, janitor_interval=None), tasks) as r:
        janitor = r._components.janitor  # type: ignore[union-attr]
        broker = r._components.broker  # type: ignore[union-attr]
        raw_memory.sadd(keys.concurrency_keys, "3:one:bad", "3:one:ok")
        raw_memory.zadd(keys.concurrency_holders("3:one:ok"), {"not-an-entry": 1})
        reconcile = broker.reconcile_slots

        async def failing(key: str, limit: int) -> tuple[int, int, int]:
            if key.endswith(":bad"):
                raise trunner.errors.RedisCommandError("ERR injected for one limit")
            return await reconcile(key, limit)

        monkeypatch.setattr(broker, "reconcile_slots", failing)
        await janitor._reconcile_slots()
        assert janitor.slots_freed == 1
        assert raw_memory.zcard(keys.concurrency_holders("3:one:ok")) == 0
        assert r.statistics().errors >= 1


@pytest.mark.parametrize("shared", [False, True], ids=["own-queue", "shared-queue"])
async def test_a_task_waiting_for_a_slot_is_found_by_status_result_and_cancel(
    url: str, group: str, shared: bool
) -> None:
    """A task deferred by its concurrency limit waits in a list: ``result()`` raised
    ResultNotFound at once (though it ran later and succeeded), ``status()`` said unknown,
    and ``cancel()`` answered unknown and the task ran all the same."""
    steps = Steps()
    tasks = trunner.TaskRegistry()

    @tasks.task(name="one", concurrency=1, keep_result=60)
    async def one(payload: str) -> str:
        await steps.run(payload)
        return payload.upper()

    queue = f"q-{group}" if shared else group
    if shared:  # a second group reads the queue: the deferred entry stays in the stream
        async with open_checked_runner(url, config(f"{group}-other", queue=queue), tasks):
            pass
    cfg = config(group, queue=queue, janitor_interval=None)
    async with (
        open_checked_runner(url, cfg, tasks) as runner,
        trunner.open_client(url, queue, group=group) as client,
    ):
        await client.dispatch("one", "a")
        await steps.wait_started(1)
        b = await client.dispatch("one", "b")
        c = await client.dispatch("one", "c")

        async def both_wait() -> bool:
            return runner.statistics().deferred_concurrency == 2

        await redis_state(both_wait)
        status = await client.handle(b.id).status()
        assert (status.state, status.task, status.attempt) == (trunner.TaskState.QUEUED, "one", 1)
        with pytest.raises(trunner.ResultTimeout):
            await client.handle(b.id).result(timeout=0)
        assert await client.handle(c.id).cancel() is trunner.CancelOutcome.REMOVED
        assert (await c.status()).state is trunner.TaskState.CANCELLED
        with pytest.raises(trunner.TaskCancelled):
            await c.result(timeout=0)
        results: list[str] = []
        async with trio.open_nursery() as nursery:

            async def wait_b() -> None:
                results.append(await client.handle(b.id).result())

            nursery.start_soon(wait_b)
            steps.finish("a")
            await steps.wait_started(2)
            steps.finish("b")
        assert results == ["B"]
        assert (await runner.admin.inspect()).concurrency.get("3:one", (0, 0)) == (0, 0)
    assert steps.payloads == ["a", "b"], "the cancelled waiter never ran"


async def test_a_task_deferred_by_its_rate_is_found_by_status_result_and_cancel(
    url: str, group: str
) -> None:
    """A rate-deferred task waits in the delayed set, due when its rate admits it: it is
    scheduled, a wait for it goes on, and cancelling it removes it."""
    steps = Steps()
    tasks = trunner.TaskRegistry()
    tasks.task("paced", rate_limit="1/h", keep_result=60)(steps.run)
    async with open_checked_runner(url, config(group), tasks) as runner:
        await runner.dispatch("paced", "a")
        await steps.wait_started(1)
        b = await runner.dispatch("paced", "b")

        async def deferred() -> bool:
            return runner.statistics().deferred_rate == 1

        await redis_state(deferred)
        status = await b.status()
        assert status.state is trunner.TaskState.SCHEDULED
        assert status.due_at is not None
        assert status.due_at > time.time() + 3000
        with pytest.raises(trunner.ResultTimeout):
            await b.result(timeout=0)
        assert await b.cancel() is trunner.CancelOutcome.REMOVED
        assert (await b.status()).state is trunner.TaskState.CANCELLED
        steps.finish("a")
    assert steps.payloads == ["a"]
