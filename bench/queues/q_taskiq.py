"""taskiq with taskiq-redis's stream broker under the benchmark protocol
(runs in bench/.peers/taskiq).

``taskiq_redis.RedisStreamBroker`` (consumer group from the stream's start, so a backlog
enqueued before the worker starts is read) and taskiq's own ``Receiver`` — what
``taskiq worker`` runs in each worker process — with ``max_async_tasks`` = the concurrency.
No result backend, except for ``echo`` (below). taskiq has no bulk enqueue API. The
roundtrip body uses a ``redis.asyncio.Redis`` created once per worker process by a
``WORKER_STARTUP`` event handler and kept in the broker's state, which the body receives
as taskiq documents it (``state: TaskiqState = TaskiqDepends()``).
``produce`` (the clients scenario): ``await task.kiq(...)``, one after the other or from 100
coroutines at once; the round trips: ``await (await echo.kiq(p)).wait_result()`` on a
broker ``with_result_backend(RedisAsyncResultBackend(url))`` (taskiq-redis's result
backend: ``wait_result`` looks for the result every ``check_interval`` = 0.2 s, its
default), the worker's broker too (only the ``echo`` worker stores results).

bench/bodies.py: ``io`` is a sync function, run in the receiver's thread pool of
``concurrency`` threads (``taskiq worker --max-threadpool-threads``); ``cpu`` and ``spin``
run, with ``--processes P``, in a process pool of P processes (``taskiq worker
--use-process-pool --max-process-pool-processes P``), ``spin`` with the label
``timeout=SPIN_LIMIT`` (taskiq warns that timeouts of sync tasks "don't work in python
well": the attempt fails at the deadline, the process runs on), its failure stored in
taskiq-redis's ``RedisAsyncResultBackend``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

import redis.asyncio
from _driver import (
    BODY_PX,
    IO_SLEEP,
    SPIN_LIMIT,
    NotSupported,
    Recorder,
    asyncio_only,
    body_keys,
    cpu_body,
    emit,
    linger,
    main,
    paced,
    round_trips,
    send_all,
    spin,
    wait_go,
)
from taskiq import TaskiqDepends, TaskiqEvents, TaskiqState
from taskiq.receiver import Receiver
from taskiq_redis import RedisAsyncResultBackend, RedisStreamBroker

REC: Recorder
PREFIX, COUNTER = "", ""


async def noop(payload: Any) -> None:
    REC.begin(payload)
    REC.end()


async def sleep(payload: Any) -> None:
    REC.begin(payload)
    await asyncio.sleep(payload["s"])
    REC.end()


async def latency(payload: Any) -> None:
    REC.begin(payload)
    REC.end()


async def echo(payload: Any) -> int:
    REC.begin(payload)
    REC.end()
    return int(payload["i"])


def io(payload: Any) -> None:  # sync: taskiq runs it in the receiver's executor (threads)
    REC.begin(payload)
    time.sleep(IO_SLEEP)
    REC.end()


def cpu(payload: Any) -> None:  # sync: in the executor (here a process pool)
    cpu_body(payload)


def spin_task(payload: Any) -> None:  # sync, in the process pool, with a ``timeout`` label
    spin(payload)


async def roundtrip(payload: Any, state: TaskiqState = TaskiqDepends()) -> None:  # noqa: B008
    REC.begin(payload)
    async with state.redis.pipeline(transaction=False) as pipe:
        pipe.set(f"{PREFIX}:{payload['i']}", 1, nx=True, px=BODY_PX)
        pipe.incr(COUNTER)
        await pipe.execute()
    REC.end()


def make_broker(
    url: str, queue: str, results: bool = False
) -> tuple[RedisStreamBroker, dict[str, Any]]:
    """The broker; with ``results``, with taskiq-redis's result backend."""
    broker = RedisStreamBroker(url, queue_name=queue, consumer_group_name=queue, consumer_id="0")
    if results:
        broker = broker.with_result_backend(RedisAsyncResultBackend(url))
    registered = {
        f.__name__: broker.register_task(f, task_name=f.__name__)
        for f in (noop, sleep, latency, echo, roundtrip, io, cpu)
    }
    registered["spin"] = broker.register_task(spin_task, task_name="spin", timeout=SPIN_LIMIT)

    async def startup(state: TaskiqState) -> None:
        # redis-py 8's pools hold 100 connections by default: the 100 concurrent bodies
        # would use them all.
        state.redis = redis.asyncio.Redis.from_url(url, max_connections=1000)

    async def shutdown(state: TaskiqState) -> None:
        await state.redis.aclose()

    broker.add_event_handler(TaskiqEvents.WORKER_STARTUP, startup)
    broker.add_event_handler(TaskiqEvents.WORKER_SHUTDOWN, shutdown)
    return broker, registered


