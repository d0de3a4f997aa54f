"""Delayed and periodic tasks: ``python examples/scheduled.py``.

A reminder dispatched to run 0.5 s later, one scheduled for a given time, one cancelled,
and a cron schedule every second. Uses an in-process Redis unless REDIS_URL is set.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import trio

import trunner

tasks = trunner.TaskRegistry()
done = trio.Event()
reminded = trio.Event()
reminders: list[str] = []
ticks: list[str] = []


@tasks.task
async def remind(payload: dict[str, Any]) -> None:
    print(f"reminder: {payload['text']}")
    reminders.append(payload["text"])
    if len(reminders) == 2:  # "stretch" and "drink water"; "never" was cancelled
        reminded.set()


@tasks.cron("* * * * * *", payload={"probe": "disk"})  # every second (seconds field last)
async def health_probe(payload: dict[str, Any]) -> None:
    ticks.append(trunner.current_message().task_id)
    if len(ticks) == 2:
        done.set()


async def main() -> None:
    url = os.environ.get("REDIS_URL", "memory://scheduled-example")
    config = trunner.RunnerConfig(consumer_group="reminders")
    async with trunner.open_runner(url, config, tasks) as runner:
        await runner.dispatch_delayed("remind", {"text": "stretch"}, 0.5)
        at = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
        await runner.schedule_for("remind", {"text": "drink water"}, at)
        unwanted = await runner.dispatch_delayed("remind", {"text": "never"}, 60)
        print("cancelled:", await runner.cancel_delayed(unwanted))
        await done.wait()
        await reminded.wait()
    print(f"cron fired {len(ticks)} ticks, each once: {len(set(ticks)) == len(ticks)}")


if __name__ == "__main__":
    trio.run(main)
