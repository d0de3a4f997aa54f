"""Dispatch from a process that runs no workers (a web app, a cron job):
``python examples/producer.py``; a worker of group "emails" runs the tasks.
"""

from __future__ import annotations

import os

import trio

import trunner


async def main() -> None:
    url = os.environ.get("REDIS_URL", "memory://producer")
    async with trunner.open_client(url, "emails") as client:
        ids = await client.dispatch_many(
            "send_email", [{"to": f"user{n}@example.com"} for n in range(100)]
        )
        print(f"dispatched {len(ids)} tasks; {await client.admin.queue_length()} in the stream")


if __name__ == "__main__":
    trio.run(main)
