"""A worker and a producer in one process: ``python examples/quickstart.py``.

Uses an in-process Redis unless REDIS_URL is set.
"""

from __future__ import annotations

import os
from typing import Any

import trio

import trunner

tasks = trunner.TaskRegistry()
sent: list[str] = []
all_sent = trio.Event()


@tasks.task(max_retry=5, retry_backoff=0.1, timeout=30)  # each attempt: at most 30 s
async def send_email(payload: dict[str, Any]) -> None:
    message = trunner.current_message()
    await trio.sleep(0.01)  # talk to the mail server here
    print(f"sent to {payload['to']} (message {message.message_id}, attempt {message.attempt})")
    sent.append(payload["to"])
    if len(sent) == 3:
        all_sent.set()


async def main() -> None:
    url = os.environ.get("REDIS_URL", "memory://quickstart")
    config = trunner.RunnerConfig(consumer_group="emails", num_workers=50)
    async with trunner.open_runner(url, config, tasks) as runner:
        await runner.dispatch("send_email", {"to": "ada@example.com"})
        await runner.dispatch_many(
            "send_email", [{"to": "grace@example.com"}, {"to": "alan@example.com"}]
        )
        await all_sent.wait()
    # Leaving the block stopped the runner: fetchers first, then a drain of running tasks.
    print(f"runner {runner.state.name.lower()}: {runner.statistics().succeeded} tasks done")


if __name__ == "__main__":
    trio.run(main)
