"""The worker of the reliability suite, run through the real command line::

    TRUNNER_RELIABILITY_LOG=DIR TRUNNER_RELIABILITY_OPTIONS='{"config": {...}}' \\
        python -m trunner worker tests.processes.reliability_worker:settings --redis URL

``config`` holds the ``RunnerConfig`` arguments (``consumer_group`` included); ``max_retry``
(default 10) is the tasks' retry count. The command prints ``{"ready": true}`` once the
runner started, stops gracefully on SIGTERM, and its tasks record their history:

- ``work`` ({"id": ..., "seconds": s}) sleeps ``s`` seconds (Trio sleep);
- ``stall`` ({"id": ..., "seconds": s}) blocks the event loop ``s`` seconds (``time.sleep``);
  with ``"first_only": true`` only its first delivery does.

Each run appends ``started``, then ``finished`` or ``interrupted`` (cancelled by a shutdown),
as one JSON line each to ``DIR/events-<pid>.jsonl``: {"event", "id", "pid", "t" (wall clock),
"attempt", "message_id", "run"}. Every line is one ``os.write`` on an ``O_APPEND`` file
descriptor: it is in the kernel when the call returns, so a SIGKILL right after it loses
nothing (no fsync: the suite kills processes, not the machine).
"""

from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path
from typing import Any

import trio

import trunner

__all__ = ["LOG_ENV", "OPTIONS_ENV", "settings"]

LOG_ENV = "TRUNNER_RELIABILITY_LOG"
OPTIONS_ENV = "TRUNNER_RELIABILITY_OPTIONS"


class EventFile:
    """This process's event log."""

    def __init__(self, directory: Path) -> None:
        self.pid = os.getpid()
        path = directory / f"events-{self.pid}.jsonl"
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._runs = itertools.count(1)

    def started(self, payload: dict[str, Any]) -> str:
        run = str(next(self._runs))
        self.write("started", payload, run)
        return run

    def write(self, event: str, payload: dict[str, Any], run: str) -> None:
        message = trunner.current_message()
        line = {
            "event": event,
            "id": payload["id"],
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

    return trunner.WorkerSettings(tasks, trunner.RunnerConfig(**options["config"]))
