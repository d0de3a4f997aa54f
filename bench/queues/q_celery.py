"""celery with its Redis broker under the benchmark protocol (runs in bench/.peers/celery),
for bench/bodies.py's scenarios only (``io``, ``cpu``, ``spin``).

The worker is celery's own, started as ``celery worker`` starts it (``app.worker_main``),
defaults otherwise (prefetch multiplier 4, early acknowledgement): ``io`` in the thread
pool (``--pool threads --concurrency C``); with ``--processes P``, ``cpu`` and ``spin`` in
the prefork pool (``--pool prefork --concurrency P``). ``spin`` has a hard
``time_limit``: the pool's main process, at the deadline, records the failure
(``TimeLimitExceeded``) and terminates the child (SIGTERM, then SIGKILL 0.1 s later if it
still runs), and starts a new one. Its waiter (``timeouts``) awaits ``AsyncResult.get()``
on the Redis result backend, which is told of the outcome by pub/sub. There is no bulk
enqueue API (a ``group`` sends one by one).

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


def io(payload: Any) -> None:
    REC.begin(payload)
    time.sleep(IO_SLEEP)
    REC.end()


def cpu(payload: Any) -> None:
    cpu_body(payload)


def make_app(url: str, queue: str, results: bool = False) -> Any:
    """The app, its tasks (by name), all on ``queue``; the Redis result backend if asked."""
    app = Celery("bench", broker=url, backend=url if results else None)
    app.conf.task_default_queue = queue
    app.task(name="io")(io)
    app.task(name="cpu")(cpu)
    app.task(name="spin", time_limit=SPIN_LIMIT)(spin)
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
    raise NotSupported("celery runs only bench/bodies.py's scenarios here")


def work(
    url: str, queue: str, args: argparse.Namespace, rec: Recorder, ready: Callable[[], None]
) -> dict[str, Any]:
    global REC
    REC = rec
    # The n-th io body (in a pool thread) stops the worker as a SIGTERM does: a warm
    # shutdown. With --processes the bodies report themselves and the harness stops it.
    rec.on_complete = lambda: os.kill(os.getpid(), signal.SIGTERM)
    worker_ready.connect(lambda **_: emit_fd({"event": "ready"}), weak=False)
    app = make_app(url, queue, results=args.task == "spin")
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


if __name__ == "__main__":
    main(enqueue, dispatch, work, threadsafe=True, timeouts=timeouts)
