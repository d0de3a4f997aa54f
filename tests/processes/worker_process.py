"""A worker process for multi-process tests::

    python -m tests.processes.worker_process URL GROUP LOG [OPTIONS]

OPTIONS is a JSON object: ``config`` (RunnerConfig arguments), ``slow_seconds``, and
``watch_pause`` (log ``paused`` and ``resumed``, with the wall time, each time the
runner's fetch loops stop for a pause of the group and start again). Tasks
append one line per event to LOG (``<pid> <event> <payload>``); ``kept`` and
``block_kept`` keep their result (task handles); ``held`` and ``paced`` have group-wide
limits; ``lingering`` runs until the process is killed with the option ``linger``,
``poison`` kills its process, and ``gated`` waits for an item of a Redis list. The process
prints ``ready`` once its runner started, and stops gracefully on SIGTERM or SIGINT.
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
from trunner._wire.decode import rate_reserved_at


def main() -> None:
    url, group, log_path = sys.argv[1:4]
    options = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    pid = os.getpid()
    tasks = trunner.TaskRegistry()

    def log(event: str, payload: Any) -> None:
        with open(log_path, "a", encoding="utf-8") as f:
            f.write(f"{pid} {event} {json.dumps(payload)}\n")

    @tasks.task
    async def record(payload: Any) -> None:
        log("ran", payload)

    @tasks.task
    async def slow(payload: Any) -> None:
        log("started", payload)
        await trio.sleep(options.get("slow_seconds", 0.05))
        log("ran", payload)

    @tasks.task(max_retry=3)
    async def sturdy(payload: Any) -> None:
        """As ``slow``, with retries: a crash of its worker costs an attempt, not the task."""
        log("started", payload)
        await trio.sleep(options.get("slow_seconds", 0.05))
        log("ran", payload)

    @tasks.task(concurrency=2, max_retry=5)
    async def held(payload: Any) -> None:
        """A group-wide concurrency limit of 2: ``started``/``ran`` around a sleep of
        ``payload["s"]`` seconds."""
        log("started", payload["i"])
        await trio.sleep(payload["s"])
        log("ran", payload["i"])

    @tasks.task(rate_limit="50/s")
    async def paced(payload: Any) -> None:
        """A group-wide rate limit of 50/s: ``ran`` with the wall time and the time its
        admission was reserved for (from its message's mark; 0 when admitted at once)."""
        reserved = rate_reserved_at(trunner.current_message().raw) or 0
        log("ran", {"i": payload, "t": time.time(), "reserved": reserved})

    @tasks.task
    async def block(payload: Any) -> None:
        log("started", payload)
        await trio.sleep_forever()

    @tasks.task
    async def lingering(payload: Any) -> None:
        """Default options: ``started``, then, with the option ``linger``, runs until the
        process is killed; without it, ``ran``."""
        log("started", payload)
        if options.get("linger"):
            await trio.sleep_forever()
        log("ran", payload)

    @tasks.task
    async def poison(payload: Any) -> None:
        """Default options: kills its own process (SIGKILL), every time."""
        log("started", payload)
        os.kill(pid, signal.SIGKILL)
        await trio.sleep_forever()

    @tasks.task(keep_result=600, max_retry=1)
    async def kept(payload: Any) -> dict[str, Any]:
        log("finished", payload)
        return {"pid": pid, "payload": payload}

    @tasks.task
    async def gated(payload: dict[str, Any]) -> dict[str, Any]:
        """A workflow's step after ``kept``: logs ``gated`` with its task id, waits for an
        item of the list ``payload["payload"]`` (BLPOP), returns its pid and task id."""
        task_id = trunner.current_message().task_id
        log("gated", task_id)
        await trunner.current_runner().redis.execute("BLPOP", payload["payload"], 0)
        return {"pid": pid, "node": task_id}

    @tasks.task(keep_result=600, max_retry=3)
    async def block_kept(payload: Any) -> None:
        log("started", payload)
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            log("cancelled", payload)
            raise

    config = trunner.RunnerConfig(
        consumer_group=group,
        block_duration=1.0,
        **options.get("config", {}),
    )

    async def watch_pause(runner: trunner.Runner) -> None:
        while True:
            await runner.wait_paused()
            log("paused", time.time())
            await runner.wait_resumed()
            log("resumed", time.time())

    async def run() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with (
                trunner.open_runner(url, config, tasks) as runner,
                trio.open_nursery() as nursery,
            ):
                if options.get("watch_pause"):
                    nursery.start_soon(watch_pause, runner)
                print("ready", flush=True)
                async for _ in signals:
                    break
                nursery.cancel_scope.cancel()

    trio.run(run)


if __name__ == "__main__":
    main()
