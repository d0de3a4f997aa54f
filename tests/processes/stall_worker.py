"""A worker process whose tasks block its event loop::

    python -m tests.processes.stall_worker URL GROUP LOG OPTIONS

OPTIONS is a JSON object: ``config`` (RunnerConfig arguments) and ``flag`` (a file path).
Tasks append one line per event to LOG (``<pid> <event> <payload>``), as
``tests/processes/worker_process.py`` does, and so do the stall watchdog's warnings
(``stall`` with the task's name). ``blocker`` blocks the event loop (``time.sleep`` in an
``async def``) until the file ``flag`` exists, on its first delivery only; ``neighbour``
waits on the loop. The process prints ``ready`` once its runner started, and stops
gracefully on SIGTERM.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from typing import Any

import trio

import trunner


def main() -> None:
    url, group, log_path = sys.argv[1:4]
    options = json.loads(sys.argv[4])
    pid = os.getpid()
    tasks = trunner.TaskRegistry()
    flag = options["flag"]

    def log(event: str, payload: Any) -> None:
        with open(log_path, "a", encoding="utf-8") as f:
            f.write(f"{pid} {event} {json.dumps(payload)}\n")

    class Stalls(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if hasattr(record, "stall") and record.levelno == logging.WARNING:
                log("stall", getattr(record, "task", None))

    logging.getLogger("trunner").addHandler(Stalls())

    @tasks.task(keep_result=600, timeout=options.get("timeout"))
    async def blocker(payload: Any) -> int:
        log("started", payload)
        if trunner.current_message().deliveries == 1:
            while not os.path.exists(flag):  # noqa: ASYNC240
                time.sleep(0.02)  # noqa: ASYNC251 - blocks the event loop: the stall tested
        log("ran", payload)
        return pid

    @tasks.task(keep_result=600)
    async def neighbour(payload: Any) -> int:
        log("started", payload)
        await trio.sleep(0.5)
        log("ran", payload)
        return pid

    config = trunner.RunnerConfig(consumer_group=group, block_duration=1.0, **options["config"])

    async def run() -> None:
        async with trunner.open_runner(url, config, tasks):
            print("ready", flush=True)
            with trio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    return

    trio.run(run)


if __name__ == "__main__":
    main()
