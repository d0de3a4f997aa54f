"""A worker: ``trunner worker examples.worker:settings --redis redis://localhost:6379/0``.

Stop it with Ctrl-C (graceful: running tasks finish); a second Ctrl-C stops it at once.
Dispatch to it with ``trunner dispatch thumbnails resize '{"image": "cat.png"}'``, or from
code with ``trunner.open_client`` (see examples/web_producer.py).
"""

from __future__ import annotations

import logging
from typing import Any

import trio

import trunner

log = logging.getLogger("examples.worker")
tasks = trunner.TaskRegistry()


@tasks.task(max_retry=3, retry_backoff=0.5, timeout=60)  # each attempt: at most 60 s
async def resize(payload: dict[str, Any]) -> None:
    message = trunner.current_message()
    await trio.sleep(payload.get("seconds", 0.05))  # the real work goes here
    log.info("resized %s (attempt %d)", payload["image"], message.attempt)


@tasks.task(unique=True, unique_key=lambda p: p["user"], unique_for=300)
async def rebuild_feed(payload: dict[str, Any]) -> None:
    await trio.sleep(0.01)
    log.info("rebuilt the feed of %s", payload["user"])


settings = trunner.WorkerSettings(
    tasks,
    trunner.RunnerConfig(consumer_group="thumbnails", num_workers=20, drain_timeout=20.0),
)
