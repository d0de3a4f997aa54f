"""Looking at tasks through what something else wrote: a record of the wrong type, a
where-map entry that is not an entry id, ids that look like entry ids and are not.
``status()``, ``result()`` and ``cancel()`` give an answer, never a Redis error; the
runner writes its record over a foreign value.

Crosses handles.py and the scripts that look (``task_status.lua``), cancel
(``cancel_task.lua``) and write records (``task_started.lua``, ``task_progress.lua``).
"""

from __future__ import annotations

from typing import Any

import pytest

import trunner
from trunner import CancelOutcome, TaskState
from trunner._wire.envelope import encode_message
from trunner.keys import Keys

from ..conftest import Gate, config, open_checked_runner, raw_client, redis_state

#: Ids shaped like stream entry ids that Redis does not take as one.
NOT_ENTRY_IDS = [
    "99999999999999999999999-0",
    "1-99999999999999999999999",
    "18446744073709551616-0",
]


def registry(ran: list[Any], gate: Gate | None = None) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.task(keep_result=60)
    async def record(payload: Any) -> Any:
        ran.append(payload)
        return payload

    @tasks.task(keep_result=60)
    async def gated(payload: Any) -> Any:
        assert gate is not None
        gate.enter(payload)
        await trunner.report_progress(0.5, "half")
        await gate.open.wait()
        return payload

    return tasks


async def _all_answers(handle: trunner.TaskHandle[Any]) -> TaskState:
    """status, result(timeout=0) and cancel of a task that is nowhere: each answers."""
    state = (await handle.status()).state
    with pytest.raises(trunner.ResultNotFound):
        await handle.result(timeout=0)
    with pytest.raises(trunner.ResultNotFound):
        await handle.result()
    assert await handle.cancel() is CancelOutcome.UNKNOWN
    return state


@pytest.mark.parametrize("task_id", NOT_ENTRY_IDS)
async def test_an_id_shaped_like_an_entry_id_that_is_not_one_is_nowhere(
    url: str, group: str, task_id: str
) -> None:
    async with trunner.open_client(url, group) as client:
        await client.dispatch("record", 1)  # the stream and its group exist
        assert await _all_answers(client.handle(task_id)) is TaskState.UNKNOWN


@pytest.mark.parametrize(
    "value",
    [b"", b"garbage", b"99999999999999999999999-0", b"1-", b"-1", b"\xff", b"7-7", b"7", b"+"],
)
async def test_a_where_map_entry_that_leads_nowhere_is_nowhere(
    url: str, group: str, keys: Keys, value: bytes
) -> None:
    async with trunner.open_client(url, group) as client:
        await client.dispatch("record", 1)
        raw = raw_client(url)
        try:
            raw.hset(keys.where, "lost-task", value)
        finally:
            raw.close()
        assert await _all_answers(client.handle("lost-task")) is TaskState.UNKNOWN


@pytest.mark.parametrize("how", ["where-map", "entry-id"])
async def test_an_entry_of_another_task_is_not_this_one(
    url: str, group: str, keys: Keys, how: str
) -> None:
    """A where-map entry gone stale, or an id shaped like an entry id, that leads to the
    entry of another task: that task is neither shown nor cancelled."""
    async with trunner.open_client(url, group) as client:
        plain = await client.dispatch("record", "plain")
        raw = raw_client(url)
        try:
            # a moved task (delayed, retried ...): its entry has an id of its own, and
            # holds the task's id; the where-map leads to it
            data = encode_message(
                "record", "moved", enqueued_at=1.0, task_id="moved", max_bytes=1000
            )
            moved_entry = raw.xadd(keys.stream, {"payload": data}).decode()
            raw.hset(keys.where, "moved", moved_entry)
            moved = client.handle("moved")
            if how == "where-map":
                raw.hset(keys.where, "impostor", str(plain))
                impostor = client.handle("impostor")
            else:
                impostor = client.handle(moved_entry)  # the entry id of a task of another id
        finally:
            raw.close()
        assert await _all_answers(impostor) is TaskState.UNKNOWN
        assert (await plain.status()).state is TaskState.QUEUED
        assert (await moved.status()).state is TaskState.QUEUED
        assert await client.admin.queue_length() == 2


@pytest.mark.parametrize("kind", ["string", "list", "set", "zset", "stream"])
async def test_a_record_of_the_wrong_type_is_no_record(
    url: str, group: str, keys: Keys, kind: str
) -> None:
    """The look reads where the task is; the runner writes its start, its progress and its
    outcome over the foreign value."""
    gate = Gate()
    async with trunner.open_client(url, group) as client:
        handle = await client.dispatch("gated", "x")
        raw = raw_client(url)
        try:
            key = keys.task(str(handle))
            {
                "string": lambda: raw.set(key, "junk"),
                "list": lambda: raw.rpush(key, "junk"),
                "set": lambda: raw.sadd(key, "junk"),
                "zset": lambda: raw.zadd(key, {"junk": 1}),
                "stream": lambda: raw.xadd(key, {"junk": "1"}),
            }[kind]()
        finally:
            raw.close()
        assert (await handle.status()).state is TaskState.QUEUED  # from where it is
        async with open_checked_runner(url, config(group), registry([], gate)):
            await gate.wait_started()
            await redis_state(lambda: _progress_shown(handle))
            status = await handle.status()
            assert status.state is TaskState.RUNNING
            assert status.started_at is not None
            gate.open.set()
            assert await handle.result() == "x"
        assert (await handle.status()).state is TaskState.SUCCEEDED


async def _progress_shown(handle: trunner.TaskHandle[Any]) -> bool:
    return (await handle.status()).progress == 0.5
