"""arq under the benchmark protocol (runs in bench/.peers/arq).

arq's own worker (``arq.worker.Worker``) with ``max_jobs`` = the concurrency; every other
setting is arq's default (it polls its queue every ``poll_delay`` = 0.5 s when idle, and
keeps results for an hour). arq has no bulk enqueue API. The roundtrip body uses the
worker's own client, ``ctx["redis"]`` (an ``ArqRedis``, i.e. a ``redis.asyncio.Redis``).
``results``: ``job = await pool.enqueue_job(...)`` then ``await job.result()``, which
polls for the result every ``poll_delay`` = 0.5 s (its default). ``produce`` (the
clients scenario): ``await pool.enqueue_job(...)``, one after the other or from 100
coroutines at once (arq has no bulk enqueue); the round trips as ``results``, one at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from _driver import (
    BODY_PX,
    NotSupported,
    Recorder,
    asyncio_only,
    body_keys,
    linger,
    main,
    paced,
    round_trips,
    send_all,
)
from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import Worker, func

REC: Recorder
PREFIX, COUNTER = "", ""


async def noop(ctx: dict[str, Any], payload: Any) -> None:
    REC.begin(payload)
    REC.end()


async def sleep(ctx: dict[str, Any], payload: Any) -> None:
    REC.begin(payload)
    await asyncio.sleep(payload["s"])
    REC.end()


async def latency(ctx: dict[str, Any], payload: Any) -> None:
    REC.begin(payload)
    REC.end()


async def echo(ctx: dict[str, Any], payload: Any) -> int:
    REC.begin(payload)
    REC.end()
    return int(payload["i"])


async def roundtrip(ctx: dict[str, Any], payload: Any) -> None:
    REC.begin(payload)
    async with ctx["redis"].pipeline(transaction=False) as pipe:
        pipe.set(f"{PREFIX}:{payload['i']}", 1, nx=True, px=BODY_PX)
        pipe.incr(COUNTER)
        await pipe.execute()
    REC.end()


def enqueue(url: str, queue: str, task: str, payloads: list[dict[str, Any]], mode: str) -> float:
    if mode != "single":
        raise NotSupported("arq has no bulk enqueue API")

    async def run() -> float:
        pool = await create_pool(RedisSettings.from_dsn(url), default_queue_name=queue)
        try:
            begin = time.perf_counter()
            for payload in payloads:
                await pool.enqueue_job(task, payload)
            return time.perf_counter() - begin
        finally:
            await pool.aclose()

    return asyncio.run(run())


def dispatch(
    url: str, queue: str, n: int, interval: float, make_payload: Callable[[], dict[str, Any]]
) -> None:
    async def run() -> None:
        pool = await create_pool(RedisSettings.from_dsn(url), default_queue_name=queue)
        try:
            await paced(n, interval, lambda: pool.enqueue_job("latency", make_payload()))
        finally:
            await pool.aclose()

    asyncio.run(run())


def results(url: str, queue: str, n: int, concurrency: int) -> tuple[list[float], float]:
    async def run() -> tuple[list[float], float]:
        seconds: list[float] = []
        pool = await create_pool(RedisSettings.from_dsn(url), default_queue_name=queue)

        async def waiter(first: int) -> None:
            for i in range(first, n, concurrency):
                begin = time.perf_counter()
                job = await pool.enqueue_job("echo", {"i": i, "t": time.time()})
                assert job is not None
                value = await job.result(timeout=30)
                seconds.append(time.perf_counter() - begin)
                assert value == i, (value, i)

        try:
            begin = time.perf_counter()
            await asyncio.gather(*(waiter(first) for first in range(concurrency)))
            return seconds, time.perf_counter() - begin
        finally:
            await pool.aclose()

    return asyncio.run(run())


def produce(url: str, queue: str, mode: str, n: int, client: str) -> dict[str, Any]:
    asyncio_only(client, "arq")
    if mode == "bulk":
        raise NotSupported("arq has no bulk enqueue API")

    async def run() -> dict[str, Any]:
        pool = await create_pool(RedisSettings.from_dsn(url), default_queue_name=queue)
        try:
            if mode == "trips":

                async def trip(payload: dict[str, Any]) -> Any:
                    job = await pool.enqueue_job("echo", payload)
                    assert job is not None
                    return await job.result(timeout=30)

                how = "job = await pool.enqueue_job('echo', p); await job.result()"
                return await round_trips(n, trip) | {"how": how}
            seconds = await send_all(mode, n, lambda p: pool.enqueue_job("noop", p))
            return {"seconds": seconds, "how": "await pool.enqueue_job('noop', p)"}
        finally:
            await pool.aclose()

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
        worker = Worker(
            functions=[
                func(noop, name="noop"),
                func(sleep, name="sleep"),
                func(latency),
                func(echo),
                func(roundtrip),
            ],
            queue_name=queue,
            redis_settings=RedisSettings.from_dsn(url),
            max_jobs=args.concurrency,
            handle_signals=False,
        )
        main_task = asyncio.create_task(worker.main())
        ready()
        waiter = asyncio.create_task(done.wait())
        await asyncio.wait([main_task, waiter], return_when=asyncio.FIRST_COMPLETED)
        if main_task.done():
            main_task.result()  # the worker failed: raise its error
        await linger(args, rec, asyncio.sleep)
        # Let the last jobs record their results: close() cancels jobs still running.
        running = [t for t in worker.tasks.values() if not t.done()]
        if running:
            await asyncio.wait(running)
        main_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await main_task
        await worker.close()
        return {"complete": worker.jobs_complete, "failed": worker.jobs_failed}

    return asyncio.run(run())


if __name__ == "__main__":
    main(enqueue, dispatch, work, results=results, produce=produce)
