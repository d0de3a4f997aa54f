"""Group-wide limits across three worker processes on a real Redis
(tests/processes/worker_process.py: ``held`` and ``paced``): a concurrency limit is never
exceeded, sampled continuously from Redis, while a holder is SIGKILLed, and every task
finishes; a rate limit of 50/s over 20 s admits within 5 % and never more than its burst."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import redis
import trio

import trunner
from trunner.keys import Keys

from ..conftest import redis_state
from ..support.servers import RedisServer
from ..support.workers import Worker, read_log


async def start(url: str, group: str, log: Path, workers: list[Worker], **config: Any) -> None:
    for _ in range(3):
        workers.append(Worker(url, group, log, {"config": config}))
    for worker in workers:
        await worker.ready()


@pytest.mark.deadline(120)
async def test_concurrency_limit_holds_across_processes_while_a_holder_is_killed(
    redis_server: RedisServer, group: str, keys: Keys, workers: list[Worker], tmp_path: Path
) -> None:
    log = tmp_path / "log"
    url = redis_server.url
    await start(url, group, log, workers, reclaim_delay=1.0, reclaim_interval=0.1)
    holders = keys.concurrency_holders("4:held")
    client = redis.Redis.from_url(url)
    most = 0
    samples = 0
    stop = trio.Event()

    async def sample() -> None:
        nonlocal most, samples
        while not stop.is_set():
            most = max(most, await trio.to_thread.run_sync(client.zcard, holders))
            samples += 1
            await trio.sleep(0.002)

    n = 24
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sample)
            async with trunner.open_client(url, group) as producer:
                await producer.dispatch_many("held", [{"i": i, "s": 0.2} for i in range(n)])

            async def a_holder_runs() -> bool:
                await trio.lowlevel.checkpoint()
                return any(e == "started" for _, e, _ in read_log(log))

            await redis_state(a_holder_runs)
            ran = {p for _, e, p in read_log(log) if e == "ran"}
            victim_pid = next(pid for pid, e, p in read_log(log) if e == "started" and p not in ran)
            victim = next(w for w in workers if w.process.pid == victim_pid)
            victim.kill()

            async def all_ran() -> bool:
                await trio.lowlevel.checkpoint()
                return {p for _, e, p in read_log(log) if e == "ran"} == set(range(n))

            await redis_state(all_ran, poll=0.05)

            async def slots_free() -> bool:
                return await trio.to_thread.run_sync(client.zcard, holders) == 0

            await redis_state(slots_free)
            stop.set()
    finally:
        client.close()
    assert most <= 2, f"{most} slots held at once"
    assert most == 2
    assert samples > 100
    print(f"concurrency=2 over 3 processes, one killed: at most {most} held, {samples} samples")


@pytest.mark.deadline(120)
async def test_rate_limit_admits_50_per_second_over_20_seconds(
    redis_server: RedisServer, group: str, workers: list[Worker], tmp_path: Path
) -> None:
    log = tmp_path / "log"
    url = redis_server.url
    await start(url, group, log, workers)
    n = 1100
    async with trunner.open_client(url, group) as producer:
        await producer.dispatch_many("paced", list(range(n)))

    async def all_ran() -> bool:
        await trio.lowlevel.checkpoint()
        return len(read_log(log)) >= n

    await redis_state(all_ran, poll=0.2)
    runs = [p for _, e, p in read_log(log) if e == "ran"]
    assert sorted(r["i"] for r in runs) == list(range(n)), "each ran once"
    reserved = sorted(r["reserved"] for r in runs if r["reserved"])
    assert len(reserved) >= n - 1, "all but the first were deferred by the limit"
    # Admissions (the times reserved for, in ms): 50/s with burst 1 means one per 20 ms.
    gaps = [b - a for a, b in itertools.pairwise(reserved)]
    assert min(gaps) >= 19, "never two admissions within one emission interval (burst 1)"
    start_ms = reserved[0]
    in_20s = sum(1 for r in reserved if r < start_ms + 20_000)
    assert 950 <= in_20s <= 1050, in_20s
    # And no task started before the time its admission was reserved for.
    lags = sorted(r["t"] * 1000 - r["reserved"] for r in runs if r["reserved"])
    assert lags[0] >= -1, "no task started before the time its admission was reserved for"
    started = sorted(r["t"] for r in runs)
    print(
        f"rate 50/s: {in_20s} admissions in 20 s; started in the first 20 s: "
        f"{sum(1 for t in started if t < started[0] + 20)}; start lag after the reserved "
        f"time p50 {lags[len(lags) // 2]:.1f} ms, p99 {lags[int(len(lags) * 0.99)]:.1f} ms, "
        f"max {lags[-1]:.1f} ms"
    )
