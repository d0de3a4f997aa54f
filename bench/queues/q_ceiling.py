"""The ceiling: the same stream work with no runner, by a bare redis-py asyncio loop.

Plain asyncio (no Trio, no bridge), redis.asyncio with hiredis, the same message bytes as
trunner's wire format (one ``payload`` field holding a JSON object):

- enqueue ``single``: one XADD per round trip; ``bulk``: pipelines of 1000 XADD;
- worker: one loop, XREADGROUP COUNT ``--batch`` (BLOCK 1 s), decode each entry's JSON and
  await the body inline, then XACK + XDEL of the whole batch in one pipeline. No
  concurrency, so it has no sleep-bound mode (its ceiling there is the ideal time).
  The roundtrip body, awaited inline like the others, sends SET NX + INCR in one
  pipeline on the loop's own client: one task's round trip at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import redis.asyncio
from _driver import BODY_PX, NotSupported, Recorder, body_keys, main, paced
from redis.exceptions import ResponseError

GROUP = "bench"
PIPELINE = 1000


def stream_key(queue: str) -> str:
    return f"ceiling-bench:{{{queue}}}:stream"


def encode(task: str, payload: Any) -> bytes:
    body = {"task": task, "payload": payload, "attempt": 1, "enqueued_at": round(time.time(), 3)}
    return json.dumps(body, separators=(",", ":")).encode()


def client(url: str) -> redis.asyncio.Redis:
    return redis.asyncio.Redis.from_url(url, socket_timeout=None)


def enqueue(url: str, queue: str, task: str, payloads: list[dict[str, Any]], mode: str) -> float:
    async def run() -> float:
        r = client(url)
        stream = stream_key(queue)
        try:
            begin = time.perf_counter()
            if mode == "single":
                for payload in payloads:
                    await r.xadd(stream, {"payload": encode(task, payload)})
            else:
                for i in range(0, len(payloads), PIPELINE):
                    pipe = r.pipeline(transaction=False)
                    for payload in payloads[i : i + PIPELINE]:
                        pipe.xadd(stream, {"payload": encode(task, payload)})
                    await pipe.execute()
            return time.perf_counter() - begin
        finally:
            await r.aclose()

    return asyncio.run(run())


def dispatch(
    url: str, queue: str, n: int, interval: float, make_payload: Callable[[], dict[str, Any]]
) -> None:
    async def run() -> None:
        r = client(url)
        try:
            await paced(
                n,
                interval,
                lambda: r.xadd(stream_key(queue), {"payload": encode("latency", make_payload())}),
            )
        finally:
            await r.aclose()

    asyncio.run(run())


def work(
    url: str, queue: str, args: argparse.Namespace, rec: Recorder, ready: Callable[[], None]
) -> dict[str, Any]:
    if args.task == "sleep":
        raise NotSupported("the ceiling loop runs bodies inline: its sleep-bound figure is ideal")

    async def noop(payload: Any) -> None:
        rec.begin(payload)
        rec.end()

    r = client(url)
    prefix, counter = body_keys(queue)

    async def roundtrip(payload: Any) -> None:
        rec.begin(payload)
        pipe = r.pipeline(transaction=False)
        pipe.set(f"{prefix}:{payload['i']}", 1, nx=True, px=BODY_PX)
        pipe.incr(counter)
        await pipe.execute()
        rec.end()

    bodies = {"noop": noop, "latency": noop, "roundtrip": roundtrip}

    async def run() -> dict[str, Any]:
        stream = stream_key(queue)
        acked = 0
        try:
            try:
                await r.xgroup_create(stream, GROUP, id="0", mkstream=True)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
            ready()
            while not rec.complete:
                reply: Any = await r.xreadgroup(
                    GROUP, "c1", {stream: ">"}, count=args.batch, block=1000
                )
                if not reply:
                    continue
                ids = []
                for _, entries in reply:
                    for message_id, fields in entries:
                        message = json.loads(fields[b"payload"])
                        await bodies[message["task"]](message["payload"])
                        ids.append(message_id)
                pipe = r.pipeline(transaction=False)
                pipe.xack(stream, GROUP, *ids)
                pipe.xdel(stream, *ids)
                await pipe.execute()
                acked += len(ids)
        finally:
            await r.aclose()
        return {"acked": acked}

    return asyncio.run(run())


if __name__ == "__main__":
    main(enqueue, dispatch, work)
