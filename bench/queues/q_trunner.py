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

``--middleware N`` (scenario 15): the worker's runner has N no-op middleware, each an
``around_attempt`` that yields (``NoopMiddleware``). ``--otel`` (scenario 15): it has
trunner's ``OpenTelemetryMiddleware`` on the OpenTelemetry SDK, spans going through a
``BatchSpanProcessor`` to an exporter that drops them, the duration histogram aggregated
by an in-memory reader nobody reads (:func:`otel_middleware`; imported only then).
``--lanes urgent:9,default:1`` (scenario 17): the worker's runner reads those priority
lanes (``RunnerConfig.lanes``, highest first), by weight, or strictly with
``--strict-lanes``; its "stopped" line then says how many messages it fetched per lane.

``results``: a client (``open_client``) dispatches ``echo`` by name with
``keep_result=KEEP`` and awaits ``handle.result()``. ``cancel``: a client dispatches
``hang``, polls ``handle.status()`` until the task runs, waits 20 ms, then times
``handle.cancel()`` and ``handle.result()`` raising ``TaskCancelled``. A worker reports
when a pause of its group has stopped its fetch loops, and when they fetch again
(:func:`report_pauses`).

bench/bodies.py: ``io`` (scenario 19) is a plain ``def`` task, run in the worker's threads
(``max_threads``: by default ``num_workers``, the concurrency). Scenarios 20 and 21 run
``trunner worker`` on trunner_app.py; their waiter is ``timeouts`` here.

