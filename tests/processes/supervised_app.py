"""The app of the supervisor's tests::

    trunner worker tests.processes.supervised_app:settings --group G --processes N

Its tasks say which process ran them (``os.getpid()``, kept as their result):

- ``meet`` waits until ``payload["count"]`` tasks of the same ``payload["key"]`` run: with
  ``--workers 1``, that many of them run at once only in that many different processes;
- ``nap`` sleeps ``payload`` seconds (an async sleep: a drain waits for it, a stop at once
  cancels it);
- ``hog`` writes its pid to the key ``payload["key"]``, then blocks its process's event
  loop for ``payload["seconds"]`` (no signal is handled meanwhile).
"""

from __future__ import annotations

import os
import time
from typing import Any

import trio

import trunner

tasks = trunner.TaskRegistry()


@tasks.task(keep_result=600)
async def meet(payload: dict[str, Any]) -> int:
    redis, key, count = trunner.current_runner().redis, payload["key"], payload["count"]
    if await redis.incr(f"{key}:arrived") == count:  # the last to arrive lets all go on
        await redis.rpush(f"{key}:go", *[1] * count)
    await redis.execute("BLPOP", f"{key}:go", 0)
    return os.getpid()


@tasks.task(keep_result=600)
async def nap(payload: float) -> int:
    await trio.sleep(payload)
    return os.getpid()


@tasks.task
async def hog(payload: dict[str, Any]) -> None:
    await trunner.current_runner().redis.set(payload["key"], os.getpid())
    time.sleep(payload["seconds"])  # noqa: ASYNC251 - blocks the loop on purpose


settings = trunner.WorkerSettings(
    tasks,
    trunner.RunnerConfig(
        consumer_group="supervised", block_duration=1.0, drain_timeout=10.0, stall_threshold=None
    ),
)
