"""Dispatching from asyncio and synchronous code, measured beside the Trio client:
``python bench/clients.py [--redis URL] [--runs N]``.

For each client (``trio``: ``open_client``; ``asyncio``: ``trunner.aio.Client``; ``sync``:
``trunner.sync.Client``): the dispatch rate one by one and in bulk (``dispatch_many``), and
the result round trip (dispatch, then ``await handle.result()``, one at a time) p50/p99
against a worker process of its own. Prints one JSON line per run and client, then the
medians. The Redis database given is flushed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis
import trio

import trunner
import trunner.aio
import trunner.sync

GROUP = "bench-clients"
tasks = trunner.TaskRegistry()


@tasks.task(keep_result=60)
async def echo(payload: Any) -> Any:
    return payload


def worker(url: str) -> None:
    """The worker the round trips wait on (``--worker``): prints ``ready``."""

    async def serve() -> None:
        config = trunner.RunnerConfig(consumer_group=GROUP, num_workers=50)
        async with trunner.open_runner(url, config, tasks):
            print("ready", flush=True)
            await trio.sleep_forever()

    trio.run(serve)


def summary(name: str, single: float, bulk: float, trips: list[float]) -> dict[str, Any]:
    trips.sort()
    return {
        "client": name,
        "dispatch_single_rate": round(single, 1),
        "dispatch_bulk_rate": round(bulk, 1),
        "round_trip_p50_ms": round(trips[len(trips) // 2] * 1000, 3),
        "round_trip_p99_ms": round(trips[int(len(trips) * 0.99)] * 1000, 3),
    }


async def measure_async(
    dispatch: Callable[..., Awaitable[Any]],
    many: Callable[..., Awaitable[Any]],
    clock: Callable[[], float],
    n: int,
) -> tuple[float, float, list[float]]:
    """(one-by-one rate, bulk rate, round trips) through an awaitable client."""
    start = clock()
    for i in range(n):
        await dispatch("echo", i)
    single = n / (clock() - start)
    start = clock()
    await many("echo", range(n * 4))
    bulk = n * 4 / (clock() - start)
    trips = []
    for i in range(300):
        start = clock()
        await (await dispatch("echo", i)).result(timeout=30)
        trips.append(clock() - start)
    return single, bulk, trips


def measure_sync(client: trunner.sync.Client, n: int) -> tuple[float, float, list[float]]:
    clock = time.perf_counter
    start = clock()
    for i in range(n):
        client.dispatch("echo", i)
    single = n / (clock() - start)
    start = clock()
    client.dispatch_many("echo", range(n * 4))
    bulk = n * 4 / (clock() - start)
    trips = []
    for i in range(300):
        start = clock()
        client.dispatch("echo", i).result(timeout=30)
        trips.append(clock() - start)
    return single, bulk, trips


def run_once(url: str, n: int) -> list[dict[str, Any]]:
    async def with_trio() -> tuple[float, float, list[float]]:
        async with trunner.open_client(url, GROUP, tasks=tasks) as client:
            return await measure_async(client.dispatch, client.dispatch_many, time.perf_counter, n)

    async def with_asyncio() -> tuple[float, float, list[float]]:
        async with trunner.aio.Client(url, queue=GROUP, tasks=tasks) as client:
            return await measure_async(client.dispatch, client.dispatch_many, time.perf_counter, n)

    with trunner.sync.Client(url, queue=GROUP, tasks=tasks) as client:
        sync = measure_sync(client, n)
    return [
        summary("trio", *trio.run(with_trio)),
        summary("asyncio", *asyncio.run(with_asyncio())),
        summary("sync", *sync),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("-n", type=int, default=2000, help="tasks dispatched one by one")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.redis)
        return
    redis.Redis.from_url(args.redis).flushdb()
    process = subprocess.Popen(
        [sys.executable, __file__, "--worker", "--redis", args.redis],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        rows = []
        for run in range(args.runs):
            for row in run_once(args.redis, args.n):
                rows.append(row)
                print(json.dumps({"run": run + 1, **row}), flush=True)
    finally:
        process.terminate()
        process.wait()
        redis.Redis.from_url(args.redis).flushdb()
    for name in ("trio", "asyncio", "sync"):
        mine = [r for r in rows if r["client"] == name]
        medians = {k: statistics.median(r[k] for r in mine) for k in mine[0] if k != "client"}
        print(json.dumps({"client": name, "median_of": len(mine), **medians}))


if __name__ == "__main__":
    main()
