"""Looking at tasks through what something else wrote: a record of the wrong type.
``status()``, ``result()`` and ``cancel()`` give an answer, never a Redis error; the
runner writes its record over the foreign value.

Crosses handles.py and the scripts that look (``task_status.lua``) and write records
(``task_started.lua``, ``task_progress.lua``).
"""

from __future__ import annotations

from typing import Any

import pytest

import trunner
from trunner import Keys, TaskState

from ..conftest import Gate, config, open_checked_runner, raw_client, redis_state


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
