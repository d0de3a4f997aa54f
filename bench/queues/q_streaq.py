"""streaq under the benchmark protocol, on Trio (runs in bench/.peers/streaq).

streaq's own worker (``streaq.Worker(anyio_backend="trio")``, run with ``run_async`` under
``trio.run``) with ``concurrency`` = the concurrency, defaults otherwise. Bulk enqueue is
``Worker.enqueue_many`` (one pipeline). The roundtrip body uses the worker's own client,
``worker.redis`` (coredis, on anyio: it runs under Trio), in a ``pipeline()``.
``results``: ``task = await registered.enqueue(payload)`` then ``await task.result()``
(streaq subscribes to the task's channel, then reads the stored result; results are kept
5 minutes by default). ``io`` (bench/bodies.py) is a sync function: streaq runs it in a
thread, at most ``sync_concurrency`` (= ``concurrency``) at once.

The clients scenario runs streaq on asyncio, its default anyio backend: the worker with
``--loop asyncio`` (``Worker(anyio_backend="asyncio")``, ``run_async`` under
``anyio.run(..., backend="asyncio")``), and ``produce`` under ``asyncio.run``, the worker
object opened as streaq's producer (``async with worker:``): ``await
registered.enqueue(...)`` one after the other or from 100 coroutines at once, and
``Worker.enqueue_many``; the round trips as ``results``, one at a time.

``workflow`` (the workflows scenario), with streaq's task dependencies: a chain is
``noop.enqueue(0).then(noop).then(noop)...`` (``Task.then``: the next task is given the
result of the one before), enqueued by awaiting its last task, which enqueues the whole
chain in one transaction; a chain streaq refuses there (a ``RecursionError``: it walks the
chain recursively; nothing is written) is reported as refused. streaq has no chord: a
task enqueued with ``.start(after=[ids])`` runs once every task named succeeded, but is
given none of their results. The chord here: the ``n`` children enqueued with
``Worker.enqueue_many`` (one pipeline; their task ids ``<prefix>.<i>``), then ``count``
with ``after=`` their ids, which reads their ``n`` stored results itself (one pipeline of
``GET`` of streaq's result keys, each decoded with the worker's serializer) and returns
how many it read.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any, Literal

import anyio
import trio
from _driver import (
    BODY_PX,
    IO_SLEEP,
    NotSupported,
    Recorder,
    Refused,
    asyncio_only,
    body_keys,
    client_payload,
    linger,
    main,
    round_trips,
    send_all,
)
from coredis import PureToken  # type: ignore[import-not-found]
from streaq import Worker

REC: Recorder
WORKER: Worker[Any]
PREFIX, COUNTER = "", ""
#: The workflows scenario: how long the caller awaits a workflow's result (seconds).
WORKFLOW_WAIT = 600


async def noop(payload: Any) -> None:
    REC.begin(payload)
    REC.end()


async def sleep(payload: Any) -> None:
    REC.begin(payload)
    await anyio.sleep(payload["s"])
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


async def count(prefix: str, n: int) -> int:
    """The workflows scenario's chord callback: streaq gives it none of its dependencies'
    results, so it reads them (the children ``<prefix>.<i>``) from streaq's result keys."""
    REC.begin(None)
    async with WORKER.redis.pipeline(transaction=False) as pipe:
        replies = [pipe.get(WORKER.results_key + f"{prefix}.{i}") for i in range(n)]
    results = [(await WORKER.deserialize(await reply))["r"] for reply in replies]
    REC.end()
    return len(results)


async def roundtrip(payload: Any) -> None:
    REC.begin(payload)
    async with WORKER.redis.pipeline(transaction=False) as pipe:
        pipe.set(f"{PREFIX}:{payload['i']}", "1", condition=PureToken.NX, px=BODY_PX)
        pipe.incr(COUNTER)
    REC.end()


def make_worker(
    url: str, queue: str, concurrency: int = 100, backend: Literal["asyncio", "trio"] = "trio"
) -> tuple[Worker[Any], dict[str, Any]]:
    worker: Worker[Any] = Worker(
        redis_url=url,
        queue_name=queue,
        concurrency=concurrency,
        sync_concurrency=concurrency,  # the threads of sync tasks (its default too)
        anyio_backend=backend,
        handle_signals=False,
    )
    bodies = (noop, sleep, latency, echo, roundtrip, io, count)
    registered = {f.__name__: worker.task(f) for f in bodies}
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


