"""The tasks bench/bodies.py runs with the ``trunner worker`` command (scenarios 20 and 21):

    PYTHONPATH=bench/queues trunner worker trunner_app:settings --group Q --redis URL --workers W

``cpu`` is a plain ``def`` (a worker thread of the worker process); ``cpu_process`` the same
body with ``run_in="process"`` (a process of the worker's, ``RunnerConfig.max_processes``:
by default one per core); ``spin`` runs in a process under a timeout of ``SPIN_LIMIT``,
given up after one attempt, its outcome kept for the waiter. The bodies are _driver's, so
every queue runs the same code. The middleware reports when each attempt starts (the
timeout counts from there) as ``{"event": "attempt_start", "i", "t"}`` on stdout. Keys:
prefix ``trunner-bench`` (q_trunner.py's), consumer group from ``--group``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from _driver import SPIN_LIMIT, cpu_body, emit, spin

import trunner

PREFIX = "trunner-bench"
tasks = trunner.TaskRegistry()


@tasks.task
def cpu(payload: Any) -> None:
    cpu_body(payload)


@tasks.task(run_in="process")
def cpu_process(payload: Any) -> None:
    cpu_body(payload)


@tasks.task("spin", run_in="process", timeout=SPIN_LIMIT, max_retry=0, keep_result=60)
def spin_task(payload: Any) -> None:
    spin(payload)


class AttemptStarts(trunner.Middleware):
    """When each ``spin`` attempt starts, before its timeout's clock does."""

    @contextlib.asynccontextmanager
    async def around_attempt(self, attempt: trunner.middleware.AttemptInfo) -> AsyncIterator[None]:
        message = attempt.message
        if message.task_name == "spin":
            emit({"event": "attempt_start", "i": message.payload["i"], "t": time.time()})
        yield


def settings() -> trunner.WorkerSettings:
    config = trunner.RunnerConfig(
        consumer_group="bench", prefix=PREFIX, middleware=[AttemptStarts()]
    )
    return trunner.WorkerSettings(tasks, config)
