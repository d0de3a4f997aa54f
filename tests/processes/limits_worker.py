"""A worker process with limited tasks, for tests/runner/test_limits_processes.py::

    python -m tests.processes.limits_worker URL GROUP LOG [OPTIONS]

``held`` (``concurrency=2``) logs ``started`` and ``ran`` around a sleep of
``payload["s"]`` seconds; ``paced`` (``rate_limit="50/s"``) logs ``ran`` with the wall
time and the time its admission was reserved for (from its message's mark; 0 when it was
admitted at once). OPTIONS: ``config`` (RunnerConfig arguments). The process prints
``ready`` once its runner started, and stops gracefully on SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

import trio

import trunner
from trunner.message import rate_reserved_at


def main() -> None:
    url, group, log_path = sys.argv[1:4]
    options = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    pid = os.getpid()
    tasks = trunner.TaskRegistry()

    def log(event: str, payload: Any) -> None:
        with open(log_path, "a", encoding="utf-8") as f:
            f.write(f"{pid} {event} {json.dumps(payload)}\n")

    @tasks.task(concurrency=2, max_retry=5)
    async def held(payload: Any) -> None:
        log("started", payload["i"])
        await trio.sleep(payload["s"])
        log("ran", payload["i"])

    @tasks.task(rate_limit="50/s")
    async def paced(payload: Any) -> None:
        reserved = rate_reserved_at(trunner.current_message().raw) or 0
        log("ran", {"i": payload, "t": time.time(), "reserved": reserved})

    config = trunner.RunnerConfig(
        consumer_group=group, block_duration=1.0, **options.get("config", {})
    )

    async def run() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trunner.open_runner(url, config, tasks):
                print("ready", flush=True)
                async for _ in signals:
                    break

    trio.run(run)


if __name__ == "__main__":
    main()
