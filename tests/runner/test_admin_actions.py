"""The administration calls the dashboard and the CLI share: dead letters deleted or
replayed by id or by task, read newest first a page at a time; delayed tasks listed;
cron schedules listed and fired now; the age of the oldest waiting message."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

import trunner
from trunner.keys import Keys

from ..support.seeding import message, seed_dead, seed_delayed


async def test_dead_letters_are_deleted_by_id_or_by_task(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    jobs = seed_dead(raw, keys, 3, task="job")
    others = seed_dead(raw, keys, 2, task="other")
    async with trunner.open_client(url, group) as client:
        assert await client.admin.delete_dead_letters([jobs[0], "nonsense", jobs[0]]) == 1
        assert await client.admin.delete_dead_letters([jobs[0]]) == 0, "already gone"
        assert await client.admin.delete_dead_letters(task="other") == 2
        assert [d.id for d in await client.admin.dead_letters()] == jobs[1:]
        with pytest.raises(ValueError, match="either ids or task"):
            await client.admin.delete_dead_letters()
        with pytest.raises(ValueError, match="either ids or task"):
            await client.admin.delete_dead_letters(jobs, task="job")
    assert others  # both were there


async def test_the_dead_letters_of_one_task_are_replayed(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    jobs = seed_dead(raw, keys, 2, task="job")
    others = seed_dead(raw, keys, 1, task="other")
    async with trunner.open_client(url, group) as client:
        result = await client.admin.replay_dead_letters(task="other")
        assert list(result.new_ids) == others
        result = await client.admin.replay_dead_letters([jobs[0], others[0]], task="job")
        assert list(result.new_ids) == [jobs[0]], "ids of another task are left out"
        assert [d.id for d in await client.admin.dead_letters()] == [jobs[1]]
        assert await client.admin.queue_length() == 2


async def test_dead_letters_are_read_newest_first_a_page_at_a_time(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    ids = seed_dead(raw, keys, 7)
    async with trunner.open_client(url, group) as client:
        first = await client.admin.dead_letters_newest(3)
        assert [d.id for d in first] == ids[::-1][:3]
        second = await client.admin.dead_letters_newest(3, f"({first[-1].id}")
        assert [d.id for d in second] == ids[::-1][3:6]
        last = await client.admin.dead_letters_newest(3, f"({second[-1].id}")
        assert [d.id for d in last] == [ids[0]]


async def test_delayed_tasks_are_listed_soonest_first_even_unreadable_ones(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    now = time.time()
    async with trunner.open_client(url, group) as client:
        later = await client.dispatch_delayed("later", {"x": 1}, 600)
        sooner = await client.dispatch_delayed("sooner", None, 300)
        seed_delayed(raw, keys, "bad-1", now + 400, b"\xff not json")
        raw.zadd(keys.delayed, {"lost-1": int((now + 500) * 1000)})
        listed = await client.admin.delayed_tasks()
        assert [(d.id, d.task) for d in listed] == [
            (sooner, "sooner"),
            ("bad-1", ""),
            ("lost-1", ""),
            (later, "later"),
        ]
        assert listed[0].attempt == 1
        assert listed[0].due_at == pytest.approx(now + 300, abs=5)
        assert listed[1].problem.startswith("undecodable")
        assert listed[2].problem == "its message is missing"
        assert [d.id for d in await client.admin.delayed_tasks(2, offset=1)] == ["bad-1", "lost-1"]


async def test_cron_entries_are_listed_and_fired_now(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.cron("0 3 * * *", payload={"deep": True}, headers={"source": "cron"})
    async def nightly(payload: Any) -> None:
        pass

    raw.hset(keys.cron, mapping={"nightly": int(time.time() * 1000) - 5000, "retired": "x"})
    async with trunner.open_client(url, group, tasks=tasks) as client:
        nightly_entry, retired = await client.admin.cron_entries()
        assert (nightly_entry.name, nightly_entry.expression, nightly_entry.task) == (
            "nightly",
            "0 3 * * *",
            "nightly",
        )
        assert nightly_entry.last_fired_at == pytest.approx(time.time() - 5, abs=5)
        assert nightly_entry.next_fire_at is not None
        assert nightly_entry.next_fire_at > time.time()
        assert (retired.name, retired.expression, retired.last_fired_at) == ("retired", "", None)
        handle = await client.fire_cron("nightly")
        assert (await handle.status()).task == "nightly"
        assert await client.admin.queue_length() == 1
        (entry,) = raw.xrange(keys.stream)
        assert json.loads(entry[1][b"payload"])["headers"] == {"source": "cron"}  # as a tick's
        with pytest.raises(LookupError, match="no cron schedule 'retired'"):
            await client.fire_cron("retired")
    async with trunner.open_client(url, group) as anonymous:
        assert [e.name for e in await anonymous.admin.cron_entries()] == ["nightly", "retired"]
        with pytest.raises(LookupError, match="no registry"):
            await anonymous.fire_cron("nightly")


async def test_the_waiting_age_is_the_oldest_undelivered_message_s(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    async with trunner.open_client(url, group) as client:
        assert await client.admin.waiting_age() is None, "no stream"
        past_ms = int(time.time() * 1000) - 30_000
        raw.xadd(keys.stream, {"payload": message("job")}, id=f"{past_ms}-0")
        age = await client.admin.waiting_age()
        assert age is not None
        assert 29 < age < 300
        raw.xgroup_create(keys.stream, group, id="$")
        assert await client.admin.waiting_age() is None, "delivered (the group starts after it)"
