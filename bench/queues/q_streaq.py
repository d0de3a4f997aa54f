"""streaq under the benchmark protocol, on Trio (runs in bench/.peers/streaq).

streaq's own worker (``streaq.Worker(anyio_backend="trio")``, run with ``run_async`` under
``trio.run``) with ``concurrency`` = the concurrency, defaults otherwise. Bulk enqueue is
``Worker.enqueue_many`` (one pipeline). The roundtrip body uses the worker's own client,
``worker.redis`` (coredis, on anyio: it runs under Trio), in a ``pipeline()``.
``results``: ``task = await registered.enqueue(payload)`` then ``await task.result()``
(streaq subscribes to the task's channel, then reads the stored result; results are kept
5 minutes by default). ``io`` (bench/bodies.py) is a sync function: streaq runs it in a
thread, at most ``sync_concurrency`` (= ``concurrency``) at once.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import trio
from _driver import BODY_PX, IO_SLEEP, NotSupported, Recorder, body_keys, linger, main
from coredis import PureToken  # type: ignore[import-not-found]
from streaq import Worker

REC: Recorder
WORKER: Worker[Any]
PREFIX, COUNTER = "", ""


async def noop(payload: Any) -> None:
    REC.begin(payload)
    REC.end()


async def sleep(payload: Any) -> None:
    REC.begin(payload)
    await trio.sleep(payload["s"])
    REC.end()


async def latency(payload: Any) -> None:
    REC.begin(payload)
    REC.end()


async def echo(payload: Any) -> int:
    REC.begin(payload)
    REC.end()
    return int(payload["i"])


def io(payload: Any) -> None:  # sync: streaq runs it in a thread (anyio.to_thread)
    REC.begin(payload)
    time.sleep(IO_SLEEP)
    REC.end()


async def roundtrip(payload: Any) -> None:
    REC.begin(payload)
    async with WORKER.redis.pipeline(transaction=False) as pipe:
        pipe.set(f"{PREFIX}:{payload['i']}", "1", condition=PureToken.NX, px=BODY_PX)
        pipe.incr(COUNTER)
    REC.end()


def make_worker(url: str, queue: str, concurrency: int = 100) -> tuple[Worker[Any], dict[str, Any]]:
    worker: Worker[Any] = Worker(
        redis_url=url,
        queue_name=queue,
        concurrency=concurrency,
        sync_concurrency=concurrency,  # the threads of sync tasks (its default too)
        anyio_backend="trio",
        handle_signals=False,
    )
    registered = {f.__name__: worker.task(f) for f in (noop, sleep, latency, echo, roundtrip, io)}
    return worker, registered


def enqueue(url: str, queue: str, task: str, payloads: list[dict[str, Any]], mode: str) -> float:
    worker, registered = make_worker(url, queue)

    async def run() -> float:
        async with worker:
            begin = time.perf_counter()
            if mode == "single":
                for payload in payloads:
                    await registered[task].enqueue(payload)
            else:
                await worker.enqueue_many([registered[task].enqueue(p) for p in payloads])
            return time.perf_counter() - begin

    return trio.run(run)


def dispatch(
    url: str, queue: str, n: int, interval: float, make_payload: Callable[[], dict[str, Any]]
) -> None:
    worker, registered = make_worker(url, queue)

    async def run() -> None:
        async with worker:
            start = trio.current_time()
            for i in range(n):
                await trio.sleep_until(start + i * interval)
                await registered["latency"].enqueue(make_payload())

    trio.run(run)


def results(url: str, queue: str, n: int, concurrency: int) -> tuple[list[float], float]:
    worker, registered = make_worker(url, queue)

    async def run() -> tuple[list[float], float]:
        seconds: list[float] = []
        async with worker:

            async def waiter(first: int) -> None:
                for i in range(first, n, concurrency):
                    begin = time.perf_counter()
                    task = await registered["echo"].enqueue({"i": i, "t": time.time()})
                    result = await task.result(timeout=30)
                    seconds.append(time.perf_counter() - begin)
                    assert result.success, result
                    assert result.result == i, (result, i)

            begin = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for first in range(concurrency):
                    nursery.start_soon(waiter, first)
            return seconds, time.perf_counter() - begin

    return trio.run(run)


def work(
    url: str, queue: str, args: argparse.Namespace, rec: Recorder, ready: Callable[[], None]
) -> dict[str, Any]:
    global REC, WORKER, PREFIX, COUNTER
    REC = rec
    PREFIX, COUNTER = body_keys(queue)
    worker, _ = make_worker(url, queue, args.concurrency)
    WORKER = worker

    async def run() -> dict[str, Any]:
        done = trio.Event()
        rec.on_complete = done.set
        if args.task == "io":  # the bodies run in threads: the n-th sets the event from one
            rec.make_threadsafe()
            rec.on_complete = lambda: trio.from_thread.run_sync(done.set)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run_async)
            ready()
            await done.wait()
            # Cancelling streaq while it finishes a task's bookkeeping hung it for good
            # (seen with streaq 7.2): wait until nothing runs, then a little more.
            while worker.running():  # noqa: ASYNC110 (streaq has no event for it)
                await trio.sleep(0.01)
            await linger(args, rec, trio.sleep)
            await trio.sleep(0.5)
            nursery.cancel_scope.cancel()
        return {}

    return trio.run(run)


if __name__ == "__main__":
    _ = NotSupported
    main(enqueue, dispatch, work, results=results)
