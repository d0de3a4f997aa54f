"""dramatiq with its Redis broker under the benchmark protocol (runs in bench/.peers/dramatiq).

dramatiq's own ``Worker`` (what ``dramatiq`` runs in each worker process) with
``worker_threads`` = the concurrency: plain threads, so the bodies are sync functions and
the sleep body is ``time.sleep``. Default middleware. No bulk enqueue API (``group`` sends
one by one). The roundtrip body uses a sync ``redis.Redis`` created once per worker process
at start-up (the bodies run in dramatiq's threads), with a pipeline.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from typing import Any

import dramatiq
import redis
from _driver import BODY_PX, NotSupported, Recorder, body_keys, main
from dramatiq.brokers.redis import RedisBroker

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


def make_broker(url: str, queue: str) -> tuple[RedisBroker, dict[str, Any]]:
    broker = RedisBroker(url=url)
    dramatiq.set_broker(broker)
    actors = {
        f.__name__: dramatiq.actor(f, actor_name=f.__name__, queue_name=queue, broker=broker)
        for f in (noop, sleep, latency, roundtrip)
    }
    return broker, actors


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


if __name__ == "__main__":
    _ = NotSupported
    main(enqueue, dispatch, work, threadsafe=True)
