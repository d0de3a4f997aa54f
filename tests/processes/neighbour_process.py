"""``python -m tests.processes.neighbour_process URL GROUP``: another process using the same
Redis database as the test, with a runner and a client of its own.

Reads one line from stdin, opens them, prints "open"; reads another line, closes them,
prints "closed".
"""

from __future__ import annotations

import sys

import trio

import trunner


async def main(url: str, group: str) -> None:
    await trio.to_thread.run_sync(sys.stdin.readline)
    config = trunner.RunnerConfig(consumer_group=group, block_duration=1.0)
    async with (
        trunner.open_runner(url, config, trunner.TaskRegistry()),
        trunner.open_client(url, group),
    ):
        print("open", flush=True)
        await trio.to_thread.run_sync(sys.stdin.readline)
    print("closed", flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
