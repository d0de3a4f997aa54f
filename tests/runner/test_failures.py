"""Retries through the delayed set, the failed-task handler, the dead-letter stream.

Crosses outcomes.py (what ends an attempt), the retry and dead-letter scripts of
_redis/broker/acks.py, mover.py (a retry comes back when it is due) and the runner's errors().
"""

from __future__ import annotations

import json
import time
from typing import Any

import attrs
import pytest
import trio

import trunner
from trunner.keys import Keys

from ..conftest import Tally, config, open_checked_runner, redis_state


class Handled:
    """A failed-task handler that records its calls."""

    def __init__(self, fail_times: int = 0) -> None:
        self.calls: list[tuple[trunner.TaskMessage, BaseException]] = []
        self.fail_times = fail_times
        self._lot = trio.lowlevel.ParkingLot()

    async def __call__(self, message: trunner.TaskMessage, error: BaseException) -> None:
        self.calls.append((message, error))
        self._lot.unpark_all()
        if len(self.calls) <= self.fail_times:
            raise RuntimeError("handler failed")

    async def wait(self, count: int) -> None:
        while len(self.calls) < count:
            await self._lot.park()


def dead_entries(raw: Any, keys: Keys) -> list[dict[str, str]]:
    entries = raw.xrange(keys.dead)
    return [
        {k.decode(): v.decode("utf-8", "replace") for k, v in fields.items()}
        for _, fields in entries
    ]


def _add(raw: Any, keys: Keys, fields: dict[bytes, bytes]) -> str:
    entry_id: bytes = raw.xadd(keys.stream, fields)
    return entry_id.decode()


async def trunner_dispatch_unknown(raw: Any, keys: Keys) -> str:
    await trio.lowlevel.checkpoint()
    body = {"task": "nope", "payload": 1, "attempt": 1, "enqueued_at": time.time()}
    return _add(raw, keys, {b"payload": json.dumps(body).encode()})


