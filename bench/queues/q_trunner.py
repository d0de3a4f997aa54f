"""trunner under the benchmark protocol (see _driver.py): public API only.

Keys: prefix ``trunner-bench``, consumer group = the queue name, so every key of a run
contains the queue name (the harness deletes them by it).

The roundtrip body goes through the task Redis handle, ``trunner.current_runner().redis``:
``roundtrip`` sends SET NX + INCR in one ``pipeline()`` (a round trip of its own per task);
``roundtrip_auto`` awaits ``set`` then ``incr``, which the handle pipelines across the
concurrent tasks (automatic pipelining). ``roundtrip_bridged`` is what a Trio user without
the handle would write: a ``redis.asyncio.Redis`` of the worker's own (one per process,
created at start), its pipeline executed through trio-asyncio (``aio_as_trio``), the runner
inside ``trio_asyncio.open_loop()``. redis-py's asyncio client and trio-asyncio are imported
only for that task, so the other scenarios' RSS stays trunner's own.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from _driver import BODY_PX, NotSupported, Recorder, body_keys, main

import trunner

PREFIX = "trunner-bench"


def enqueue(url: str, queue: str, task: str, payloads: list[dict[str, Any]], mode: str) -> float:
    async def run() -> float:
        async with trunner.open_client(url, queue, prefix=PREFIX) as client:
            begin = time.perf_counter()
            if mode == "single":
                for payload in payloads:
                    await client.dispatch(task, payload)
            else:
                await client.dispatch_many(task, payloads)
            return time.perf_counter() - begin

    return trio.run(run)


def dispatch(
    url: str, queue: str, n: int, interval: float, make_payload: Callable[[], dict[str, Any]]
) -> None:
    async def run() -> None:
        async with trunner.open_client(url, queue, prefix=PREFIX) as client:
            start = trio.current_time()
            for i in range(n):
                await trio.sleep_until(start + i * interval)
                await client.dispatch("latency", make_payload())

    trio.run(run)


def work(
    url: str, queue: str, args: argparse.Namespace, rec: Recorder, ready: Callable[[], None]
) -> dict[str, Any]:
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def noop(payload: Any) -> None:
        rec.begin(payload)
        rec.end()

    @tasks.task
    async def sleep(payload: Any) -> None:
        rec.begin(payload)
        await trio.sleep(payload["s"])
        rec.end()

    @tasks.task
    async def latency(payload: Any) -> None:
        rec.begin(payload)
        rec.end()

    prefix, counter = body_keys(queue)

    @tasks.task
    async def roundtrip(payload: Any) -> None:
        rec.begin(payload)
        redis = trunner.current_runner().redis
        async with redis.pipeline() as pipe:
            pipe.add("SET", f"{prefix}:{payload['i']}", 1, "NX", "PX", BODY_PX)
            pipe.add("INCR", counter)
        for reply in pipe.results:  # not raised by the pipeline: left in place
            if isinstance(reply, BaseException):
                raise reply
        rec.end()

    @tasks.task
    async def roundtrip_auto(payload: Any) -> None:
        rec.begin(payload)
        redis = trunner.current_runner().redis
        await redis.set(f"{prefix}:{payload['i']}", 1, nx=True, px=BODY_PX)
        await redis.incr(counter)
        rec.end()

    @tasks.task
    async def roundtrip_bridged(payload: Any) -> None:
        rec.begin(payload)
        pipe = Own.client.pipeline(transaction=False)
        pipe.set(f"{prefix}:{payload['i']}", 1, nx=True, px=BODY_PX)
        pipe.incr(counter)
        await Own.aio_as_trio(pipe.execute)()  # one crossing into asyncio per task
        rec.end()

    async def run() -> dict[str, Any]:
        done = trio.Event()
        rec.on_complete = done.set
        config = trunner.RunnerConfig(
            consumer_group=queue,
            prefix=PREFIX,
            num_workers=args.concurrency,
            batch_size=args.batch,
        )
        begin = time.perf_counter()
        async with trunner.open_runner(url, config, tasks) as runner:
            ready()
            await done.wait()
            if args.linger:
                await trio.sleep(args.linger)
                rec.final()
            stats = runner.statistics()
            handle = runner.redis  # its counts: round trips and commands of the task bodies
            stop = time.perf_counter()
        return {
            "succeeded": stats.succeeded,
            "failed": stats.failed,
            "errors": stats.errors,
            "max_in_flight": stats.max_in_flight,
            "redis_batches": handle.batches,
            "redis_commands": handle.commands,
            "shutdown_seconds": round(time.perf_counter() - stop, 3),
            "lifetime_seconds": round(time.perf_counter() - begin, 3),
        }

    if args.task == "roundtrip_bridged":
        return trio.run(bridged, url, run)
    return trio.run(run)


class Own:
    """``roundtrip_bridged``: the worker's own redis-py asyncio client, and trio-asyncio's
    adapter (set by :func:`bridged`)."""

    client: Any = None
    aio_as_trio: Any = None


async def bridged(url: str, run: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """Run the worker inside a trio-asyncio loop, with a redis-py asyncio client of its own."""
    import redis.asyncio  # noqa: PLC0415 - only this task's worker pays for it (its RSS)
    import trio_asyncio  # noqa: PLC0415 - idem

    Own.aio_as_trio = trio_asyncio.aio_as_trio
    async with trio_asyncio.open_loop():
        Own.client = redis.asyncio.Redis.from_url(url)
        try:
            return await run()
        finally:
            with trio.CancelScope(shield=True):
                await Own.aio_as_trio(Own.client.aclose)()


if __name__ == "__main__":
    _ = NotSupported
    main(enqueue, dispatch, work)
