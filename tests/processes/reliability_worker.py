"""The worker of the reliability suite, run through the real command line::

    TRUNNER_RELIABILITY_LOG=DIR TRUNNER_RELIABILITY_OPTIONS='{"config": {...}}' \\
        python -m trunner worker tests.processes.reliability_worker:settings --redis URL

``config`` holds the ``RunnerConfig`` arguments (``consumer_group`` included); ``max_retry``
(default 10) is the tasks' retry count. The command prints ``{"ready": true}`` once the
runner started, stops gracefully on SIGTERM, and its tasks record their history:

- ``work`` ({"id": ..., "seconds": s}) sleeps ``s`` seconds (Trio sleep);
- ``stall`` ({"id": ..., "seconds": s}) blocks the event loop ``s`` seconds (``time.sleep``);
  with ``"first_only": true`` only its first delivery does.

Workflow steps (:func:`workflow_tasks`) log under their task id (``<workflow>.<node>``)
instead, with their payload (``value`` of ``started``) and result (``value`` of
``finished``), as JSON text: ``link`` (a chain's step: its input + 1), ``square`` (a
chord's child), ``total`` (a chord's callback: the sum of its inputs), ``nap`` (sleeps its
payload's seconds), ``refuse`` (fails, never retried), and, for the cancel of a whole
workflow: ``solo`` (``nap`` with ``concurrency=1``), ``flaky`` (fails, retried after an
hour) and ``park`` (``nap``, unique, in the lane ``parked``). Each first sleeps up to
``step_seconds`` (an option, default 0.02; random). The first delivery of a node whose
index is in the option ``linger`` sleeps until its process is killed. A step cancelled
takes ``wind_down`` seconds (an option, default 0) to end.

Each run appends ``started``, then ``finished``, ``interrupted`` (cancelled: by a shutdown,
or by its workflow) or ``failed`` (it raised), as one JSON line each to
``DIR/events-<pid>.jsonl``: {"event", "id", "value", "pid", "t" (wall clock), "attempt",
"message_id", "run"}. Every line is one ``os.write`` on an ``O_APPEND`` file descriptor: it
is in the kernel when the call returns, so a SIGKILL right after it loses nothing (no
fsync: the suite kills processes, not the machine).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

import trunner

__all__ = ["LOG_ENV", "OPTIONS_ENV", "PARKED", "park_key", "settings"]

LOG_ENV = "TRUNNER_RELIABILITY_LOG"
OPTIONS_ENV = "TRUNNER_RELIABILITY_OPTIONS"
#: The lane of ``park``: read only by a runner whose ``lanes`` name it.
PARKED = "parked"


def park_key(_: Any) -> str:
    """The unique key of every ``park``: one lock for them all."""
    return "one"


class EventFile:
    """This process's event log."""

    def __init__(self, directory: Path) -> None:
        self.pid = os.getpid()
        path = directory / f"events-{self.pid}.jsonl"
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._runs = itertools.count(1)

    def started(self, payload: dict[str, Any], value: str = "") -> str:
        run = str(next(self._runs))
        self.write("started", payload, run, value)
        return run

    def write(self, event: str, payload: dict[str, Any], run: str, value: str = "") -> None:
        """Append one event; ``payload["id"]`` names the task (a step's task id names
        it for a workflow's), ``value`` is JSON text (a step's input or result)."""
        message = trunner.current_message()
        line = {
            "event": event,
            "id": payload["id"],
            "value": value,
            "pid": self.pid,
            "t": time.time(),
            "attempt": message.attempt,
            "message_id": message.message_id,
            "run": run,
        }
        os.write(self._fd, (json.dumps(line) + "\n").encode())


def settings() -> trunner.WorkerSettings:
    """The worker's tasks and config, from the environment (see the module docs)."""
    log = EventFile(Path(os.environ[LOG_ENV]))
    options: dict[str, Any] = json.loads(os.environ.get(OPTIONS_ENV, "{}"))
    tasks = trunner.TaskRegistry()
    max_retry = int(options.get("max_retry", 10))

    @tasks.task(max_retry=max_retry)
    async def work(payload: dict[str, Any]) -> None:
        run = log.started(payload)
        try:
            await trio.sleep(float(payload.get("seconds", 0.0)))
        except trio.Cancelled:
            log.write("interrupted", payload, run)
            raise
        log.write("finished", payload, run)

    @tasks.task(max_retry=max_retry)
    async def stall(payload: dict[str, Any]) -> None:
        run = log.started(payload)
        if trunner.current_message().deliveries == 1 or not payload.get("first_only"):
            time.sleep(float(payload["seconds"]))  # noqa: ASYNC251 - the stall is the point
        log.write("finished", payload, run)

    workflow_tasks(tasks, log, options)
    return trunner.WorkerSettings(tasks, trunner.RunnerConfig(**options["config"]))


def workflow_tasks(tasks: trunner.TaskRegistry, log: EventFile, options: dict[str, Any]) -> None:
    """The tasks workflows are made of in the reliability suite (see the module docs)."""
    most = float(options.get("step_seconds", 0.02))
    linger = set(options.get("linger", ()))
    wind_down = float(options.get("wind_down", 0.0))
    rng = random.Random()

    async def logged(value: Any, body: Callable[[Any], Awaitable[Any]]) -> Any:
        message = trunner.current_message()
        step = {"id": message.task_id}
        run = log.started(step, json.dumps(value))
        try:
            node = message.task_id.rpartition(".")[2]  # a plain task's id has no node
            if node.isdigit() and int(node) in linger and message.deliveries == 1:
                await trio.sleep_forever()
            await trio.sleep(rng.uniform(0, most))
            out = await body(value)
        except trio.Cancelled:
            with trio.CancelScope(shield=True):
                await trio.sleep(wind_down)  # its clean-up takes a while
            log.write("interrupted", step, run)
            raise
        except Exception:
            log.write("failed", step, run)
            raise
        log.write("finished", step, run, json.dumps(out))
        return out

    async def plus_one(value: int) -> int:
        return value + 1

    async def squared(value: int) -> int:
        return value * value

    async def summed(values: list[int]) -> int:
        return sum(values)

    async def sleep(seconds: float) -> None:
        await trio.sleep(seconds)

    async def fail(value: Any) -> None:
        raise ValueError(f"refused {value!r}")

    @tasks.task
    async def link(value: int) -> int:
        return int(await logged(value, plus_one))

    @tasks.task
    async def square(value: int) -> int:
        return int(await logged(value, squared))

    @tasks.task
    async def total(values: list[int]) -> int:
        return int(await logged(values, summed))

    @tasks.task
    async def nap(seconds: float) -> None:
        await logged(seconds, sleep)

    @tasks.task(max_retry=0)
    async def refuse(value: Any) -> None:
        await logged(value, fail)

    @tasks.task(concurrency=1)
    async def solo(seconds: float) -> None:
        await logged(seconds, sleep)

    @tasks.task(max_retry=3, retry_backoff=3600.0)
    async def flaky(value: Any) -> None:
        await logged(value, fail)

    @tasks.task(unique=True, unique_key=park_key, unique_for=600.0, priority=PARKED)
    async def park(seconds: float) -> None:
        await logged(seconds, sleep)
