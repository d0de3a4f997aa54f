"""The app of the supervisor's tests::

    trunner worker tests.processes.supervised_app:settings --group G --processes N

Its tasks say which process ran them (``os.getpid()``, kept as their result):

- ``meet`` waits until ``payload["count"]`` tasks of the same ``payload["key"]`` run: with
  ``--workers 1``, that many of them run at once only in that many different processes;
- ``nap`` sleeps ``payload`` seconds (an async sleep: a drain waits for it, a stop at once
  cancels it);
- ``hog`` writes its pid to the key ``payload["key"]``, then blocks its process's event
  loop for ``payload["seconds"]`` (no signal is handled meanwhile);
- ``hold``, at its first attempt, writes its pid to the key ``payload`` and waits (to be
  killed); a later attempt returns at once.

``quick`` is the same app with a short ``reclaim_delay``: the messages of a killed worker
process are taken over by another one within seconds.
"""

from __future__ import annotations

import os
import time
from typing import Any

import attrs
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


@tasks.task(keep_result=600)
async def hold(payload: str) -> int:
    if await trunner.current_runner().redis.set(payload, os.getpid(), nx=True):
        await trio.sleep(600)  # the first attempt: killed while it waits
    return os.getpid()


CONFIG = trunner.RunnerConfig(
    consumer_group="supervised", block_duration=1.0, drain_timeout=10.0, stall_threshold=None
)
settings = trunner.WorkerSettings(tasks, CONFIG)
quick = trunner.WorkerSettings(tasks, attrs.evolve(CONFIG, reclaim_delay=1.5, reclaim_interval=0.1))
