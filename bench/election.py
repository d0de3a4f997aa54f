"""Leader election timings: graceful handover and crash failover, on a real Redis.

    python bench/election.py [--redis URL] [--runs N] [--crash-runs N] [--ttl S --wait S]

Graceful: the leader leaves its block; time until a follower (default timings, so it
would otherwise wait up to ``wait`` s) is promoted. Crash: a leader process is SIGKILLed;
time until the follower is promoted (worst case ttl + wait). Prints one JSON line per
measurement, then a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

import trio
from run import reap

from trunner.election import open_elector

HERE = Path(__file__).resolve().parent
LEADER = """
import sys, trio
from trunner.election import open_elector
async def main(url, key, ttl, wait):
    async with open_elector(url, key, ttl=ttl, wait=wait) as e:
        await e.wait_promoted()
        print("leader", flush=True)
        await trio.sleep_forever()
trio.run(main, sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
"""


def summary(name: str, values: list[float]) -> str:
    values = sorted(values)
    p50 = statistics.median(values)
    return (
        f"{name:<20} n={len(values):<3} min {values[0] * 1000:8.1f} ms   "
        f"p50 {p50 * 1000:8.1f} ms   max {values[-1] * 1000:8.1f} ms"
    )


async def graceful(url: str, ttl: float, wait: float) -> float:
    key = f"bench-lease-{uuid.uuid4().hex[:8]}"
    async with open_elector(url, key, ttl=ttl, wait=wait) as leader:
        assert leader.is_leader
        async with open_elector(url, key, ttl=ttl, wait=wait) as follower:
            start = trio.current_time()
            leader.stop()
            await follower.wait_promoted()
            return trio.current_time() - start


async def crash(url: str, ttl: float, wait: float) -> float:
    key = f"bench-lease-{uuid.uuid4().hex[:8]}"
    process = await trio.lowlevel.open_process(
        [sys.executable, "-c", LEADER, url, key, str(ttl), str(wait)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(HERE.parent)},
    )
    try:
        assert process.stdout is not None
        line = b""
        while not line.endswith(b"\n"):
            line += await process.stdout.receive_some(1)
        assert line.strip() == b"leader", line
        async with open_elector(url, key, ttl=ttl, wait=wait) as follower:
            # A random phase of the follower's retry cycle, as in production.
            await trio.sleep(wait * (uuid.uuid4().int % 1000) / 1000)
            process.send_signal(signal.SIGKILL)
            await process.wait()
            start = trio.current_time()
            await follower.wait_promoted()
            return trio.current_time() - start
    finally:
        await reap(process)


async def main(args: argparse.Namespace) -> None:
    results: dict[str, list[float]] = {"graceful_handover": [], "crash_failover": []}
    for _ in range(args.runs):
        seconds = await graceful(args.redis, args.ttl, args.wait)
        results["graceful_handover"].append(seconds)
        print(json.dumps({"scenario": "graceful_handover", "seconds": round(seconds, 4)}))
    for _ in range(args.crash_runs):
        seconds = await crash(args.redis, args.ttl, args.wait)
        results["crash_failover"].append(seconds)
        print(json.dumps({"scenario": "crash_failover", "seconds": round(seconds, 3)}))
    print(f"\nttl {args.ttl} s, wait {args.wait} s (worst case for a crash: ttl + wait)")
    for name, values in results.items():
        if values:
            print(summary(name, values))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--crash-runs", type=int, default=8)
    parser.add_argument("--ttl", type=float, default=5.0)
    parser.add_argument("--wait", type=float, default=6.0)
    trio.run(main, parser.parse_args())