``produce`` (the clients scenario) with ``--client asyncio`` (the default): a
``trunner.aio.Client`` under ``asyncio.run``; ``await client.dispatch(...)`` one after the
other or from 100 coroutines at once, ``await client.dispatch_many(...)``, and round trips
``handle = await client.dispatch("echo", p, keep_result=KEEP)``, ``await
handle.result()``. ``--client sync``: a ``trunner.sync.Client`` (no concurrent mode: its
concurrency is the caller's threads); ``--client trio``: ``open_client``, the concurrent
senders in a nursery. trunner.aio, trunner.sync and asyncio are imported only then (the
workers' RSS stays trunner's own).

``workflow`` (the workflows scenario): a client (``open_client``) dispatches, by task
name, ``chain(step("noop", 0), *[step("noop") for _ in range(n - 1)])`` (open steps: each
given the result of the one before) or ``chord(group(step("noop", i) for i in
range(n)), step("count"))``, and awaits ``handle.result()``.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import trio
from _driver import (
    BODY_PX,
    IO_SLEEP,
    SENDERS,
    NotSupported,
    Recorder,
    body_keys,
    client_payload,
    emit,
    main,
    round_trips,
    send_all,
    wait_go,
)

import trunner

PREFIX = "trunner-bench"
#: Seconds the results of ``echo``, ``noop_keep`` and ``hang`` are kept.
KEEP = 60
#: The workflows scenario: how long the caller awaits a workflow's result (seconds).
WORKFLOW_WAIT = 600


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


def results(url: str, queue: str, n: int, concurrency: int) -> tuple[list[float], float]:
    async def run() -> tuple[list[float], float]:
        seconds: list[float] = []
        async with trunner.open_client(url, queue, prefix=PREFIX) as client:

            async def waiter(first: int) -> None:
                for i in range(first, n, concurrency):
                    begin = time.perf_counter()
                    handle = await client.dispatch(
                        "echo", {"i": i, "t": time.time()}, keep_result=KEEP
                    )
                    value = await handle.result(timeout=30)
                    seconds.append(time.perf_counter() - begin)
                    assert value == i, (value, i)

            begin = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for first in range(concurrency):
                    nursery.start_soon(waiter, first)
            return seconds, time.perf_counter() - begin

    return trio.run(run)


def cancel(url: str, queue: str, n: int) -> None:
    async def run() -> None:
        async with trunner.open_client(url, queue, prefix=PREFIX) as client:
            for i in range(n):
                handle = await client.dispatch("hang", {"i": i}, keep_result=KEEP)
                with trio.fail_after(30):
                    # The bench's wait for "running" polls (nothing announces a start).
                    while (await handle.status()).state is not trunner.TaskState.RUNNING:  # noqa: ASYNC110
                        await trio.sleep(0.002)
                await trio.sleep(0.02)  # running for a while, awaiting in its body
                t_call = time.time()
                outcome = await handle.cancel()
                t_return = time.time()
                with contextlib.suppress(trunner.TaskCancelled):
                    await handle.result(timeout=30)
                t_outcome = time.time()
                emit(
                    {
                        "event": "cancel",
                        "i": i,
                        "t_call": t_call,
                        "t_return": t_return,
                        "t_outcome": t_outcome,
                        "outcome": str(outcome),
                    }
                )

    trio.run(run)


def timeouts(url: str, queue: str, n: int) -> None:
    """bench/bodies.py's waiter: for each go, dispatch ``spin`` (trunner_app.py: a process
    task with a timeout) and await its failure with ``handle.result()``."""

    async def run() -> None:
        async with trunner.open_client(url, queue, prefix=PREFIX) as client:
            for i in range(n):
                if not await trio.to_thread.run_sync(wait_go):
                    return
                handle = await client.dispatch("spin", {"i": i})
                try:
                    await handle.result(timeout=30)
                    outcome = "succeeded"
                except trunner.TaskFailed as exc:
                    outcome = str(exc.error)
                emit({"event": "timeout", "i": i, "t_failed": time.time(), "outcome": outcome})

    trio.run(run)


def produce(url: str, queue: str, mode: str, n: int, client: str) -> dict[str, Any]:
    """The clients scenario: dispatching from asyncio (``trunner.aio.Client``), from
    synchronous code (``trunner.sync.Client``) or from Trio (``open_client``)."""
    if client == "sync":
        return produce_sync(url, queue, mode, n)
    if client == "trio":
        return trio.run(produce_trio, url, queue, mode, n)
    import asyncio  # noqa: PLC0415 - only this command loads it (the workers' RSS)

    import trunner.aio  # noqa: PLC0415 - idem

    async def run() -> dict[str, Any]:
        async with trunner.aio.Client(url, queue=queue, prefix=PREFIX) as aio:

            async def trip(payload: dict[str, Any]) -> Any:
                handle = await aio.dispatch("echo", payload, keep_result=KEEP)
                return await handle.result(timeout=30)

            if mode == "trips":
                how = "handle = await client.dispatch('echo', p); await handle.result()"
                return await round_trips(n, trip) | {"how": how}
            if mode == "bulk":
                payloads = [client_payload(i) for i in range(n)]
                begin = time.perf_counter()
                await aio.dispatch_many("noop", payloads)
                how = "await client.dispatch_many('noop', payloads)"
                return {"seconds": time.perf_counter() - begin, "how": how}
            seconds = await send_all(mode, n, lambda p: aio.dispatch("noop", p))
            return {"seconds": seconds, "how": "await client.dispatch('noop', p)"}

    return asyncio.run(run())


def produce_sync(url: str, queue: str, mode: str, n: int) -> dict[str, Any]:
    """The clients scenario from synchronous code: ``trunner.sync.Client``."""
    import trunner.sync  # noqa: PLC0415 - only this command loads it (the workers' RSS)

    if mode == "concurrent":
        raise NotSupported("the sync client's concurrency is its callers' threads")
    with trunner.sync.Client(url, queue=queue, prefix=PREFIX) as client:
        if mode == "trips":
            seconds = []
            begin = time.perf_counter()
            for i in range(n):
                start = time.perf_counter()
                payload = {**client_payload(i), "t": time.time()}
                value = client.dispatch("echo", payload, keep_result=KEEP).result(timeout=30)
                seconds.append(time.perf_counter() - start)
                assert value == i, (value, i)
            how = "client.dispatch('echo', p).result()"
            return {"round_trips": seconds, "seconds": time.perf_counter() - begin, "how": how}
        payloads = [client_payload(i) for i in range(n)]
        begin = time.perf_counter()
        if mode == "bulk":
            client.dispatch_many("noop", payloads)
            how = "client.dispatch_many('noop', payloads)"
        else:
            for payload in payloads:
                client.dispatch("noop", payload)
            how = "client.dispatch('noop', p)"
        return {"seconds": time.perf_counter() - begin, "how": how}


async def produce_trio(url: str, queue: str, mode: str, n: int) -> dict[str, Any]:
    """The clients scenario from Trio (the reference): ``open_client``."""
    async with trunner.open_client(url, queue, prefix=PREFIX) as client:

        async def trip(payload: dict[str, Any]) -> Any:
            handle = await client.dispatch("echo", payload, keep_result=KEEP)
            return await handle.result(timeout=30)

        if mode == "trips":
            how = "handle = await client.dispatch('echo', p); await handle.result()"
            return await round_trips(n, trip) | {"how": how}
        payloads = [client_payload(i) for i in range(n)]

        async def sender(first: int, step: int) -> None:
            for payload in payloads[first::step]:
                await client.dispatch("noop", payload)

        begin = time.perf_counter()
        if mode == "bulk":
            await client.dispatch_many("noop", payloads)
            how = "await client.dispatch_many('noop', payloads)"
        elif mode == "concurrent":
            async with trio.open_nursery() as nursery:
                for k in range(SENDERS):
                    nursery.start_soon(sender, k, SENDERS)
            how = "await client.dispatch('noop', p), 100 senders in a nursery"
        else:
            await sender(0, 1)
            how = "await client.dispatch('noop', p)"
        return {"seconds": time.perf_counter() - begin, "how": how}


def workflow(url: str, queue: str, shape: str, n: int) -> dict[str, Any]:
    """The workflows scenario: one chain of ``n`` no-op steps, or one chord of ``n`` no-op
    children into ``count``, dispatched and awaited (``trunner.workflows``)."""
    from trunner.workflows import chain, chord, group, step  # noqa: PLC0415 - the workers' RSS

    if shape == "chain":
        flow = chain(step("noop", 0), *[step("noop") for _ in range(n - 1)])
        how = "chain(step(noop, 0), *(step(noop) for _ in range(n - 1)))"
        steps, expected = n, None
    else:
        flow = chord(group(step("noop", i) for i in range(n)), step("count"))
        how = "chord(group(step(noop, i) for i in range(n)), step(count))"
        steps, expected = n + 1, n

    async def run() -> dict[str, Any]:
        async with trunner.open_client(url, queue, prefix=PREFIX) as client:
            begin = time.perf_counter()
            handle = await client.dispatch(flow)
            dispatched = time.perf_counter()
            value = await handle.result(timeout=WORKFLOW_WAIT)
            end = time.perf_counter()
        assert value == expected, (value, expected)
        return {
            "steps": steps,
            "seconds": round(end - begin, 4),
            "dispatch_seconds": round(dispatched - begin, 4),
            "result": value,
            "how": f"handle = await client.dispatch({how}); await handle.result()",
        }

    return trio.run(run)


def otel_middleware() -> trunner.Middleware:
    """Scenario 15: trunner's OpenTelemetry middleware, with the SDK doing all its work
    (sampling every span, batching them) but exporting nowhere."""
    # Loaded only for this scenario: the other scenarios' memory stays trunner's own.
    from collections.abc import Sequence  # noqa: PLC0415

    from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: PLC0415
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from trunner.otel import OpenTelemetryMiddleware  # noqa: PLC0415

    class Drop(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(Drop()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return OpenTelemetryMiddleware(tracer_provider, meter_provider)


class NoopMiddleware(trunner.Middleware):
    """Scenario 15: the cost of one middleware around each attempt, doing nothing."""

    @contextlib.asynccontextmanager
    async def around_attempt(self, attempt: trunner.middleware.AttemptInfo) -> AsyncIterator[None]:
        yield


def bench_tasks(tasks: trunner.TaskRegistry, rec: Recorder) -> None:
    """The bodies without a Redis round trip of their own."""

    @tasks.task
    async def noop(payload: Any) -> None:
        rec.begin(payload)
        rec.end()

    @tasks.task(concurrency=100)  # scenario 16: the worker's capacity, so nothing waits
    async def noop_limited(payload: Any) -> None:
        rec.begin(payload)
        rec.end()

    @tasks.task
    async def backlog(payload: Any) -> None:
        """Scenario 17's backlog: a no-op that the recorder does not count."""

    @tasks.task(keep_result=KEEP)
    async def noop_keep(payload: Any) -> None:
        rec.begin(payload)
        rec.end()

    @tasks.task(keep_result=KEEP)
    async def echo(payload: Any) -> int:
        rec.begin(payload)
        rec.end()
        return int(payload["i"])

    @tasks.task(keep_result=KEEP)
    async def hang(payload: Any) -> None:
        rec.begin(payload)
        started = time.time()
        try:
            await trio.sleep_forever()
        finally:  # cancelled: the time its cancellation was seen here
            emit({"event": "task_end", "i": payload["i"], "t": time.time(), "started": started})
            rec.end()

    @tasks.task
    async def count(payload: list[Any]) -> int:
        """The workflows scenario's chord callback: how many results it was given."""
        rec.begin(payload)
        rec.end()
        return len(payload)

    @tasks.task
    async def sleep(payload: Any) -> None:
        rec.begin(payload)
        await trio.sleep(payload["s"])
        rec.end()

    @tasks.task
    async def latency(payload: Any) -> None:
        rec.begin(payload)
        rec.end()

    @tasks.task
    def io(payload: Any) -> None:  # a plain def: in a worker thread (max_threads)
        rec.begin(payload)
        time.sleep(IO_SLEEP)
        rec.end()


def redis_body_tasks(tasks: trunner.TaskRegistry, rec: Recorder, queue: str) -> None:
    """The redis-body scenario's bodies (one Redis round trip each)."""
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


def work(
    url: str, queue: str, args: argparse.Namespace, rec: Recorder, ready: Callable[[], None]
) -> dict[str, Any]:
    tasks = trunner.TaskRegistry()
    bench_tasks(tasks, rec)
    redis_body_tasks(tasks, rec, queue)

    async def run() -> dict[str, Any]:
        done = trio.Event()
        rec.on_complete = done.set
        if args.task == "io":  # the bodies run in threads: the n-th sets the event from one
            rec.make_threadsafe()
            rec.on_complete = lambda: trio.from_thread.run_sync(done.set)
        config = trunner.RunnerConfig(
            consumer_group=queue,
            prefix=PREFIX,
            num_workers=args.concurrency,
            batch_size=args.batch,
            middleware=[
                *(NoopMiddleware() for _ in range(args.middleware)),
                *([otel_middleware()] if args.otel else []),
            ],
            lanes=parse_lanes(args.lanes),
            strict_lanes=args.strict_lanes,
        )
        begin = time.perf_counter()
        async with (
            trunner.open_runner(url, config, tasks) as runner,
            trio.open_nursery() as watching,
        ):
            watching.start_soon(report_pauses, runner)
            ready()
            await done.wait()
            if args.linger:  # before the watcher is cancelled: this sleep is in its scope
                await trio.sleep(args.linger)
                rec.final()
            stats = runner.statistics()
            handle = runner.redis  # its counts: round trips and commands of the task bodies
            stop = time.perf_counter()
            watching.cancel_scope.cancel()
        return {
            "succeeded": stats.succeeded,
            "failed": stats.failed,
            "errors": stats.errors,
            "max_in_flight": stats.max_in_flight,
            "fetched_per_lane": dict(stats.lanes),
            "redis_batches": handle.batches,
            "redis_commands": handle.commands,
            "shutdown_seconds": round(time.perf_counter() - stop, 3),
            "lifetime_seconds": round(time.perf_counter() - begin, 3),
        }

    if args.task == "roundtrip_bridged":
        return trio.run(bridged, url, run)
    return trio.run(run)


def parse_lanes(text: str) -> dict[str, int] | None:
    """``--lanes``: ``"urgent:9,default:1"`` -> ``{"urgent": 9, "default": 1}`` (in order:
    the first is the highest); ``""`` -> None (the one default lane)."""
    if not text:
        return None
    lanes: dict[str, int] = {}
    for item in text.split(","):
        name, _, weight = item.partition(":")
        lanes[name] = int(weight or 1)
    return lanes


async def report_pauses(runner: trunner.Runner) -> None:
    """Scenario 13: ``{"event": "paused", "t"}`` each time the group's pause has stopped
    this worker's fetch loops, ``{"event": "resumed", "t"}`` each time they fetch again
    (wall-clock times)."""
    while True:
        await runner.wait_paused()
        emit({"event": "paused", "t": time.time()})
        await runner.wait_resumed()
        emit({"event": "resumed", "t": time.time()})


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
    main(
        enqueue,
        dispatch,
        work,
        results=results,
        cancel=cancel,
        produce=produce,
        timeouts=timeouts,
        workflow=workflow,
    )
