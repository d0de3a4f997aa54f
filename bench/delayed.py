"""Delayed-task precision: how late do delayed tasks start?

    python bench/delayed.py [--redis URL] [--tasks 2000] [--over 10] [--runs 3]

A runner (the leader) and a producer client on one Redis; the client schedules ``--tasks``
delayed tasks due at random times over ``--over`` seconds, then each task records
(start - due). Prints one JSON line per run and a summary (median of the runs' figures).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
import uuid

import trio

import trunner


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def one_run(url: str, count: int, over: float) -> dict[str, float]:
    group = f"bench-delayed-{uuid.uuid4().hex[:8]}"
    lateness: list[float] = []
    done = trio.Event()
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def due(payload: float) -> None:
        lateness.append(time.time() - payload)
        if len(lateness) == count:
            done.set()

    config = trunner.RunnerConfig(consumer_group=group, num_workers=100, batch_size=100)
    async with (
        trunner.open_runner(url, config, tasks),
        trunner.open_client(url, group) as client,
    ):
        # Every task is scheduled before the first is due (about 1.5 ms per dispatch here).
        start = time.time() + 1.0 + count * 0.002
        dues = [start + random.uniform(0, over) for _ in range(count)]
        for when in dues:
            await client.dispatch_delayed("due", when, when - time.time())
        if time.time() > start:
            print(json.dumps({"warning": "scheduling outlasted the head start"}))
        await done.wait()
    async with trunner.open_client(url, group) as client:
        await client._open_broker().delete_group()
    ms = [x * 1000 for x in lateness]
    return {
        "tasks": count,
        "p50_ms": round(percentile(ms, 50), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "max_ms": round(max(ms), 2),
        "early": sum(1 for x in ms if x < 0),
    }


async def main(args: argparse.Namespace) -> None:
    runs = []
    for _ in range(args.runs):
        result = await one_run(args.redis, args.tasks, args.over)
        runs.append(result)
        print(json.dumps({"scenario": "delayed_precision", **result}))
    print(
        f"\n{args.tasks} delayed tasks due over {args.over} s, {args.runs} runs "
        f"(median of runs): lateness p50 "
        f"{statistics.median(r['p50_ms'] for r in runs):.1f} ms, p99 "
        f"{statistics.median(r['p99_ms'] for r in runs):.1f} ms, max "
        f"{statistics.median(r['max_ms'] for r in runs):.1f} ms; "
        f"started early: {sum(r['early'] for r in runs)}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--over", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3)
    trio.run(main, parser.parse_args())
