"""The protocol every queue under test speaks, so the harness drives them all alike.

Standard library only: this file also runs in the peers' virtual environments. Each
``q_<name>.py`` beside it implements three functions and calls :func:`main`::

    python q_NAME.py --redis URL --queue Q enqueue --task T --mode single|bulk --n N [--sleep S]
    python q_NAME.py --redis URL --queue Q dispatch --n N --interval S
    python q_NAME.py --redis URL --queue Q worker --task T --n N --concurrency C [--batch B]
                                                 [--linger S] [--progress] [--samples]
    python q_NAME.py --redis URL --queue Q results --n N --concurrency C
    python q_NAME.py --redis URL --queue Q cancel --n N
    python q_NAME.py --redis URL --queue Q timeouts --n N
    python q_NAME.py --redis URL --queue Q produce --mode single|concurrent|bulk|trips --n N
                                                  [--client asyncio|sync|trio]
    python q_NAME.py --redis URL --queue Q workflow --shape chain|chord --n N

Every command prints JSON lines on stdout (libraries log to stderr):

- enqueue: ``{"event": "enqueued", "n", "seconds", "rate"}`` (only the sending is timed);
- dispatch: ``{"event": "dispatched", "n", "seconds"}``; each payload carries ``t``, the
  wall-clock time just before it was sent;
- results: ``C`` waiters, each dispatching ``echo`` tasks one after the other (``N`` in
  all) and awaiting each one's result with the queue's own result API; ``{"event":
  "results", "n", "concurrency", "p50_ms", "p99_ms", "max_ms", "seconds", "rate"}``, the
  round trip timed from just before the dispatch call to the value in the waiter;
- cancel: ``N`` times, one after the other: dispatch a ``hang`` task, wait until it runs,
  cancel it; ``{"event": "cancel", "i", "t_call", "t_return", "t_outcome", "outcome"}``
  per task (wall-clock times of the ``cancel()`` call, of its return, and of the cancelled
  outcome reaching a waiter), then ``{"event": "cancelled", "n"}``;
- produce (the clients scenario: dispatching from asyncio): ``N`` ``noop`` tasks of the
  same payload for every queue (:func:`client_payload`) sent one after the other
  (``single``), by :data:`SENDERS` coroutines at once each sending its share one after the
  other (``concurrent``: ``asyncio.gather``), or with the queue's bulk API (``bulk``);
  ``{"event": "produced", "mode", "n", "seconds", "rate", "how"}`` (only the sending is
  timed; ``how`` names the calls). ``trips``: ``N`` ``echo`` round trips one at a time,
  each dispatched and its result awaited with the queue's own API; the ``results`` line
  (with ``how``). ``--client`` is trunner's: its asyncio client (the default), its sync
  client, or its Trio client; every other queue produces from asyncio only;
- worker: ``{"event": "ready"}`` when it consumes, ``{"event": "done", ...}`` once the n-th
  task finished (timed from the first task's start to the n-th task's end, with the
  process's own CPU time over that window, and its peak RSS), then it stops gracefully and
  exits. With ``--linger S`` it idles S seconds first and reports ``{"event": "final"}`` with
  its RSS (after the linger, and after a ``gc.collect()``). With ``--progress`` it reports
  ``{"event": "progress", "count", "seconds", "rss_kb", "hwm_kb"}`` every n/10 tasks.
  With ``--samples`` the "done" line also carries ``latencies_ms``, every start - dispatch
  it measured (so the harness can pool several workers' samples). ``--loop asyncio|trio``
  chooses the event loop of a queue that runs on either (streaq); the others ignore it.
- workflow (the workflows scenario, bench/workflow_runs.py): one workflow dispatched with the
  queue's own API and its result awaited, into a worker started with ``--task count``
  (which runs ``noop`` and ``count``): ``chain``, ``N`` ``noop`` steps, the first given
  ``0``, each of the others given the result of the one before; ``chord``, ``N`` ``noop``
  children (given ``i``) side by side, then one ``count`` given the list of their results,
  which returns its length. ``{"event": "workflow", "shape", "n", "steps", "seconds",
  "dispatch_seconds", "result", "how"}``: ``seconds`` from just before the dispatch call
  to the result in the caller, ``dispatch_seconds`` the dispatch call alone, ``steps`` the
  bodies it ran (the worker's ``--n``). A workflow the queue refuses when dispatched,
  having written nothing, is ``{"event": "refused", "shape", "n", "error"}`` (the harness
  may try a shorter one); one that failed once dispatched, ``{"event": "failed", "shape",
  "n", "error"}``.

Task ``backlog`` (the lanes scenario) is a no-op that does not call the recorder: a
backlog of it keeps a worker busy without counting towards its ``--n``, which then counts
only the ``latency`` tasks dispatched behind it or beside it.

Task ``echo`` (the results scenario) returns ``payload["i"]`` and keeps its result; task
``noop_keep`` is ``noop`` keeping its result for 60 s (trunner: ``keep_result=60``); task
``hang`` (the cancel scenario) waits for ever, and when cancelled prints ``{"event":
"task_end", "i", "t", "started"}`` with the wall-clock time its cancellation was seen.

Task ``count`` (the workflows scenario) returns the length of its payload, a list: a
chord's callback, given its children's results.

Task ``roundtrip`` (the redis-body scenario): the body makes one pipelined round trip to
Redis with the queue's own client, ``SET <key> 1 NX PX 60000`` + ``INCR <counter>``, the
key and counter named by :func:`body_keys` (``roundtrip_auto``: trunner's variant sending
the two commands one after the other, pipelined across tasks by its Redis handle;
``roundtrip_bridged``: trunner's variant sending them through a redis-py asyncio client of
its own, bridged into Trio with trio-asyncio).

Sync bodies (bench/bodies.py): task ``io`` (sync-io) is a plain function that calls
``time.sleep(IO_SLEEP)`` between ``begin`` and ``end``, run where the queue runs sync
functions (its threads). Task ``cpu`` (and ``cpu_process``, trunner's ``run_in="process"``
variant) runs :func:`burn` (a fixed pure-Python loop of ~50 ms here) and reports itself
with :func:`cpu_body` (its bodies may run in other processes than the worker's, so they
write their own lines to file descriptor 1: the harness counts them). Task ``spin`` is
:func:`spin`: a pure-Python loop that runs ``SPIN_FOR`` seconds unless stopped, under the
queue's time limit of ``SPIN_LIMIT`` seconds. With ``--processes P`` the worker runs the
queue's own multi-process mode (P processes). The command ``timeouts`` is a waiter: for
each line read on its standard input it dispatches one ``spin`` task and awaits its
failure with the queue's own result API, then prints ``{"event": "timeout", "i",
"t_failed", "outcome"}`` (the wall-clock time the failure reached it).

A queue without some feature raises :class:`NotSupported`; the line is then
``{"event": "unsupported", "reason"}`` and the exit status 3.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

__all__ = [
    "CPU_LOOPS",
    "IO_SLEEP",
    "SPIN_FOR",
    "SPIN_LIMIT",
    "NotSupported",
    "Recorder",
    "Refused",
    "asyncio_only",
    "body_keys",
    "burn",
    "client_payload",
    "cpu_body",
    "emit",
    "emit_fd",
    "linger",
    "main",
    "make_payloads",
    "percentile",
    "proc_status",
    "round_trips",
    "send_all",
    "spin",
    "summarize_round_trips",
    "wait_go",
]


#: A worker that has not stopped this long after its last task is ended (reported).
STOP_TIMEOUT = 30.0


class NotSupported(Exception):
    """The queue has no way to do what was asked (e.g. no bulk enqueue API)."""


class Refused(Exception):
    """The queue refused a workflow when it was dispatched, before writing anything (e.g. a
    chain too long for it): the harness may try a shorter one."""


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def _watchdog(seconds: float) -> None:
    """End the process if the worker has not stopped ``seconds`` from now (daemon thread)."""

    def fire() -> None:
        emit({"event": "stop_timeout", "seconds": seconds})
        os._exit(4)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (the same rule as bench/delayed.py)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def proc_status(pid: int | str = "self") -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in kB, from /proc/<pid>/status."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0])
    return {"rss_kb": out.get("VmRSS", 0), "hwm_kb": out.get("VmHWM", 0)}


#: The tasks a queue may be asked to enqueue or run.
TASKS = [
    "noop",
    "noop_keep",
    "noop_limited",
    "backlog",
    "sleep",
    "latency",
    "echo",
    "hang",
    "roundtrip",
    "roundtrip_auto",
    "roundtrip_bridged",
    # bench/workflow_runs.py: a worker that runs the workflows' steps, noop and count
    "count",
    # bench/bodies.py: sync task bodies (scenarios 19-21)
    "io",
    "cpu",
    "cpu_process",
    "spin",
]
#: The roundtrip body's SET: only if absent, expiring after this many milliseconds.
BODY_PX = 60_000


def body_keys(queue: str) -> tuple[str, str]:
    """The roundtrip body's keys: ``(prefix, counter)``; task ``i`` sets ``f"{prefix}:{i}"``
    and increments ``counter``. Both contain the queue name (the harness deletes the keys
    of a run by it, and reads the counter once the worker is done)."""
    prefix = f"bench-body:{queue}"
    return prefix, f"{prefix}:count"


#: Task ``io``: the seconds of blocking I/O (``time.sleep``) each body does.
IO_SLEEP = 0.01
#: Task ``cpu``: the iterations of :func:`burn` (~50 ms of one core here, Python 3.11).
CPU_LOOPS = 1_150_000
#: Task ``spin``: its time limit in every queue (seconds), and how long it runs when
#: nothing stops it.
SPIN_LIMIT, SPIN_FOR = 1.0, 3.0


def emit_fd(record: dict[str, Any]) -> None:
    """One JSON line written straight to file descriptor 1, in one ``write`` (atomic on a
    pipe): for bodies that run in processes whose ``sys.stdout`` the queue redirects
    (celery's pool) or that share the pipe with other processes."""
    os.write(1, (json.dumps(record) + "\n").encode())


def burn(loops: int) -> int:
    """The CPU-bound body: the same fixed pure-Python loop in every queue."""
    total = 0
    for i in range(loops):
        total += i * i % 7
    return total


def cpu_body(payload: Any) -> None:
    """Task ``cpu``: :func:`burn` of ``CPU_LOOPS``, reported as ``{"event": "body", "i",
    "pid", "start", "end"}`` (wall-clock times) wherever it runs."""
    start = time.time()
    burn(CPU_LOOPS)
    emit_fd(
        {"event": "body", "i": payload["i"], "pid": os.getpid(), "start": start, "end": time.time()}
    )


def spin(payload: Any) -> None:
    """Task ``spin``: a pure-Python loop for ``SPIN_FOR`` seconds, unless the queue stops it.
    Reports ``{"event": "spin_start", "i", "pid", "t"}``, and ``{"event": "spin_stop", "i",
    "t", "raised"}`` when the loop ends (``raised``: an exception stopped it; a process
    killed reports nothing: the harness watches its pid)."""
    start = time.time()
    emit_fd({"event": "spin_start", "i": payload["i"], "pid": os.getpid(), "t": start})
    raised: str | None = None
    try:
        while time.time() < start + SPIN_FOR:
            burn(1000)
    except BaseException as exc:
        raised = type(exc).__name__
        raise
    finally:
        emit_fd({"event": "spin_stop", "i": payload["i"], "t": time.time(), "raised": raised})


def wait_go() -> bool:
    """The ``timeouts`` command's pacing: block until the harness writes a line on standard
    input (dispatch the next attempt); False at its end."""
    return bool(sys.stdin.readline())


#: The ``produce`` command's ``concurrent`` mode: this many coroutines send at once.
SENDERS = 100


def client_payload(i: int) -> dict[str, Any]:
    """The payload of the ``produce`` command, the same for every queue: a small dict that
    every serializer takes (JSON, pickle)."""
    return {"i": i, "user": "user-4242", "path": f"images/{i}.png", "width": 128, "tags": ["png"]}


def make_payloads(task: str, n: int, sleep: float) -> list[dict[str, Any]]:
    if task == "sleep":
        return [{"i": i, "s": sleep} for i in range(n)]
    return [{"i": i} for i in range(n)]


class Recorder:
    """What every task body calls: ``begin(payload)`` when it starts, ``end()`` when done.

    The same few lines run in every queue's body, so the bodies cost the same everywhere.
    ``on_complete`` is called (from the thread of the n-th ``end``) after the result is out.
    """

    def __init__(
        self, n: int, threadsafe: bool = False, progress: bool = False, samples: bool = False
    ) -> None:
        self.n = n
        self.count = 0
        #: With ``progress``, a ``{"event": "progress"}`` line (with the RSS) every n/10 tasks.
        self.step = max(1, n // 10) if progress else 0
        self.first: tuple[float, float] | None = None
        self.latencies: list[float] = []
        self.complete = False
        self.on_complete: Callable[[], object] = lambda: None
        self._lock: Any = threading.Lock() if threadsafe else None
        #: Seconds the worker idles after the n-th task (``--linger``): its stop waits them.
        self.linger = 0.0
        #: Whether the "done" line carries every latency (``--samples``).
        self.samples = samples

    def make_threadsafe(self) -> None:
        """Count ``end()`` under a lock: the bodies run in several threads."""
        if self._lock is None:
            self._lock = threading.Lock()

    def begin(self, payload: Any) -> None:
        if self.first is None:
            self.first = (time.perf_counter(), time.process_time())
        if isinstance(payload, dict) and "t" in payload:
            self.latencies.append(time.time() - payload["t"])

    def end(self) -> None:
        if self._lock is not None:
            with self._lock:
                self.count += 1
                last = self.count == self.n
        else:
            self.count += 1
            last = self.count == self.n
        if last:
            self._finish()
        elif self.step and self.count % self.step == 0:
            assert self.first is not None
            seconds = round(time.perf_counter() - self.first[0], 3)
            emit({"event": "progress", "count": self.count, "seconds": seconds, **proc_status()})

    def _finish(self) -> None:
        end_perf, end_cpu = time.perf_counter(), time.process_time()
        assert self.first is not None
        seconds = end_perf - self.first[0]
        cpu = end_cpu - self.first[1]
        record: dict[str, Any] = {
            "event": "done",
            "n": self.n,
            "seconds": round(seconds, 4),
            "rate": round(self.n / seconds, 1) if seconds > 0 else None,
            "cpu_seconds": round(cpu, 4),
            "cpu_ms_per_task": round(cpu * 1000 / self.n, 4),
            **proc_status(),
        }
        if self.latencies:
            ms = [x * 1000 for x in self.latencies]
            record.update(
                p50_ms=round(percentile(ms, 50), 3),
                p99_ms=round(percentile(ms, 99), 3),
                max_ms=round(max(ms), 3),
            )
            if self.samples:
                record["latencies_ms"] = [round(x, 3) for x in ms]
        emit(record)
        self.complete = True
        _watchdog(STOP_TIMEOUT + self.linger)
        self.on_complete()

    def final(self) -> None:
        """After the linger: RSS of the idle worker, then again after a full collection."""
        before = proc_status()
        gc.collect()
        after = proc_status()
        emit(
            {
                "event": "final",
                "rss_kb": before["rss_kb"],
                "rss_after_gc_kb": after["rss_kb"],
                "hwm_kb": after["hwm_kb"],
            }
        )


def summarize_round_trips(seconds: list[float], concurrency: int, wall: float) -> dict[str, Any]:
    """The ``results`` line: percentiles of the round trips, and their rate."""
    ms = [x * 1000 for x in seconds]
    return {
        "event": "results",
        "n": len(ms),
        "concurrency": concurrency,
        "p50_ms": round(percentile(ms, 50), 3),
        "p99_ms": round(percentile(ms, 99), 3),
        "max_ms": round(max(ms), 3),
        "seconds": round(wall, 3),
        "rate": round(len(ms) / wall, 1),
    }


Enqueue = Callable[[str, str, str, list[dict[str, Any]], str], float]
Dispatch = Callable[[str, str, int, float, Callable[[], dict[str, Any]]], None]
Work = Callable[
    [str, str, argparse.Namespace, Recorder, Callable[[], None]], "dict[str, Any] | None"
]
#: ``(url, queue, n, concurrency)``: the round trips' durations, and the wall time of all.
Results = Callable[[str, str, int, int], "tuple[list[float], float]"]
#: ``(url, queue, n)``: dispatch, wait until running, cancel; emits one line per task.
Cancel = Callable[[str, str, int], None]
#: ``(url, queue, n)``: for each line on stdin (:func:`wait_go`), dispatch ``spin`` and
#: await its failure; emits one ``timeout`` line per task.
Timeouts = Callable[[str, str, int], None]
#: ``(url, queue, mode, n, client)``: what the ``produce`` command reports, i.e. for the
#: enqueue modes ``{"seconds", "how"}``, for ``trips`` ``{"round_trips", "seconds", "how"}``.
Produce = Callable[[str, str, str, int, str], dict[str, Any]]
#: ``(url, queue, shape, n)``: dispatch one workflow and await its result; ``{"steps",
#: "seconds", "dispatch_seconds", "result", "how"}`` (raises :class:`Refused`).
Workflow = Callable[[str, str, str, int], dict[str, Any]]


async def linger(
    args: argparse.Namespace, rec: Recorder, sleep: Callable[[float], Awaitable[object]]
) -> None:
    """With ``--linger S``: idle S seconds, the worker still running, then report "final"."""
    if args.linger:
        await sleep(args.linger)
        rec.final()


async def paced(n: int, interval: float, send: Callable[[], Awaitable[object]]) -> None:
    """For asyncio queues: await ``send()`` ``n`` times, the i-th at ``start + i * interval``."""
    import asyncio  # noqa: PLC0415 - only the asyncio queues load it (it counts in RSS)

    loop = asyncio.get_running_loop()
    start = loop.time()
    for i in range(n):
        await asyncio.sleep(max(0.0, start + i * interval - loop.time()))
        await send()


async def send_all(mode: str, n: int, send: Callable[[dict[str, Any]], Awaitable[object]]) -> float:
    """For asyncio queues, the ``produce`` command's ``single`` and ``concurrent`` modes:
    await ``send(payload)`` for ``n`` payloads one after the other, or from
    :data:`SENDERS` coroutines at once (``asyncio.gather``), each sending its share one
    after the other. Returns the seconds the sending took."""
    import asyncio  # noqa: PLC0415 - only the asyncio queues load it (it counts in RSS)

    payloads = [client_payload(i) for i in range(n)]

    async def sender(first: int, step: int) -> None:
        for payload in payloads[first::step]:
            await send(payload)

    begin = time.perf_counter()
    if mode == "single":
        await sender(0, 1)
    elif mode == "concurrent":
        await asyncio.gather(*(sender(k, SENDERS) for k in range(SENDERS)))
    else:
        raise ValueError(mode)
    return time.perf_counter() - begin


async def round_trips(
    n: int, trip: Callable[[dict[str, Any]], Awaitable[object]]
) -> dict[str, Any]:
    """The ``produce`` command's ``trips`` mode: ``n`` times, ``await trip(payload)`` (which
    dispatches ``echo`` and awaits its result), one after the other, each timed; the
    payload carries ``t`` (the worker's pickup latency) and ``trip`` must return its ``i``."""
    seconds = []
    begin = time.perf_counter()
    for i in range(n):
        start = time.perf_counter()
        value = await trip({**client_payload(i), "t": time.time()})
        seconds.append(time.perf_counter() - start)
        if value != i:
            raise AssertionError(f"round trip {i} returned {value!r}")
    return {"round_trips": seconds, "seconds": time.perf_counter() - begin}


def asyncio_only(client: str, name: str) -> None:
    """A peer produces from asyncio only (``--client`` is trunner's)."""
    if client != "asyncio":
        raise NotSupported(f"{name} is measured from asyncio only")


def main(
    enqueue: Enqueue,
    dispatch: Dispatch,
    work: Work,
    *,
    threadsafe: bool = False,
    results: Results | None = None,
    cancel: Cancel | None = None,
    timeouts: Timeouts | None = None,
    produce: Produce | None = None,
    workflow: Workflow | None = None,
) -> None:
    """Parse the command line and run one command of one queue implementation.

    ``enqueue(url, queue, task, payloads, mode)`` returns the seconds the sending took;
    ``dispatch(url, queue, n, interval, make_payload)`` sends ``n`` latency tasks, the i-th
    at ``start + i * interval``, building each payload just before it is sent;
    ``work(url, queue, args, recorder, ready)`` runs a worker until ``recorder`` completes,
    stops it gracefully, and may return a dict reported as ``{"event": "stopped"}``.
    ``results``, ``cancel``, ``timeouts``, ``produce`` and ``workflow``, where the queue
    has them, run those commands (see the module docs).
    """
    args = parse_args()
    try:
        if args.command == "results":
            if results is None:
                raise NotSupported("no result API in this benchmark's queue")
            seconds, wall = results(args.redis, args.queue, args.n, args.concurrency)
            emit(summarize_round_trips(seconds, args.concurrency, wall))
        elif args.command == "produce":
            if produce is None:
                raise NotSupported("the clients scenario is not written for this queue")
            report = produce(args.redis, args.queue, args.mode, args.n, args.client)
            emit(produced(args.mode, args.n, args.client, report))
        elif args.command == "cancel":
            if cancel is None:
                raise NotSupported("no cancellation of a running task in this benchmark")
            cancel(args.redis, args.queue, args.n)
            emit({"event": "cancelled", "n": args.n})
        elif args.command == "timeouts":
            if timeouts is None:
                raise NotSupported("no time limit (or no result API) in this benchmark's queue")
            timeouts(args.redis, args.queue, args.n)
        elif args.command == "workflow":
            if workflow is None:
                raise NotSupported("the workflows scenario is not written for this queue")
            run_workflow(workflow, args)
        else:
            run_command(args, enqueue, dispatch, work, threadsafe=threadsafe)
    except NotSupported as exc:
        emit({"event": "unsupported", "reason": str(exc)})
        sys.exit(3)


def run_workflow(workflow: Workflow, args: argparse.Namespace) -> None:
    """The ``workflow`` command: its line, ``refused`` or ``failed`` (see the module docs)."""
    head = {"shape": args.shape, "n": args.n}
    try:
        report = workflow(args.redis, args.queue, args.shape, args.n)
    except Exception as exc:  # refused, or failed (or its wait ran out): say which
        leaves = list(leaf_exceptions(exc))
        refused = [e for e in leaves if isinstance(e, Refused)]
        if refused:
            emit({"event": "refused", **head, "error": str(refused[0])})
            return
        error = "; ".join(f"{type(e).__name__}: {e}" for e in leaves)
        emit({"event": "failed", **head, "error": error[:500]})
        raise
    emit({"event": "workflow", **head, **report})


def leaf_exceptions(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, or the exceptions inside it if it is a group (a nursery's)."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaf_exceptions(inner)
    else:
        yield exc


def produced(mode: str, n: int, client: str, report: dict[str, Any]) -> dict[str, Any]:
    """The ``produce`` command's line."""
    extra = {"client": client, "how": report["how"]}
    if mode == "trips":
        return summarize_round_trips(report["round_trips"], 1, report["seconds"]) | extra
    if mode == "concurrent" and "senders" not in extra["how"]:
        extra["how"] += f", {SENDERS} senders at once (asyncio.gather)"
    seconds = report["seconds"]
    line = {"event": "produced", "mode": mode, "n": n, "seconds": round(seconds, 4)}
    return line | {"rate": round(n / seconds, 1)} | extra


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis", required=True)
    parser.add_argument("--queue", required=True)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("enqueue")
    p.add_argument("--task", default="noop", choices=TASKS)
    p.add_argument("--mode", default="single", choices=["single", "bulk"])
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--sleep", type=float, default=0.05)
    p = sub.add_parser("dispatch")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--interval", type=float, default=0.01)
    p = sub.add_parser("worker")
    p.add_argument("--task", default="noop", choices=TASKS)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--concurrency", type=int, default=100)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--linger", type=float, default=0.0)
    p.add_argument("--progress", action="store_true")
    p.add_argument("--samples", action="store_true")
    # trunner only (scenario 15): this many no-op middleware around each attempt; and
    # trunner's OpenTelemetry middleware, on the SDK with exporters that drop everything.
    p.add_argument("--middleware", type=int, default=0)
    p.add_argument("--otel", action="store_true")
    # trunner only (scenario 17): the priority lanes the worker reads, "name:weight,..."
    # highest first (default: none, the one default lane); and whether strictly.
    p.add_argument("--lanes", default="")
    p.add_argument("--strict-lanes", action="store_true")
    # bench/bodies.py: the queue's own multi-process mode, this many processes.
    p.add_argument("--processes", type=int, default=0)
    # streaq only (the clients scenario): the event loop its worker runs on.
    p.add_argument("--loop", default="", choices=["", "asyncio", "trio"])
    p = sub.add_parser("results")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--concurrency", type=int, default=1)
    p = sub.add_parser("cancel")
    p.add_argument("--n", type=int, required=True)
    p = sub.add_parser("timeouts")
    p.add_argument("--n", type=int, required=True)
    p = sub.add_parser("produce")
    p.add_argument("--mode", required=True, choices=["single", "concurrent", "bulk", "trips"])
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--client", default="asyncio", choices=["asyncio", "sync", "trio"])
    p = sub.add_parser("workflow")
    p.add_argument("--shape", required=True, choices=["chain", "chord"])
    p.add_argument("--n", type=int, required=True)
    return parser.parse_args()


def run_command(
    args: argparse.Namespace, enqueue: Enqueue, dispatch: Dispatch, work: Work, *, threadsafe: bool
) -> None:
    """The commands every queue has: enqueue, dispatch, worker."""
    if args.command == "enqueue":
        payloads = make_payloads(args.task, args.n, args.sleep)
        seconds = enqueue(args.redis, args.queue, args.task, payloads, args.mode)
        emit(
            {
                "event": "enqueued",
                "mode": args.mode,
                "n": args.n,
                "seconds": round(seconds, 4),
                "rate": round(args.n / seconds, 1),
            }
        )
    elif args.command == "dispatch":
        begin = time.perf_counter()
        dispatch(args.redis, args.queue, args.n, args.interval, lambda: {"t": time.time()})
        emit({"event": "dispatched", "n": args.n, "seconds": time.perf_counter() - begin})
    else:
        recorder = Recorder(
            args.n, threadsafe=threadsafe, progress=args.progress, samples=args.samples
        )
        recorder.linger = args.linger
        info = work(args.redis, args.queue, args, recorder, lambda: emit({"event": "ready"}))
        emit({"event": "stopped", **(info or {})})