def enqueue(url: str, queue: str, task: str, payloads: list[dict[str, Any]], mode: str) -> float:
    if mode != "single":
        raise NotSupported("taskiq has no bulk enqueue API")
    broker, registered = make_broker(url, queue)

    async def run() -> float:
        await broker.startup()
        try:
            begin = time.perf_counter()
            for payload in payloads:
                await registered[task].kiq(payload)
            return time.perf_counter() - begin
        finally:
            await broker.shutdown()

    return asyncio.run(run())


def dispatch(
    url: str, queue: str, n: int, interval: float, make_payload: Callable[[], dict[str, Any]]
) -> None:
    broker, registered = make_broker(url, queue)

    async def run() -> None:
        await broker.startup()
        try:
            await paced(n, interval, lambda: registered["latency"].kiq(make_payload()))
        finally:
            await broker.shutdown()

    asyncio.run(run())


def produce(url: str, queue: str, mode: str, n: int, client: str) -> dict[str, Any]:
    asyncio_only(client, "taskiq")
    if mode == "bulk":
        raise NotSupported("taskiq has no bulk enqueue API")
    broker, registered = make_broker(url, queue, results=mode == "trips")

    async def trip(payload: dict[str, Any]) -> Any:
        task = await registered["echo"].kiq(payload)
        result = await task.wait_result(timeout=30)
        return result.raise_for_error().return_value

    async def run() -> dict[str, Any]:
        await broker.startup()
        try:
            if mode == "trips":
                how = "task = await echo.kiq(p); await task.wait_result()"
                return await round_trips(n, trip) | {"how": how}
            seconds = await send_all(mode, n, registered["noop"].kiq)
            return {"seconds": seconds, "how": "await noop.kiq(p)"}
        finally:
            await broker.shutdown()

    return asyncio.run(run())


def work(
    url: str, queue: str, args: argparse.Namespace, rec: Recorder, ready: Callable[[], None]
) -> dict[str, Any]:
    global REC, PREFIX, COUNTER
    REC = rec
    PREFIX, COUNTER = body_keys(queue)
    broker, _ = make_broker(url, queue, results=args.task in ("echo", "spin"))
    broker.is_worker_process = True
    # What ``taskiq worker`` gives the receiver for sync tasks: a thread pool
    # (--max-threadpool-threads, here the concurrency), or with --use-process-pool a process
    # pool (--max-process-pool-processes, here --processes).
    executor: Executor = (
        ProcessPoolExecutor(max_workers=args.processes)
        if args.processes
        else ThreadPoolExecutor(max_workers=args.concurrency)
    )

    async def run() -> dict[str, Any]:
        done = asyncio.Event()
        rec.on_complete = done.set
        if args.task == "io":  # the bodies run in threads: the n-th sets the event from one
            loop = asyncio.get_running_loop()
            rec.make_threadsafe()
            rec.on_complete = lambda: loop.call_soon_threadsafe(done.set)
        if args.processes:  # the bodies report themselves; the harness stops the worker
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, done.set)
        finish = asyncio.Event()
        with executor:
            receiver = Receiver(broker, executor=executor, max_async_tasks=args.concurrency)
            listener = asyncio.create_task(receiver.listen(finish))
            ready()
            waiter = asyncio.create_task(done.wait())
            await asyncio.wait([listener, waiter], return_when=asyncio.FIRST_COMPLETED)
            if listener.done():
                listener.result()
            await linger(args, rec, asyncio.sleep)
            # Setting the finish event right after the last task hung taskiq's receiver
            # (its cancelled XREADGROUP never returned; seen with taskiq 0.13): wait a little.
            await asyncio.sleep(0.5)
            finish.set()
            await listener
        await broker.shutdown()
        return {}

    return asyncio.run(run())


def timeouts(url: str, queue: str, n: int) -> None:
    """bench/bodies.py's waiter: for each go, ``spin.kiq`` and ``wait_result`` (it polls the
    result backend: every 5 ms here, against 0.2 s by default)."""
    broker, registered = make_broker(url, queue, results=True)

    async def run() -> None:
        await broker.startup()
        loop = asyncio.get_running_loop()
        try:
            for i in range(n):
                if not await loop.run_in_executor(None, wait_go):
                    return
                task = await registered["spin"].kiq({"i": i})
                result = await task.wait_result(check_interval=0.005, timeout=30)
                outcome = repr(result.error) if result.is_err else "succeeded"
                emit({"event": "timeout", "i": i, "t_failed": time.time(), "outcome": outcome})
        finally:
            await broker.shutdown()

    asyncio.run(run())


if __name__ == "__main__":
    main(enqueue, dispatch, work, produce=produce, timeouts=timeouts)
