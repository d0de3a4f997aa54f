"""``python -m tests.processes.unique_process URL GROUP N``: N concurrent dispatches of one
unique key.

Prints how many were accepted, once every dispatch returned; waits for "go" on stdin first
so that several processes start together.
"""

from __future__ import annotations

import sys
from typing import Any

import trio

import trunner


def registry() -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.task(unique=True, unique_key=lambda payload: payload["order"], unique_for=60)
    async def charge(_: Any) -> None:
        pass

    return tasks


async def dispatch_concurrently(client: trunner.Client, count: int) -> int:
    accepted = 0

    async def one() -> None:
        nonlocal accepted
        try:
            await client.dispatch("charge", {"order": 42})
        except trunner.TaskAlreadyDispatched:
            return
        accepted += 1

    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(one)
    return accepted


async def main(url: str, group: str, count: int) -> None:
    async with trunner.open_client(url, group, tasks=registry(), max_connections=count) as client:
        print("ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.readline)
        print(await dispatch_concurrently(client, count), flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
