"""celery with its Redis broker under the benchmark protocol (runs in bench/.peers/celery),
for bench/bodies.py's scenarios (``io``, ``cpu``, ``spin``) and bench/workflow_runs.py's
(``noop``, ``count``) only.

The worker is celery's own, started as ``celery worker`` starts it (``app.worker_main``),
defaults otherwise (prefetch multiplier 4, early acknowledgement): ``io`` in the thread
pool (``--pool threads --concurrency C``); with ``--processes P``, ``cpu`` and ``spin`` in
the prefork pool (``--pool prefork --concurrency P``). ``spin`` has a hard
``time_limit``: the pool's main process, at the deadline, records the failure
(``TimeLimitExceeded``) and terminates the child (SIGTERM, then SIGKILL 0.1 s later if it
still runs), and starts a new one. Its waiter (``timeouts``) awaits ``AsyncResult.get()``
on the Redis result backend, which is told of the outcome by pub/sub. There is no bulk
enqueue API (a ``group`` sends one by one).

The workflows scenario (``workflow``) uses celery's canvas on the Redis broker and the
Redis result backend (a chord needs one): ``chain(noop.s(0), *(noop.s() for _ in
range(n - 1))).apply_async()`` (each step's result is prepended to the next one's
arguments; every message carries the rest of the chain), or ``chord(group(noop.s(i) for i
in range(n)), count.s()).apply_async()`` (the Redis backend counts the children that
ended and starts ``count`` with the list of their results), then ``result.get()``; the
broker connection is opened before the clock starts, as the other queues' clients are. Its
worker runs ``noop`` and ``count`` in the thread pool (``--pool threads --concurrency
C``), as ``io``.

celery would redirect ``sys.stdout`` to its logger; ``worker_redirect_stdouts=False`` keeps
the protocol's lines on stdout, and the pool's processes write theirs straight to file
descriptor 1 (``emit_fd``).
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from _driver import (
    IO_SLEEP,
    SPIN_LIMIT,
    NotSupported,
    Recorder,
    cpu_body,
    emit,
    emit_fd,
    main,
    spin,
    wait_go,
)
from celery import Celery  # type: ignore[import-not-found]
from celery.signals import worker_ready  # type: ignore[import-not-found]

REC: Recorder
#: The workflows scenario: how long the caller awaits a workflow's result (seconds).
WORKFLOW_WAIT = 600


def io(payload: Any) -> None:
    REC.begin(payload)
    time.sleep(IO_SLEEP)
    REC.end()


def cpu(payload: Any) -> None:
    cpu_body(payload)


def noop(payload: Any) -> None:
    REC.begin(payload)
    REC.end()


def count(results: list[Any]) -> int:
    """The workflows scenario's chord callback: how many results it was given."""
    REC.begin(results)
    REC.end()
    return len(results)


def make_app(url: str, queue: str, results: bool = False) -> Any:
    """The app, its tasks (by name), all on ``queue``; the Redis result backend if asked."""
    app = Celery("bench", broker=url, backend=url if results else None)
    app.conf.task_default_queue = queue
    app.task(name="io")(io)
    app.task(name="cpu")(cpu)
    app.task(name="spin", time_limit=SPIN_LIMIT)(spin)
    app.task(name="noop")(noop)
    app.task(name="count")(count)
    return app


def enqueue(url: str, queue: str, task: str, payloads: list[dict[str, Any]], mode: str) -> float:
    if mode != "single":
        raise NotSupported("celery has no bulk enqueue API")
    app = make_app(url, queue)
    begin = time.perf_counter()
    for payload in payloads:
        app.tasks[task].delay(payload)
    seconds = time.perf_counter() - begin
    app.close()
    return seconds


def dispatch(
    url: str, queue: str, n: int, interval: float, make_payload: Callable[[], dict[str, Any]]
) -> None:
    raise NotSupported("celery runs only the scenarios of bench/bodies.py and workflow_runs.py")


def work(
    url: str, queue: str, args: argparse.Namespace, rec: Recorder, ready: Callable[[], None]
) -> dict[str, Any]:
    global REC
    REC = rec
    # The n-th io body (in a pool thread) stops the worker as a SIGTERM does: a warm
    # shutdown. With --processes the bodies report themselves and the harness stops it.
    rec.on_complete = lambda: os.kill(os.getpid(), signal.SIGTERM)
    worker_ready.connect(lambda **_: emit_fd({"event": "ready"}), weak=False)
    app = make_app(url, queue, results=args.task in ("spin", "count"))
    app.conf.worker_redirect_stdouts = False  # the protocol's lines go to stdout
    pool = f"--pool=prefork --concurrency={args.processes}"
    if not args.processes:
        pool = f"--pool=threads --concurrency={args.concurrency}"
    app.worker_main(["worker", *pool.split(), f"--queues={queue}", "--loglevel=WARNING"])
    return {}


def timeouts(url: str, queue: str, n: int) -> None:
    """bench/bodies.py's waiter: for each go, ``spin.delay`` and ``get(propagate=False)``."""
    app = make_app(url, queue, results=True)
    try:
        for i in range(n):
            if not wait_go():
                return
            result = app.tasks["spin"].delay({"i": i})
            value = result.get(timeout=30, propagate=False)
            t_failed = time.time()
            outcome = f"{type(value).__name__}: {value}" if result.failed() else "succeeded"
            emit({"event": "timeout", "i": i, "t_failed": t_failed, "outcome": outcome})
    finally:
        app.close()


def workflow(url: str, queue: str, shape: str, n: int) -> dict[str, Any]:
    """The workflows scenario: a canvas ``chain`` of ``n`` no-op tasks, or a ``chord`` of
    ``n`` no-op children into ``count``, applied and awaited (``result.get()``)."""
    from celery import chain, chord, group  # noqa: PLC0415

    app = make_app(url, queue, results=True)
    noop_task, count_task = app.tasks["noop"], app.tasks["count"]
    if shape == "chain":
        flow = chain(noop_task.s(0), *(noop_task.s() for _ in range(n - 1)))
        how = "chain(noop.s(0), *(noop.s() for _ in range(n - 1))).apply_async().get()"
        steps, expected = n, None
    else:
        flow = chord(group(noop_task.s(i) for i in range(n)), count_task.s())
        how = "chord(group(noop.s(i) for i in range(n)), count.s()).apply_async().get()"
        steps, expected = n + 1, n
    try:
        # The broker connection opened first, as the other queues' clients are.
        with app.producer_or_acquire() as producer:
            producer.connection.ensure_connection(max_retries=3)
        begin = time.perf_counter()
        result = flow.apply_async()
        dispatched = time.perf_counter()
        value = result.get(timeout=WORKFLOW_WAIT)
        end = time.perf_counter()
    finally:
        app.close()
    assert value == expected, (value, expected)
    return {
        "steps": steps,
        "seconds": round(end - begin, 4),
        "dispatch_seconds": round(dispatched - begin, 4),
        "result": value,
        "how": how,
    }


if __name__ == "__main__":
    main(enqueue, dispatch, work, threadsafe=True, timeouts=timeouts, workflow=workflow)