async def test_failing_task_is_retried_then_dead_lettered(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    attempts: list[int] = []
    tasks = trunner.TaskRegistry()

    @tasks.task(max_retry=2, retry_backoff=0.01)
    async def flaky(payload: Any) -> None:
        attempts.append(trunner.current_message().attempt)
        raise ValueError(f"bad {payload}")

    handler = Handled()
    cfg = config(group, failed_task_handler=handler)
    async with open_checked_runner(url, cfg, tasks) as runner:
        task_id = await runner.dispatch("flaky", 7)
        await handler.wait(1)

        async def settled() -> bool:
            return await runner.admin.dead_letter_count() == 1

        await redis_state(settled)
        errors = []
        async for error in runner.errors():
            errors.append(error)
            if len(errors) == 3:
                break
        stats = runner.statistics()
        assert await runner.admin.queue_length() == 0
        assert await runner.admin.pending_count() == 0
        assert await runner.admin.delayed_count() == 0
    assert attempts == [1, 2, 3]
    assert [type(e) for e in errors] == [trunner.TaskFailed] * 3
    assert [e.attempt for e in errors if isinstance(e, trunner.TaskFailed)] == [1, 2, 3]
    assert isinstance(errors[0].__cause__, ValueError)
    ((message, error),) = handler.calls
    assert isinstance(error, trunner.MaxRetryExceeded)
    assert isinstance(error.__cause__, ValueError)
    assert (message.task_name, message.payload, message.attempt) == ("flaky", 7, 3)
    assert message.task_id == task_id, "retries keep the task id"
    (dead,) = dead_entries(raw, keys)
    assert dead["reason"] == "max retries exceeded"
    assert dead["task"] == "flaky"
    assert dead["task_id"] == task_id
    assert dead["attempt"] == "3"
    assert "ValueError: bad 7" in dead["cause"]
    assert json.loads(dead["payload"])["payload"] == 7
    assert (stats.failed, stats.retried, stats.dead_lettered, stats.succeeded) == (3, 2, 1, 0)


async def test_retry_is_acknowledged_and_scheduled_in_the_delayed_set(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    failed = trio.Event()
    tasks = trunner.TaskRegistry()

    @tasks.task(max_retry=1, retry_backoff=lambda attempt: 60.0 * attempt)
    async def later(_: Any) -> None:
        failed.set()
        raise RuntimeError("not yet")

    async with open_checked_runner(url, config(group), tasks) as runner:
        before = time.time()
        task_id = await runner.dispatch("later", {"x": 1})
        await failed.wait()

        async def scheduled() -> bool:
            return await runner.admin.delayed_count() == 1

        await redis_state(scheduled)
        assert await runner.admin.queue_length() == 0, (
            "the failed entry is acknowledged and deleted"
        )
        assert await runner.admin.pending_count() == 0
    ((member, score),) = raw.zrange(keys.delayed, 0, -1, withscores=True)
    assert member.decode() == task_id, "the delayed set holds the task id"
    body = json.loads(raw.hget(keys.delayed_messages, member))
    assert body["attempt"] == 2
    assert body["id"] == task_id
    assert body["payload"] == {"x": 1}
    assert before + 59 <= score / 1000 <= time.time() + 61


async def test_a_retry_that_succeeds(url: str, group: str, tally: Tally) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task(max_retry=3, retry_backoff=0.01)
    async def once_bad(payload: Any) -> None:
        if trunner.current_message().attempt == 1:
            raise RuntimeError("first time")
        tally.record(payload)

    handler = Handled()
    async with open_checked_runner(url, config(group, failed_task_handler=handler), tasks) as r:
        await r.dispatch("once_bad", "p")
        await tally.wait(1)
        stats = r.statistics()
    assert tally.runs[0][:2] == ("p", 2)
    assert (stats.failed, stats.retried, stats.succeeded, stats.dead_lettered) == (1, 1, 1, 0)
    assert handler.calls == []


POISON: list[tuple[dict[bytes, bytes], str]] = [
    ({b"payload": b"\xff\xfe not utf-8"}, "not valid UTF-8"),
    ({b"payload": b"{not json"}, "not valid JSON"),
    ({b"payload": b"[1, 2]"}, "not an object"),
    ({b"payload": b'{"payload": 1}'}, "'task' is missing"),
    ({b"payload": b'{"task": "record", "payload": 1, "attempt": "x"}'}, "'attempt'"),
    ({b"other": b"field"}, "no 'payload' field"),
]


async def test_poison_entries_are_dead_lettered_and_the_runner_keeps_serving(
    url: str, group: str, keys: Keys, raw: Any, tally: Tally
) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def record(payload: Any) -> None:
        tally.record(payload)

    handler = Handled()
    async with open_checked_runner(url, config(group, failed_task_handler=handler), tasks) as r:
        ids = [_add(raw, keys, fields) for fields, _ in POISON]
        unknown = await trunner_dispatch_unknown(raw, keys)
        await r.dispatch("record", "still serving")
        await tally.wait(1)
        await handler.wait(len(POISON) + 1)

        async def settled() -> bool:
            return (
                await r.admin.dead_letter_count() == len(POISON) + 1
                and not await r.admin.pending_count()
            )

        await redis_state(settled)
    by_id = {m.message_id: (m, e) for m, e in handler.calls}
    for entry_id, (_, reason) in zip(ids, POISON, strict=True):
        message, error = by_id[entry_id]
        assert isinstance(error, trunner.errors.InvalidMessage)
        assert reason in str(error)
        assert message.task_name == ""
    message, error = by_id[unknown]
    assert isinstance(error, trunner.TaskNotFound)
    assert message.task_name == "nope"
    reasons = {d["message_id"]: d["reason"] for d in dead_entries(raw, keys)}
    assert reasons[unknown] == "unknown task"
    assert all(reasons[i] == "undecodable" for i in ids)


async def test_without_a_handler_messages_are_dead_lettered(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def broken(_: Any) -> None:
        raise KeyError("k")

    async with open_checked_runner(url, config(group), tasks) as runner:
        await runner.dispatch("broken", None)

        async def settled() -> bool:
            return await runner.admin.dead_letter_count() == 1

        await redis_state(settled)
    (dead,) = dead_entries(raw, keys)
    assert dead["reason"] == "max retries exceeded"
    assert "KeyError" in dead["cause"]


@pytest.mark.deadline(20)
async def test_a_handler_that_raises_leaves_the_message_pending_for_later(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def broken(_: Any) -> None:
        raise KeyError("k")

    handler = Handled(fail_times=1)
    cfg = config(group, failed_task_handler=handler, reclaim_delay=0.3, reclaim_interval=0.05)
    async with open_checked_runner(url, cfg, tasks) as runner:
        await runner.dispatch("broken", None)
        await handler.wait(1)
        assert await runner.admin.dead_letter_count() == 0
        assert await runner.admin.pending_count() == 1, "kept pending, not acknowledged"
        await handler.wait(2)  # redelivered after the reclaim delay; the handler succeeds

        async def settled() -> bool:
            return await runner.admin.dead_letter_count() == 1

        await redis_state(settled)
        assert await runner.admin.pending_count() == 0
    first, second = handler.calls
    assert isinstance(first[1], trunner.MaxRetryExceeded)
    assert isinstance(second[1], trunner.MaxRetryExceeded), "redelivered past its attempts"
    assert second[0].attempt == 1, "the same attempt: a redelivery is not an attempt"
    assert second[0].deliveries == 2
    dead = dead_entries(raw, keys)
    assert [d["reason"] for d in dead] == ["max retries exceeded (redelivered)"]


async def test_errors_iterator_does_not_block_the_runner(url: str, group: str) -> None:
    """Nobody reads errors(): the runner keeps going, keeping the newest ones."""
    tasks = trunner.TaskRegistry()
    done = 0
    all_done = trio.Event()

    @tasks.task
    async def fail(_: Any) -> None:
        nonlocal done
        done += 1
        if done == 1500:
            all_done.set()
        raise RuntimeError("x")

    async with open_checked_runner(url, config(group, num_workers=50), tasks) as runner:
        await runner.dispatch_many("fail", range(1500))
        await all_done.wait()
        # Each task fails once, and is given up on: two errors each.
        assert runner.statistics().errors >= 3000
    seen = [e async for e in runner.errors()]
    assert len(seen) == 1000, "the newest 1000 are kept"
    assert {type(e) for e in seen} == {trunner.TaskFailed, trunner.MaxRetryExceeded}


def test_handler_sees_a_frozen_message() -> None:
    message = trunner.TaskMessage(
        message_id="1-0", task_name="t", payload=1, attempt=1, enqueued_at=0.0, task_id="1-0"
    )
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        message.attempt = 2  # type: ignore[misc]


async def test_a_message_kept_after_its_handler_raised_keeps_its_attempt_across_restarts(
    url: str, group: str, raw: Any
) -> None:
    """It ran: a shutdown must not hand its attempt back (it would run again as attempt 1)."""
    runs: list[int] = []
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def broken(_: Any) -> None:
        runs.append(trunner.current_message().attempt)
        raise KeyError("k")

    handler = Handled(fail_times=1)
    cfg = config(group, failed_task_handler=handler)
    async with open_checked_runner(url, cfg, tasks) as runner:
        await runner.dispatch("broken", None)
        await handler.wait(1)
    async with open_checked_runner(url, cfg, tasks) as runner:
        await handler.wait(2)  # released at the first shutdown: redelivered at once

        async def settled() -> bool:
            return await runner.admin.dead_letter_count() == 1

        await redis_state(settled)
    assert runs == [1], "the task ran once; the redelivery went straight to the handler"
    second_message, second_error = handler.calls[1]
    assert (second_message.attempt, second_message.deliveries) == (1, 2)
    assert isinstance(second_error, trunner.MaxRetryExceeded)
    assert second_error.redelivered
    assert "without a recorded outcome" in str(second_error)


async def test_the_handler_sees_current_message_for_every_give_up(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    seen: list[str] = []

    class Handler(Handled):
        async def __call__(self, message: trunner.TaskMessage, error: BaseException) -> None:
            seen.append(trunner.current_message().message_id)
            await super().__call__(message, error)

    handler = Handler()
    cfg = config(group, failed_task_handler=handler)
    async with open_checked_runner(url, cfg, trunner.TaskRegistry()):
        unknown = await trunner_dispatch_unknown(raw, keys)
        poison = _add(raw, keys, {b"payload": b"{"})
        await handler.wait(2)
    assert sorted(seen) == sorted([unknown, poison])


async def test_a_retry_gets_the_payload_as_dispatched(url: str, group: str) -> None:
    """The failed attempt changed its payload object: the retry must not see that."""
    seen: list[Any] = []
    done = trio.Event()
    tasks = trunner.TaskRegistry()

    @tasks.task(max_retry=1, retry_backoff=0.01)
    async def mutating(payload: dict[str, Any]) -> None:
        seen.append(json.loads(json.dumps(payload)))
        payload["changed"] = True
        payload["items"].append("extra")
        if trunner.current_message().attempt == 1:
            raise RuntimeError("first")
        done.set()

    async with open_checked_runner(url, config(group), tasks) as runner:
        await runner.dispatch("mutating", {"items": ["a"]})
        await done.wait()
    assert seen == [{"items": ["a"]}, {"items": ["a"]}]


async def test_the_dead_letter_of_a_misspelt_task_name_says_which_was_meant(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def resize(_: Any) -> None:
        pass

    handler = Handled()
    async with open_checked_runner(url, config(group, failed_task_handler=handler), tasks):
        body = {"task": "resise", "payload": 1, "attempt": 1, "enqueued_at": time.time()}
        _add(raw, keys, {b"payload": json.dumps(body).encode()})
        await handler.wait(1)
    [(_, error)] = handler.calls
    assert isinstance(error, trunner.TaskNotFound)
    assert error.suggestions == ["resize"]
    [dead] = dead_entries(raw, keys)
    assert dead["reason"] == "unknown task"
    assert "did you mean 'resize'?" in dead["error"]


@pytest.mark.parametrize(
    ("raised", "retried"),
    [
        ("give-up", False),  # a GiveUp among others: the task said so
        ("all-listed", False),  # every error of a give_up_on type
        ("one-listed", True),  # one of them could go away on a retry
    ],
)
async def test_giving_up_from_inside_a_nursery(
    url: str, group: str, raised: str, retried: bool
) -> None:
    """A nursery in the task wraps what its children raise in an exception group: a
    GiveUp inside one was retried like any failure."""
    tasks = trunner.TaskRegistry()
    attempts: list[int] = []

    async def fail(error: BaseException) -> None:  # raises at its first step, so that
        raise error  # every child's error is in the group, none is cancelled first

    @tasks.task(max_retry=1, give_up_on=(KeyError,), retry_backoff=lambda _: 0.0)
    async def fan_out(_: Any) -> None:
        attempts.append(trunner.current_message().attempt)
        table: dict[str, list[BaseException]] = {
            "give-up": [trunner.GiveUp("the file is gone"), ValueError("and this")],
            "all-listed": [KeyError("a"), KeyError("b")],
            "one-listed": [KeyError("a"), ConnectionError("b")],
        }
        errors = table[raised]
        async with trio.open_nursery() as nursery:
            for error in errors:
                nursery.start_soon(fail, error)

    async with open_checked_runner(url, config(group), tasks) as runner:
        await runner.dispatch(fan_out, None)

        async def dead_lettered() -> bool:
            return await runner.admin.dead_letter_count() == 1

        await redis_state(dead_lettered)
        [letter] = await runner.admin.dead_letters()
    assert attempts == ([1, 2] if retried else [1])
    expected = "max retries exceeded" if retried else "given up by the task (no retry)"
    assert letter.reason == expected


class BlockingOnce(Handled):
    """A failed-task handler whose first call waits until it is cancelled."""

    async def __call__(self, message: trunner.TaskMessage, error: BaseException) -> None:
        await super().__call__(message, error)
        if len(self.calls) == 1:
            await trio.sleep_forever()


async def test_a_handler_cut_off_by_shutdown_runs_again_not_the_task(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    """The task failed its last attempt and its handler was cut off by the drain timeout:
    the message is released marked given up, so the next runner calls the handler at
    once, and never runs the task again (a run lost to a crash would run again)."""
    runs: list[int] = []
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def broken(_: Any) -> None:
        runs.append(trunner.current_message().attempt)
        raise KeyError("k")

    handler = BlockingOnce()
    cfg = config(group, failed_task_handler=handler, drain_timeout=0.1)
    async with open_checked_runner(url, cfg, tasks) as runner:
        await runner.dispatch("broken", None)
        await handler.wait(1)
    async with open_checked_runner(url, cfg, tasks) as runner:
        await handler.wait(2)

        async def settled() -> bool:
            return await runner.admin.dead_letter_count() == 1

        await redis_state(settled)
        assert await runner.admin.pending_count() == 0
    assert runs == [1], "the redelivery went straight to the handler"
    second_message, second_error = handler.calls[1]
    assert (second_message.attempt, second_message.deliveries) == (1, 2)
    assert isinstance(second_error, trunner.MaxRetryExceeded)
    assert second_error.redelivered
    assert second_error.deliveries == 0
    assert [d["reason"] for d in dead_entries(raw, keys)] == ["max retries exceeded (redelivered)"]


async def test_the_registry_defaults_drive_the_retries(url: str, group: str) -> None:
    """TaskRegistry(defaults=...): a task that sets no option retries as they say."""
    attempts: list[int] = []
    tasks = trunner.TaskRegistry(
        defaults=trunner.TaskDefaults(max_retry=2, retry_backoff=0, keep_result=60)
    )

    @tasks.task
    async def flaky(_: Any) -> str:
        attempts.append(trunner.current_message().attempt)
        if len(attempts) < 3:
            raise RuntimeError("not yet")
        return "done"

    async with open_checked_runner(url, config(group), tasks) as runner:
        handle = await runner.dispatch("flaky", None)
        with trio.fail_after(10):
            assert await handle.result() == "done"
    assert attempts == [1, 2, 3]
