"""Message headers end to end: set at dispatch on every path, read by task code, and kept
through retries, delayed moves, cron ticks, reclaims and dead-letter replays; entries
from before headers existed still run; bad headers in Redis are contained."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

import trunner
from trunner.keys import Keys
from trunner.testing import run_until_idle

from ..conftest import config, open_checked_runner, redis_state

HEADERS = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "t": "é"}


class Seen:
    """What each run of a task saw: (payload, attempt, headers); tests await counts."""

    def __init__(self) -> None:
        self.runs: list[tuple[Any, int, dict[str, str]]] = []
        self._lot = trio.lowlevel.ParkingLot()

    def record(self, payload: Any) -> None:
        message = trunner.current_message()
        self.runs.append((payload, message.attempt, dict(message.headers)))
        self._lot.unpark_all()

    async def wait(self, count: int) -> None:
        while len(self.runs) < count:
            await self._lot.park()


def registry(seen: Seen) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def record(payload: Any) -> None:
        seen.record(payload)

    @tasks.task(max_retry=2)
    async def survives_a_crash(payload: Any) -> None:
        seen.record(payload)

    @tasks.task(max_retry=1, retry_backoff=0.01)
    async def fails_once(payload: Any) -> None:
        seen.record(payload)
        if trunner.current_message().attempt == 1:
            raise RuntimeError("first attempt")

    @tasks.task(max_retry=0)
    async def fails_until_replayed(payload: Any) -> None:
        seen.record(payload)
        if len(seen.runs) == 1:
            raise RuntimeError("dead-lettered")

    @tasks.task(unique=True, unique_for=60, unique_key=str)
    async def unique(payload: Any) -> None:
        seen.record(payload)

    return tasks


async def test_every_dispatch_path_carries_headers_to_the_task(url: str, group: str) -> None:
    seen = Seen()
    tasks = registry(seen)
    async with open_checked_runner(url, config(group), tasks) as runner:
        await runner.dispatch("record", "one", headers=HEADERS)
        await runner.dispatch_many("record", ["many-1", "many-2"], headers={"m": "1"})
        await runner.dispatch_delayed("record", "delayed", 0.05, headers={"d": "1"})
        await runner.dispatch("unique", "u", headers={"u": "1"})
        await runner.dispatch_many("unique", ["u1", "u2"], headers={"u": "2"})
        await runner.dispatch("record", "none")
        async with trunner.open_client(url, group) as client:  # by name, without a registry
            await client.dispatch("record", "client", headers={"c": "1"})
        await seen.wait(9)
        await run_until_idle(runner)
    got = {payload: headers for payload, _, headers in seen.runs}
    assert got == {
        "one": HEADERS,
        "many-1": {"m": "1"},
        "many-2": {"m": "1"},
        "delayed": {"d": "1"},
        "u": {"u": "1"},
        "u1": {"u": "2"},
        "u2": {"u": "2"},
        "none": {},
        "client": {"c": "1"},
    }


async def test_bad_headers_are_refused_before_anything_is_written(url: str, group: str) -> None:
    async with trunner.open_client(url, group) as client:
        for bad in ({"a": 1}, {"": "x"}, {"k": "x" * 9000}, "k=v"):
            with pytest.raises(trunner.errors.InvalidHeaders):
                await client.dispatch("record", None, headers=bad)  # type: ignore[arg-type]
            with pytest.raises(trunner.errors.InvalidHeaders):
                await client.dispatch_many("record", [1, 2], headers=bad)  # type: ignore[arg-type]
            with pytest.raises(trunner.errors.InvalidHeaders):
                await client.dispatch_delayed("record", None, 10, headers=bad)  # type: ignore[arg-type]
        assert await client.admin.queue_length() == 0
        assert await client.admin.delayed_count() == 0


async def test_a_retry_carries_the_headers_of_the_first_attempt(url: str, group: str) -> None:
    seen = Seen()
    async with open_checked_runner(url, config(group), registry(seen)) as runner:
        await runner.dispatch("fails_once", 1, headers=HEADERS)
        await seen.wait(2)
        await run_until_idle(runner)
    assert seen.runs == [(1, 1, HEADERS), (1, 2, HEADERS)]


async def test_a_replayed_dead_letter_carries_its_headers(url: str, group: str) -> None:
    seen = Seen()
    async with open_checked_runner(url, config(group), registry(seen)) as runner:
        await runner.dispatch("fails_until_replayed", 1, headers=HEADERS)
        await seen.wait(1)

        async def dead_lettered() -> bool:
            return await runner.admin.dead_letter_count() == 1

        await redis_state(dead_lettered)
        (letter,) = await runner.admin.dead_letters()
        assert letter.headers == HEADERS
        replayed = await runner.admin.replay_dead_letters()
        assert len(replayed.replayed) == 1
        await seen.wait(2)
        await run_until_idle(runner)
    assert [headers for _, _, headers in seen.runs] == [HEADERS, HEADERS]


async def test_a_reclaimed_message_carries_its_headers(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    async with trunner.open_client(url, group) as client:
        await client.dispatch("survives_a_crash", "crashed", headers=HEADERS)
    raw.xgroup_create(keys.stream, keys.group, id="0", mkstream=True)
    raw.xreadgroup(keys.group, "dead-consumer", {keys.stream: ">"}, count=1)  # then "dies"
    seen = Seen()
    cfg = config(group, reclaim_delay=0.3, reclaim_interval=0.05)
    async with open_checked_runner(url, cfg, registry(seen)) as runner:
        await seen.wait(1)
        await run_until_idle(runner)
        assert runner.statistics().reclaimed == 1
    assert seen.runs == [("crashed", 1, HEADERS)], "the same attempt, delivered again"


@pytest.mark.deadline(30)
async def test_cron_ticks_carry_the_schedules_headers(url: str, group: str) -> None:
    seen = Seen()
    tasks = registry(seen)
    tasks.cron("* * * * * *", "record", "tick", headers={"source": "cron"})
    async with open_checked_runner(url, config(group), tasks) as runner:
        await seen.wait(1)
        await run_until_idle(runner)
    assert seen.runs[0] == ("tick", 1, {"source": "cron"})


async def test_firing_a_cron_schedule_now_carries_its_headers(url: str, group: str) -> None:
    """``fire_cron`` (the dashboard's "Fire now", ``trunner cron fire``) sends the message a
    tick would: with the schedule's headers (its tenant, say), not without them."""
    seen = Seen()
    tasks = registry(seen)
    tasks.cron("0 3 * * *", "record", "now", name="nightly", headers={"tenant": "acme"})
    async with open_checked_runner(url, config(group), tasks) as runner:
        await runner.fire_cron("nightly")
        await seen.wait(1)
        await run_until_idle(runner)
    assert seen.runs == [("now", 1, {"tenant": "acme"})]


async def test_an_entry_written_before_headers_existed_runs(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    seen = Seen()
    async with open_checked_runner(url, config(group), registry(seen)) as runner:
        old = {"task": "record", "payload": "old", "attempt": 1, "enqueued_at": 1.0}
        raw.xadd(keys.stream, {"payload": json.dumps(old)})
        await seen.wait(1)
        await run_until_idle(runner)
        assert runner.statistics().succeeded == 1
    assert seen.runs == [("old", 1, {})]


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ('"a=b"', "'headers' must be a JSON object"),
        ('{"a":1}', "the header 'a' is not a string"),
        ('{"k":"' + "x" * 9000 + '"}', "more than 8192"),
    ],
)
async def test_bad_headers_in_redis_dead_letter_the_entry_with_the_reason(
    url: str, group: str, keys: Keys, raw: Any, headers: str, why: str
) -> None:
    """As for any undecodable field: set aside with its reason, not run on a guess."""
    seen = Seen()
    async with open_checked_runner(url, config(group), registry(seen)) as runner:
        body = '{"task":"record","payload":"bad","headers":' + headers + "}"
        raw.xadd(keys.stream, {"payload": body})
        raw.xadd(keys.stream, {"payload": json.dumps({"task": "record", "payload": "next"})})
        await seen.wait(1)  # the loop went on

        async def dead_lettered() -> bool:
            return await runner.admin.dead_letter_count() == 1

        await redis_state(dead_lettered)
        await run_until_idle(runner)
        (letter,) = await runner.admin.dead_letters()
    assert seen.runs == [("next", 1, {})]
    assert letter.reason == "undecodable"
    assert why in letter.error
    assert letter.headers == {}
