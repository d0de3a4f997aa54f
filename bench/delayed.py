"""Delayed-task precision: how late do delayed tasks start?

    python bench/delayed.py [--redis URL] [--tasks 2000] [--over 10] [--runs 3]

Scenario 5 of ``bench/run.py`` on its own, against a Redis of your choice: a runner (the
leader) and a producer client; the client schedules ``--tasks`` delayed tasks due at random
times over ``--over`` seconds, then each task records (start - due). Prints one JSON line
per run and a summary (median of the runs' figures).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import trio
from run import delayed


async def main(args: argparse.Namespace) -> None:
    runs = []
    for _ in range(args.runs):
        result = await delayed(args.redis, args.tasks, args.over)
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
