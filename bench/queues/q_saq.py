"""saq under the benchmark protocol (runs in bench/.peers/saq).

saq's own worker (``saq.Worker``) with ``concurrency`` = the concurrency, defaults
otherwise, except a connection pool of 1000 (see ``make_queue``). saq has no bulk enqueue
API (``Queue.map`` enqueues one by one and waits for the results). The roundtrip body
uses the queue's own client, ``ctx["worker"].queue.redis`` (a ``redis.asyncio.Redis``).
``results``: ``job = await queue.enqueue(...)`` then ``await job.refresh(until_complete=1)``:
saq's Redis queue listens on its pub/sub multiplexer for the job's status changes.
(``Queue.apply`` polls every 0.5 s instead, and hung for good on some jobs here.) A wait
that outlives its second — a lost wake-up: seen about once in 40 round trips with saq
0.26.4 — looks once more with ``refresh()``; its round trip counts with the second
included, and the line ``{"event": "lost_wakeups", "count"}`` says how many.
``io`` (bench/bodies.py) is a sync function: saq runs it in the worker's thread pool, given
``concurrency`` threads (see ``work``).
``produce`` (the clients scenario): ``await queue.enqueue(...)``, one after the other or
from 100 coroutines at once (saq has no bulk enqueue: ``Queue.map`` gathers its enqueues
so, then waits for the results; the queue's own semaphore lets 20 run at a time); the
round trips as ``results``, one at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis.asyncio
from _driver import (
    BODY_PX,
    IO_SLEEP,
    NotSupported,
    Recorder,
    asyncio_only,
    body_keys,
    emit,
    linger,
    main,
    paced,
    round_trips,
    send_all,
)
from saq import Worker
from saq.queue.redis import RedisQueue

REC: Recorder
PREFIX, COUNTER = "", ""


def make_queue(url: str, name: str) -> RedisQueue:
    # redis-py 8's default pool holds 100 connections: with 100 workers saq ran out of them
    # ("Too many connections" while finishing a job), so it gets a larger pool.
    return RedisQueue(redis.asyncio.from_url(url, max_connections=1000), name=name)


async def noop(ctx: dict[str, Any], *, payload: Any) -> None:
    REC.begin(payload)
    REC.end()


async def sleep(ctx: dict[str, Any], *, payload: Any) -> None:
    REC.begin(payload)
    await asyncio.sleep(payload["s"])
    REC.end()


async def latency(ctx: dict[str, Any], *, payload: Any) -> None:
    REC.begin(payload)
    REC.end()


async def echo(ctx: dict[str, Any], *, payload: Any) -> int:
    REC.begin(payload)
    REC.end()
    return int(payload["i"])


def io(ctx: dict[str, Any], *, payload: Any) -> None:  # sync: saq runs it in its thread pool
    REC.begin(payload)
    time.sleep(IO_SLEEP)
    REC.end()


async def roundtrip(ctx: dict[str, Any], *, payload: Any) -> None:
    REC.begin(payload)
    async with ctx["worker"].queue.redis.pipeline(transaction=False) as pipe:
        pipe.set(f"{PREFIX}:{payload['i']}", 1, nx=True, px=BODY_PX)
        pipe.incr(COUNTER)
        await pipe.execute()
    REC.end()


def enqueue(url: str, queue: str, task: str, payloads: list[dict[str, Any]], mode: str) -> float:
    if mode != "single":
        raise NotSupported("saq has no bulk enqueue API")

    async def run() -> float:
        q = make_queue(url, queue)
        await q.connect()
        try:
            begin = time.perf_counter()
            for payload in payloads:
                await q.enqueue(task, payload=payload)
            return time.perf_counter() - begin
        finally:
            await q.disconnect()

    return asyncio.run(run())


def dispatch(
    url: str, queue: str, n: int, interval: float, make_payload: Callable[[], dict[str, Any]]
) -> None:
    async def run() -> None:
        q = make_queue(url, queue)
        await q.connect()
        try:
            await paced(n, interval, lambda: q.enqueue("latency", payload=make_payload()))
        finally:
            await q.disconnect()

    asyncio.run(run())


async def round_trip(q: RedisQueue, payload: dict[str, Any], lost: list[int]) -> Any:
    """Enqueue ``echo`` and wait for its result: saq's pub/sub wake-up, and a second look
    when the wait outlived its second (a lost wake-up, counted in ``lost``)."""
    job = await q.enqueue("echo", payload=payload)
    assert job is not None
    try:
        await job.refresh(until_complete=1.0)
    except TimeoutError:
        lost.append(payload["i"])
        await job.refresh()
    return job.result


def results(url: str, queue: str, n: int, concurrency: int) -> tuple[list[float], float]:
    async def run() -> tuple[list[float], float]:
        seconds: list[float] = []
        lost: list[int] = []
        q = make_queue(url, queue)
        await q.connect()

        async def waiter(first: int) -> None:
            for i in range(first, n, concurrency):
                begin = time.perf_counter()
                value = await round_trip(q, {"i": i, "t": time.time()}, lost)
                seconds.append(time.perf_counter() - begin)
                assert value == i, (value, i)

        try:
            begin = time.perf_counter()
            await asyncio.gather(*(waiter(first) for first in range(concurrency)))
            wall = time.perf_counter() - begin
            emit({"event": "lost_wakeups", "count": len(lost)})
            return seconds, wall
        finally:
            await q.disconnect()

    return asyncio.run(run())


def produce(url: str, queue: str, mode: str, n: int, client: str) -> dict[str, Any]:
    asyncio_only(client, "saq")
    if mode == "bulk":
        raise NotSupported("saq has no bulk enqueue API")

    async def run() -> dict[str, Any]:
        q = make_queue(url, queue)
        await q.connect()
        try:
            if mode == "trips":
                lost: list[int] = []
                report = await round_trips(n, lambda p: round_trip(q, p, lost))
                emit({"event": "lost_wakeups", "count": len(lost)})
                how = "job = await queue.enqueue('echo', payload=p); "
                how += "await job.refresh(until_complete=1)"
                return report | {"how": how}
            seconds = await send_all(mode, n, lambda p: q.enqueue("noop", payload=p))
            return {"seconds": seconds, "how": "await queue.enqueue('noop', payload=p)"}
        finally:
            await q.disconnect()

    return asyncio.run(run())


def work(
    url: str, queue: str, args: argparse.Namespace, rec: Recorder, ready: Callable[[], None]
) -> dict[str, Any]:
    global REC, PREFIX, COUNTER
    REC = rec
    PREFIX, COUNTER = body_keys(queue)

    async def run() -> dict[str, Any]:
        done = asyncio.Event()
        rec.on_complete = done.set
        if args.task == "io":  # the bodies run in threads: the n-th sets the event from one
            loop = asyncio.get_running_loop()
            rec.make_threadsafe()
            rec.on_complete = lambda: loop.call_soon_threadsafe(done.set)
        q = make_queue(url, queue)
        await q.connect()
        worker = Worker(
            q,
            functions=[
                ("noop", noop),
                ("sleep", sleep),
                ("latency", latency),
                ("echo", echo),
                ("roundtrip", roundtrip),
                ("io", io),
            ],
            concurrency=args.concurrency,
        )
        # saq runs sync functions in ``Worker.pool``, a ThreadPoolExecutor() of Python's
        # default size, min(32, cores + 4): 6 threads here, and no setting. For the same
        # number of threads as the other queues, it gets a pool of ``concurrency`` threads.
        worker.pool = ThreadPoolExecutor(max_workers=args.concurrency)
        main_task = asyncio.create_task(worker.start())
        ready()
        waiter = asyncio.create_task(done.wait())
        await asyncio.wait([main_task, waiter], return_when=asyncio.FIRST_COMPLETED)
        if main_task.done():
            main_task.result()
        await linger(args, rec, asyncio.sleep)
        await worker.stop()
        await main_task
        await q.disconnect()
        return {}

    return asyncio.run(run())


if __name__ == "__main__":
    main(enqueue, dispatch, work, results=results, produce=produce)