def produce(url: str, queue: str, mode: str, n: int, client: str) -> dict[str, Any]:
    asyncio_only(client, "streaq")
    worker, registered = make_worker(url, queue, backend="asyncio")

    async def trip(payload: dict[str, Any]) -> Any:
        task = await registered["echo"].enqueue(payload)
        result = await task.result(timeout=30)
        assert result.success, result
        return result.result

    async def run() -> dict[str, Any]:
        async with worker:
            if mode == "trips":
                how = "task = await echo.enqueue(p); await task.result()"
                return await round_trips(n, trip) | {"how": how}
            if mode == "bulk":
                payloads = [client_payload(i) for i in range(n)]
                begin = time.perf_counter()
                await worker.enqueue_many([registered["noop"].enqueue(p) for p in payloads])
                seconds = time.perf_counter() - begin
                return {"seconds": seconds, "how": "await worker.enqueue_many([noop.enqueue(p)])"}
            seconds = await send_all(mode, n, registered["noop"].enqueue)
            return {"seconds": seconds, "how": "await noop.enqueue(p)"}

    return asyncio.run(run())


def workflow(url: str, queue: str, shape: str, n: int) -> dict[str, Any]:
    """The workflows scenario: a ``.then()`` chain of ``n`` no-op tasks, or ``n`` no-op
    children and ``count`` enqueued ``after=`` them (see the module docs); on Trio."""
    worker, registered = make_worker(url, queue)
    noop_task, count_task = registered["noop"], registered["count"]

    async def chain() -> dict[str, Any]:
        last = noop_task.enqueue(0)
        for _ in range(n - 1):
            last = last.then(noop_task)
        begin = time.perf_counter()
        try:
            await last  # enqueues the chain, from its first task
        except Exception as exc:
            if not caused_by(exc, RecursionError):
                raise
            why = f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, RecursionError):
                why += " (from a RecursionError)"
            raise Refused(f"{why}; nothing was enqueued") from exc
        dispatched = time.perf_counter()
        result = await last.result(timeout=WORKFLOW_WAIT)
        end = time.perf_counter()
        assert result.success, result
        how = "last = noop.enqueue(0).then(noop)...; await last; await last.result()"
        return timed(n, begin, dispatched, end, result.result, how)

    async def chord() -> dict[str, Any]:
        prefix = f"{queue}-{uuid.uuid4().hex[:8]}"
        children = [noop_task.enqueue(i) for i in range(n)]
        for i, child in enumerate(children):
            child.id = f"{prefix}.{i}"
        callback = count_task.enqueue(prefix, n).start(after=[c.id for c in children])
        begin = time.perf_counter()
        await worker.enqueue_many(children)
        await callback
        dispatched = time.perf_counter()
        result = await callback.result(timeout=WORKFLOW_WAIT)
        end = time.perf_counter()
        assert result.success, result
        assert result.result == n, (result.result, n)
        how = (
            "await worker.enqueue_many(children); "
            "await count.enqueue(prefix, n).start(after=ids); await callback.result() "
            "(count reads the children's results itself)"
        )
        return timed(n + 1, begin, dispatched, end, result.result, how)

    async def run() -> dict[str, Any]:
        async with worker:
            return await (chain() if shape == "chain" else chord())

    return trio.run(run)


def caused_by(exc: BaseException | None, kind: type[BaseException]) -> bool:
    """Whether ``exc``, or an exception it was raised from or during, is a ``kind``."""
    seen = 0
    while exc is not None and seen < 100:
        if isinstance(exc, kind):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def timed(
    steps: int, begin: float, dispatched: float, end: float, result: Any, how: str
) -> dict[str, Any]:
    return {
        "steps": steps,
        "seconds": round(end - begin, 4),
        "dispatch_seconds": round(dispatched - begin, 4),
        "result": result,
        "how": how,
    }


def work(
    url: str, queue: str, args: argparse.Namespace, rec: Recorder, ready: Callable[[], None]
) -> dict[str, Any]:
    global REC, WORKER, PREFIX, COUNTER
    REC = rec
    PREFIX, COUNTER = body_keys(queue)
    backend: Literal["asyncio", "trio"] = "asyncio" if args.loop == "asyncio" else "trio"
    worker, _ = make_worker(url, queue, args.concurrency, backend)
    WORKER = worker

    async def run() -> dict[str, Any]:
        done = anyio.Event()
        rec.on_complete = done.set
        if args.task == "io":  # the bodies run in threads: the n-th sets the event from one
            rec.make_threadsafe()
            rec.on_complete = lambda: anyio.from_thread.run_sync(done.set)
        async with anyio.create_task_group() as group:
            await group.start(worker.run_async)
            ready()
            await done.wait()
            # Cancelling streaq while it finishes a task's bookkeeping hung it for good
            # (seen with streaq 7.2): wait until nothing runs, then a little more.
            while worker.running():  # noqa: ASYNC110 (streaq has no event for it)
                await anyio.sleep(0.01)
            await linger(args, rec, anyio.sleep)
            await anyio.sleep(0.5)
            group.cancel_scope.cancel()
        return {}

    return anyio.run(run, backend=backend)


if __name__ == "__main__":
    _ = NotSupported
    main(enqueue, dispatch, work, results=results, produce=produce, workflow=workflow)
