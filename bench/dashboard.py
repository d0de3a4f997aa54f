"""Scenario 14: the dashboard on a large group (imported by bench/run.py).

A group holding 100 000 queued and 100 000 dead entries (written directly, pipelined); the
dashboard runs as ``trunner dashboard`` in its own process. Measured from this process over
plain sockets: time to first byte and to the full HTML of the group page, of an older
dead-letter page (a cursor 50 000 entries deep), of the overview and of the JSON snapshot;
and the update latency, from a write to Redis (a dead letter added) to the server-sent event
that shows it, with the default 1 s interval. What one snapshot costs to read (the
sampler's calls, in-process) is measured too: the latency is the wait for the next
interval plus that.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import redis
import trio

import trunner
from trunner._wire.envelope import NO_SIZE_LIMIT, encode_message

REPO = Path(__file__).resolve().parent.parent
BATCH = 5000


def seed(url: str, keys: trunner.keys.Keys, queued: int, dead: int) -> str:
    """Write the entries; return the id of the dead letter in the middle."""
    client = redis.Redis.from_url(url)
    body = encode_message("job", {"n": 1, "pad": "x" * 100}, enqueued_at=time.time(),
                          max_bytes=NO_SIZE_LIMIT)  # fmt: skip
    middle = ""
    for start in range(0, queued, BATCH):
        pipe = client.pipeline(transaction=False)
        for _ in range(start, min(queued, start + BATCH)):
            pipe.xadd(keys.stream, {"payload": body})
        pipe.execute()
    client.xgroup_create(keys.stream, keys.group, id="0")
    for start in range(0, dead, BATCH):
        pipe = client.pipeline(transaction=False)
        for n in range(start, min(dead, start + BATCH)):
            pipe.xadd(keys.dead, _dead(n, body))
        ids = pipe.execute()
        if start <= dead // 2 < start + BATCH:
            middle = ids[dead // 2 - start].decode()
    client.close()
    return middle


def _dead(n: int, body: bytes) -> dict[Any, Any]:
    return {
        "task": f"job{n % 7}", "reason": "max retries exceeded",
        "error": f"RuntimeError: failure number {n}", "cause": "", "attempt": 3,
        "failed_at": int(time.time() * 1000), "task_id": f"{n}-0", "message_id": f"{n}-0",
        "consumer": "bench", "payload": body,
    }  # fmt: skip


async def fetch(base: str, path: str) -> tuple[float, float, int]:
    """(time to first byte, time to the full response, body bytes) of one GET."""
    where = urlsplit(base)
    start = time.perf_counter()
    stream = await trio.open_tcp_stream(where.hostname or "", where.port or 80)
    async with stream:
        request = f"GET {path} HTTP/1.1\r\nHost: {where.netloc}\r\nConnection: close\r\n\r\n"
        await stream.send_all(request.encode())
        data = await stream.receive_some(65536)
        first = time.perf_counter()
        while chunk := await stream.receive_some(65536):
            data += chunk
    full = time.perf_counter()
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"GET {path}: {head[:80]!r}")
    return first - start, full - start, len(body)


async def update_latencies(
    base: str, group: str, url: str, keys: trunner.keys.Keys, n: int
) -> list[float]:
    """Seconds from each XADD of a dead letter to the event whose count shows it."""
    client = redis.Redis.from_url(url)
    where = urlsplit(base)
    latencies = []
    stream = await trio.open_tcp_stream(where.hostname or "", where.port or 80)
    async with stream:
        path = f"/group/{quote(group)}/events"
        await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: {where.netloc}\r\n\r\n".encode())
        buffer = b""

        async def next_dead() -> int:
            nonlocal buffer
            while True:
                while b"\n" not in buffer:
                    buffer += await stream.receive_some(1 << 20)
                line, _, buffer = buffer.partition(b"\n")
                if line.startswith(b"data: "):
                    return int(json.loads(line[6:])["counts"]["dead"])

        count = await next_dead()
        for i in range(n):
            await trio.sleep(0.05 + (i % 10) * 0.093)  # spread the writes over the interval
            written = time.perf_counter()
            fields: dict[Any, Any] = {"task": "late", "n": i}
            await trio.to_thread.run_sync(client.xadd, keys.dead, fields)
            while await next_dead() <= count:
                pass
            latencies.append(time.perf_counter() - written)
            count += 1
    client.close()
    return latencies


async def snapshot_cost(url: str, keys: trunner.keys.Keys, n: int) -> list[float]:
    """Seconds one sampler snapshot's reads take (the same calls, in-process)."""
    costs = []
    async with trunner.open_client(url, keys.group, prefix=keys.prefix) as client:
        for _ in range(n):
            start = time.perf_counter()
            await client.admin.inspect()
            await client.admin.group_stats()
            await client.admin.waiting_age()
            await client.admin.delayed_tasks(20)
            costs.append(time.perf_counter() - start)
    return costs


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def dashboard(url: str, queued: int = 100_000, dead: int = 100_000, loads: int = 30,
                    updates: int = 20) -> dict[str, Any]:  # fmt: skip
    prefix = f"bench-dash-{uuid.uuid4().hex[:8]}"
    group = "bench"
    keys = trunner.keys.Keys(prefix, group)
    seeding = time.perf_counter()
    middle = await trio.to_thread.run_sync(seed, url, keys, queued, dead)
    seeded_s = time.perf_counter() - seeding
    command = [sys.executable, "-m", "trunner", "dashboard", url, "--group", group,
               "--prefix", prefix, "--port", "0"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result: dict[str, Any] = {"queued": queued, "dead": dead, "seed_s": round(seeded_s, 1)}
    process = await trio.lowlevel.open_process(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    try:
        assert process.stdout is not None
        out = b""
        with trio.fail_after(60):
            while not (found := re.search(rb"on (http://\S+)/", out)):
                out += await process.stdout.receive_some(4096)
        base = found.group(1).decode()
        pages = {
            "group": f"/group/{group}",
            "older": f"/group/{group}?before={quote('(' + middle)}",
            "overview": "/",
            "snapshot": f"/group/{group}/snapshot",
        }
        for name, path in pages.items():
            await fetch(base, path)  # warm
            timings = [await fetch(base, path) for _ in range(loads)]
            ttfb = [t[0] * 1000 for t in timings]
            full = [t[1] * 1000 for t in timings]
            result[f"{name}_ttfb_p50_ms"] = round(pct(ttfb, 50), 2)
            result[f"{name}_full_p50_ms"] = round(pct(full, 50), 2)
            result[f"{name}_full_p99_ms"] = round(pct(full, 99), 2)
            result[f"{name}_kb"] = round(timings[0][2] / 1024, 1)
        lat = [x * 1000 for x in await update_latencies(base, group, url, keys, updates)]
        result["update_p50_ms"] = round(pct(lat, 50), 1)
        result["update_p99_ms"] = round(pct(lat, 99), 1)
        result["update_max_ms"] = round(max(lat), 1)
    finally:
        process.terminate()
        with trio.move_on_after(10, shield=True):
            await process.wait()
    costs = [x * 1000 for x in await snapshot_cost(url, keys, 20)]
    result["snapshot_read_p50_ms"] = round(pct(costs, 50), 2)
    client_r = redis.Redis.from_url(url)
    client_r.delete(*keys.fixed())
    client_r.close()
    return result
