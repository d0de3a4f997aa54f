"""dramatiq with its Redis broker under the benchmark protocol (runs in bench/.peers/dramatiq).

dramatiq's own ``Worker`` (what ``dramatiq`` runs in each worker process) with
``worker_threads`` = the concurrency: plain threads, so the bodies are sync functions and
the sleep body is ``time.sleep``. Default middleware. No bulk enqueue API (``group`` sends
one by one). The roundtrip body uses a sync ``redis.Redis`` created once per worker process
at start-up (the bodies run in dramatiq's threads), with a pipeline.

bench/bodies.py: ``io`` runs in the worker's threads (``worker_threads`` = the concurrency);
with ``--processes P`` the worker is the ``dramatiq`` command itself, ``--processes P
--threads C`` (``cpu``, and ``spin``: an actor with ``time_limit``, which dramatiq's
TimeLimit middleware enforces by raising ``TimeLimitExceeded`` in the actor's thread, checked
every second by default, and ``max_retries=0``, its failure stored by the Results
middleware).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dramatiq
import redis
from _driver import (
    BODY_PX,
    IO_SLEEP,
    SPIN_LIMIT,
    NotSupported,
    Recorder,
    body_keys,
    cpu_body,
    emit,
    emit_fd,
    main,
    spin,
    wait_go,
)
from dramatiq.brokers.redis import RedisBroker
from dramatiq.results import ResultFailure, Results
from dramatiq.results.backends import RedisBackend

REC: Recorder
CLIENT: redis.Redis
PREFIX, COUNTER = "", ""


def noop(payload: Any) -> None:
    REC.begin(payload)
    REC.end()


def sleep(payload: Any) -> None:
    REC.begin(payload)
    time.sleep(payload["s"])
    REC.end()


def latency(payload: Any) -> None:
    REC.begin(payload)
    REC.end()


def roundtrip(payload: Any) -> None:
    REC.begin(payload)
    with CLIENT.pipeline(transaction=False) as pipe:
        pipe.set(f"{PREFIX}:{payload['i']}", 1, nx=True, px=BODY_PX)
        pipe.incr(COUNTER)
        pipe.execute()
    REC.end()


def io(payload: Any) -> None:
    REC.begin(payload)
    time.sleep(IO_SLEEP)
    REC.end()


def cpu(payload: Any) -> None:
    cpu_body(payload)


def make_broker(url: str, queue: str, results: bool = False) -> tuple[RedisBroker, dict[str, Any]]:
    broker = RedisBroker(url=url)
    dramatiq.set_broker(broker)
    actors = {
        f.__name__: dramatiq.actor(f, actor_name=f.__name__, queue_name=queue, broker=broker)
        for f in (noop, sleep, latency, roundtrip, io, cpu)
    }
    if not results:
        return broker, actors
    # The spin task's waiter awaits its failure through the Results middleware.
    backend = RedisBackend(url=url)
    broker.add_middleware(Results(backend=backend))
    actors["spin"] = dramatiq.actor(
        spin,
        actor_name="spin",
        queue_name=queue,
        broker=broker,
        time_limit=int(SPIN_LIMIT * 1000),  # milliseconds
        max_retries=0,
        store_results=True,
    )
    actors["backend"] = backend
    return broker, actors


class Ready(dramatiq.Middleware):  # type: ignore[misc]
    """Each worker process of the ``dramatiq`` command says when it has booted."""

    def after_worker_boot(self, broker: RedisBroker, worker: dramatiq.Worker) -> None:
        emit_fd({"event": "ready"})


def setup() -> None:
    """What the ``dramatiq`` command loads in each of its worker processes (``--processes``)."""
    env = os.environ
    broker, _ = make_broker(
        env["BENCH_DRAMATIQ_URL"], env["BENCH_DRAMATIQ_QUEUE"], "BENCH_RESULTS" in env
    )
    broker.add_middleware(Ready())


def run_cli(url: str, queue: str, args: argparse.Namespace) -> None:
    """``dramatiq q_dramatiq:setup --processes P --threads C``: this process becomes the
    command's main process (stopped by SIGTERM)."""
    os.environ |= {"BENCH_DRAMATIQ_URL": url, "BENCH_DRAMATIQ_QUEUE": queue}
    if args.task == "spin":
        os.environ["BENCH_RESULTS"] = "1"
    command = str(Path(sys.executable).parent / "dramatiq")
    here = str(Path(__file__).resolve().parent)
    options = f"--processes {args.processes} --threads {args.concurrency}".split()
    os.execv(command, [command, "q_dramatiq:setup", *options, "--path", here, "--queues", queue])


def enqueue(url: str, queue: str, task: str, payloads: list[dict[str, Any]], mode: str) -> float:
    if mode != "single":
        raise NotSupported("dramatiq has no bulk enqueue API")
    broker, actors = make_broker(url, queue)
    try:
        begin = time.perf_counter()
        for payload in payloads:
            actors[task].send(payload)
        return time.perf_counter() - begin
    finally:
        broker.close()


def dispatch(
    url: str, queue: str, n: int, interval: float, make_payload: Callable[[], dict[str, Any]]
) -> None:
    broker, actors = make_broker(url, queue)
    try:
        start = time.monotonic()
        for i in range(n):
            time.sleep(max(0.0, start + i * interval - time.monotonic()))
            actors["latency"].send(make_payload())
    finally:
        broker.close()


def work(
    url: str, queue: str, args: argparse.Namespace, rec: Recorder, ready: Callable[[], None]
) -> dict[str, Any]:
    global REC, CLIENT, PREFIX, COUNTER
    if args.processes:
        run_cli(url, queue, args)
    REC = rec
    PREFIX, COUNTER = body_keys(queue)
    # One client per worker process. redis-py 8's pools hold 100 connections by default:
    # the 100 threads would use them all.
    CLIENT = redis.Redis.from_url(url, max_connections=1000)
    broker, _ = make_broker(url, queue)
    done = threading.Event()
    rec.on_complete = done.set
    worker = dramatiq.Worker(broker, worker_threads=args.concurrency)
    worker.start()
    ready()
    done.wait()
    if args.linger:  # idle, the worker still running, then report "final"
        time.sleep(args.linger)
        rec.final()
    worker.stop()
    broker.close()
    CLIENT.close()
    return {}


def timeouts(url: str, queue: str, n: int) -> None:
    """bench/bodies.py's waiter: for each go, send ``spin`` and ``get_result(block=True)``
    (the Results middleware's Redis backend), which raises ``ResultFailure``."""
    broker, actors = make_broker(url, queue, results=True)
    try:
        for i in range(n):
            if not wait_go():
                return
            message = actors["spin"].send({"i": i})
            try:
                message.get_result(backend=actors["backend"], block=True, timeout=30_000)
                outcome = "succeeded"
            except ResultFailure as exc:
                outcome = f"{exc.orig_exc_type}: {exc.orig_exc_msg}"
            emit({"event": "timeout", "i": i, "t_failed": time.time(), "outcome": outcome})
    finally:
        broker.close()


if __name__ == "__main__":
    _ = NotSupported
    main(enqueue, dispatch, work, threadsafe=True, timeouts=timeouts)
