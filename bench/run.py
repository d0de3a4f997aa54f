"""trunner's benchmark suite: throughput, latency, precision, failover and memory.

    python bench/run.py [SCENARIO ...] [--runs 3] [--redis URL] [--peers] [--scale F]

Scenarios (default ``all``): ``throughput`` (1), ``latency`` (2), ``sleep`` (3), ``memory``
(4), ``delayed`` (5), ``failover`` (6), ``ceiling`` (7: the bare redis-py loop alone; it
also runs beside trunner in 1, 2 and 8, so every ratio is measured in the same run),
``redis-body`` (8: a backlog of tasks whose body makes one pipelined Redis round trip with
the queue's own client); task handles: ``results`` (9: dispatch and await the result, one
at a time and with 50 waiters), ``keep-result`` (10: scenario 1's drain with
``keep_result`` off and on), ``cancel`` (11: a running task cancelled from another
process), ``result-memory`` (12: 100 000 results kept 60 s); ``pause`` (13: how fast a
pause stops three worker processes' fetching); ``dashboard`` (14: page load and
live-update latency of the dashboard on a group of 100 000 queued and 100 000 dead
entries; bench/dashboard.py); ``middleware`` (15: scenario 1's drain with no middleware,
with one no-op middleware, and with the OpenTelemetry middleware); ``limits`` (16:
scenario 1's drain of a task without limits and of one with ``concurrency=100`` (the
worker's capacity: every message is admitted by one script, and its slot released with
its acknowledgement), in the same measurement); ``lanes`` (17: pickup latency of urgent
tasks dispatched one at a time while a worker drains a 100 000-task backlog, with strict
lanes, with weighted lanes, and with no lanes); ``clients`` (18: dispatching from asyncio
with ``trunner.aio.Client`` one at a time, from 100 concurrent senders and in bulk, and
result round trips one at a time, beside the peers on asyncio; the same with
``trunner.sync.Client`` and with the Trio client); task bodies that are not ``async``
(bench/bodies.py): ``sync-io`` (19: 10 000 sync tasks blocking 10 ms in ``time.sleep``, in
32 threads of one worker process), ``cpu`` (20: 400 tasks of a ~50 ms pure-Python loop on
both cores: two ``trunner worker`` processes, and one with ``run_in="process"`` tasks,
beside a plain process pool), ``cpu-timeout`` (21: a pure-Python loop past its 1 s time
limit: deadline to the failure seen by a waiter, and to the core free); ``workflows`` (22,
bench/workflow_runs.py: a chain of 1 000 no-op steps, and a chord of 10 000 no-op children into
one callback, each dispatched as one and its result awaited). Each scenario runs
``--runs`` times, interleaving the queues run by run, and the median is reported.
``--peers`` adds arq, saq, streaq (on Trio; on asyncio in 18), taskiq (Redis stream
broker) and dramatiq to scenarios 1-4 and 8 (arq, saq and streaq to 9; arq, saq, streaq and
taskiq to 18; saq, taskiq, streaq, celery and dramatiq to 19; celery, dramatiq and taskiq to
20 and 21; celery and streaq to 22; celery runs only 19-22), each installed into its own
virtual environment under bench/.peers/ and using its own Redis database.

Without ``--redis`` a private redis-server is started on a free loopback port (no
persistence) and stopped at the end. Every key created is deleted. Prints one JSON line
per measurement, then a summary table; both are also written to bench/results/<time>/.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import redis
import trio

import trunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bodies  # bench/ is not a package: its folder is on the path
import workflow_runs
from bodies import BODY_ONLY_PEERS, BODY_SCENARIOS, BodyError
from dashboard import dashboard
from workflow_runs import WORKFLOW_SCENARIOS, WorkflowError

HERE = Path(__file__).resolve().parent
QUEUES = HERE / "queues"
PEERS_DIR = HERE / ".peers"
SCENARIOS = [
    "throughput",
    "latency",
    "sleep",
    "memory",
    "delayed",
    "failover",
    "ceiling",
    "redis-body",
    "results",
    "keep-result",
    "cancel",
    "result-memory",
    "pause",
    "dashboard",
    "middleware",
    "limits",
    "lanes",
    "clients",
    *BODY_SCENARIOS,
    *WORKFLOW_SCENARIOS,
]
#: The peers scenario 9 (results) runs beside trunner (issue 19 names them).
RESULT_PEERS = {"arq", "saq", "streaq"}
#: The peers scenario 18 (clients) runs beside trunner, on asyncio (the issue names them).
CLIENT_PEERS = {"arq", "saq", "streaq", "taskiq"}

#: Each peer: the packages installed into its virtual environment, and its Redis database.
PEERS: dict[str, tuple[list[str], int]] = {
    "arq": (["arq==0.28.0"], 1),
    # saq 0.26.4 imports typing_extensions without declaring it.
    "saq": (["saq[hiredis]==0.26.4", "typing_extensions"], 2),
    "streaq": (["streaq==7.2.0", "trio"], 3),
    "taskiq": (["taskiq==0.13.0", "taskiq-redis==1.2.4", "hiredis"], 4),
    "dramatiq": (["dramatiq[redis]==2.2.1", "hiredis"], 5),
    **BODY_ONLY_PEERS,  # celery: scenarios 19-22 only
}

# -- small helpers ---------------------------------------------------------------------------


class BenchError(Exception):
    """One measurement failed; the others go on."""


class Unsupported(BenchError):
    """The queue has no such feature (e.g. no bulk enqueue)."""


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def proc_status(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0])
    return {"rss_kb": out.get("VmRSS", 0), "hwm_kb": out.get("VmHWM", 0)}


def with_db(url: str, db: int) -> str:
    base, _, last = url.rstrip("/").rpartition("/")
    if base.endswith("/") or not last.isdigit():  # no database in the URL
        return f"{url.rstrip('/')}/{db}"
    return f"{base}/{db}"


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


async def wait_quiet(max_wait: float, threshold: float = 0.2) -> float:
    """Before a measurement: wait (up to ``max_wait`` s) until the machine's CPUs are less
    than ``threshold`` busy over one second; return the busy fraction last seen."""
    deadline = trio.current_time() + max_wait
    while True:
        busy0, total0 = cpu_times()
        await trio.sleep(1.0)
        busy1, total1 = cpu_times()
        busy = (busy1 - busy0) / max(1, total1 - total0)
        if busy < threshold or trio.current_time() >= deadline:
            return round(busy, 3)


def source_digest() -> str:
    """A digest of trunner's source files: the code measured (others may be editing it)."""
    digest = hashlib.sha256()
    root = Path(trunner.__file__).resolve().parent
    for path in sorted(root.rglob("*")):
        if path.suffix in {".py", ".lua"}:
            digest.update(str(path.relative_to(root)).encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def machine() -> dict[str, Any]:
    model = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    rev = subprocess.run(
        ["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(HERE.parent), "status", "--porcelain", "--", "trunner"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "trio": trio.__version__,
        "redis_py": redis.__version__,
        "trunner": trunner.__version__,
        "git": rev + ("+uncommitted changes in trunner/" if dirty else ""),
        "source_digest": source_digest(),
        "load_at_start": loadavg(),
    }


class Output:
    """JSON lines to stdout and to results.jsonl; everything else to stderr."""

    def __init__(self, directory: Path, quiet_wait: float = 0.0) -> None:
        self.directory = directory
        self.quiet_wait = quiet_wait
        #: How busy the CPUs were (other processes) just before each measurement.
        self.busy: list[float] = []
        #: (scenario, impl) -> why a queue could not run that scenario.
        self.unsupported: dict[tuple[str, str], str] = {}
        #: (scenario, impl) -> the error of its last failed measurement.
        self.failed: dict[tuple[str, str], str] = {}
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "logs").mkdir(exist_ok=True)
        self._jsonl = open(directory / "results.jsonl", "a")  # noqa: SIM115

    def record(self, **fields: Any) -> None:
        line = json.dumps(fields)
        print(line, flush=True)
        self._jsonl.write(line + "\n")
        self._jsonl.flush()

    def note(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def log_path(self, name: str) -> Path:
        return self.directory / "logs" / f"{name}.log"

    def close(self) -> None:
        self._jsonl.close()


# -- Redis -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def redis_server(out: Output) -> Iterator[str]:
    """A private redis-server on a free loopback port, no persistence; stopped at the end."""
    port = free_port()
    log = open(out.log_path("redis-server"), "wb")  # noqa: SIM115
    process = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--databases",
            "16",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        client = redis.Redis(port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.05)
        client.close()
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def redis_version(url: str) -> str:
    client = redis.Redis.from_url(url)
    try:
        return str(client.info("server")["redis_version"])
    finally:
        client.close()


def delete_matching(url: str, text: str) -> int:
    """Delete every key whose name contains ``text`` (a unique run id)."""
    client = redis.Redis.from_url(url)
    deleted = 0
    try:
        batch = []
        for key in client.scan_iter(match=f"*{text}*", count=1000):
            batch.append(key)
            if len(batch) >= 500:
                deleted += client.delete(*batch)
                batch = []
        if batch:
            deleted += client.delete(*batch)
    finally:
        client.close()
    return deleted


def flush_db(url: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()


def get_int(url: str, key: str) -> int | None:
    client = redis.Redis.from_url(url)
    try:
        value = client.get(key)
        return None if value is None else int(value)
    finally:
        client.close()


def db_size(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return int(client.dbsize())
    finally:
        client.close()


def count_matching(url: str, text: str) -> int:
    """How many keys contain ``text``."""
    client = redis.Redis.from_url(url)
    try:
        return sum(1 for _ in client.scan_iter(match=f"*{text}*", count=1000))
    finally:
        client.close()


def sample_usage(url: str, text: str, count: int = 200) -> int | None:
    """Median ``MEMORY USAGE`` of up to ``count`` keys containing ``text``."""
    client = redis.Redis.from_url(url)
    try:
        sizes = []
        for key in client.scan_iter(match=f"*{text}*", count=1000):
            sizes.append(int(client.memory_usage(key, samples=0) or 0))
            if len(sizes) >= count:
                break
        return int(statistics.median(sizes)) if sizes else None
    finally:
        client.close()


def used_memory(url: str) -> int:
    """Redis's ``used_memory`` (INFO memory), in bytes."""
    client = redis.Redis.from_url(url)
    try:
        return int(client.info("memory")["used_memory"])
    finally:
        client.close()


# -- the queues under test -------------------------------------------------------------------


@dataclass
class Queue:
    """One implementation of the protocol in bench/queues/_driver.py."""

    name: str
    python: str
    url: str
    #: Keys are told apart by a unique queue name (trunner, ceiling), or the queue owns its
    #: database (peers), which is flushed.
    owns_db: bool = False
    log: Path = field(default=Path("/dev/null"))

    def command(self, queue: str, *args: str) -> list[str]:
        script = QUEUES / f"q_{self.name}.py"
        return [self.python, str(script), "--redis", self.url, "--queue", queue, *args]

    async def cleanup(self, queue: str) -> None:
        if self.owns_db:
            await trio.to_thread.run_sync(flush_db, self.url)
        else:
            await trio.to_thread.run_sync(delete_matching, self.url, queue)


def parse_events(data: bytes) -> list[dict[str, Any]]:
    events = []
    for line in data.decode(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict) and "event" in event:
                events.append(event)
    return events


def open_log(path: Path, command: list[str]) -> BinaryIO:
    """The log a subprocess's stderr is appended to, headed by its command line."""
    log = open(path, "ab")  # noqa: SIM115
    log.write(f"\n$ {' '.join(command)}\n".encode())
    log.flush()
    return log


async def run_once(q: Queue, queue: str, *args: str, limit: float = 900) -> dict[str, Any]:
    """Run one enqueue/dispatch command; return its last event."""
    return (await run_events(q, queue, *args, limit=limit))[-1]


async def run_events(q: Queue, queue: str, *args: str, limit: float = 900) -> list[dict[str, Any]]:
    """Run one command that is not a worker; return every event it printed."""
    with open_log(q.log, q.command(queue, *args)) as log:
        with trio.move_on_after(limit) as scope:
            result = await trio.run_process(
                q.command(queue, *args), capture_stdout=True, stderr=log, check=False
            )
    if scope.cancelled_caught:
        raise BenchError(f"{q.name} {args[0]}: no result within {limit} s")
    events = parse_events(result.stdout)
    if events and events[-1]["event"] == "unsupported":
        raise Unsupported(events[-1]["reason"])
    if result.returncode != 0 or not events:
        raise BenchError(f"{q.name} {args[0]} failed (status {result.returncode}); see {q.log}")
    return events


class WorkerProcess:
    """A worker subprocess, read event by event."""

    def __init__(self, q: Queue, process: trio.Process) -> None:
        self.q = q
        self.process = process
        self._buffer = b""
        #: Every event read so far.
        self.seen: list[dict[str, Any]] = []

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    async def event(self, *wanted: str) -> dict[str, Any]:
        assert self.process.stdout is not None
        while True:
            while b"\n" not in self._buffer:
                chunk = await self.process.stdout.receive_some(65536)
                if not chunk:
                    status = await self.process.wait()
                    raise BenchError(
                        f"{self.q.name} worker exited (status {status}) before "
                        f"{'/'.join(wanted)}; see {self.q.log}"
                    )
                self._buffer += chunk
            line, self._buffer = self._buffer.split(b"\n", 1)
            for event in parse_events(line):
                self.seen.append(event)
                if event["event"] in wanted:
                    return event
                if event["event"] == "unsupported":
                    raise Unsupported(event["reason"])
                if event["event"] == "stop_timeout":
                    raise BenchError(f"{self.q.name} worker did not stop; it was ended")


@contextlib.asynccontextmanager
async def worker_process(q: Queue, queue: str, *args: str) -> AsyncIterator[WorkerProcess]:
    with open_log(q.log, q.command(queue, "worker", *args)) as log:
        process = await trio.lowlevel.open_process(
            q.command(queue, "worker", *args), stdout=subprocess.PIPE, stderr=log
        )
    worker = WorkerProcess(q, process)
    try:
        yield worker
        with trio.move_on_after(60):
            await worker.event("stopped")
            await process.wait()
    finally:
        await reap(process)


async def reap(process: trio.Process) -> None:
    """Kill ``process`` if it still runs, wait for it, close its pipes; never cancelled."""
    with trio.CancelScope(shield=True):
        if process.returncode is None:
            process.kill()
            await process.wait()
        for pipe in (process.stdout, process.stdin):
            if pipe is not None:
                await pipe.aclose()


# -- scenarios 1-3 (and 7): every queue ------------------------------------------------------


@dataclass
class Settings:
    runs: int
    scale: float
    concurrency: int = 100
    batch: int = 100

    def worker_args(self, task: str, n: int) -> list[str]:
        return (
            f"--task {task} --n {n} --concurrency {self.concurrency} --batch {self.batch}".split()
        )

    def n(self, count: int) -> int:
        return max(10, round(count * self.scale))


async def throughput(q: Queue, s: Settings) -> dict[str, Any]:
    """Scenario 1: enqueue one by one, and in bulk; then one worker drains the backlog."""
    n = s.n(20_000)
    queue = f"{q.name}-tp-{uuid.uuid4().hex[:8]}"
    result: dict[str, Any] = {"n": n}

    async def enqueue(mode: str) -> float:
        event = await run_once(q, queue, "enqueue", "--task", "noop", "--mode", mode, "--n", str(n))
        return float(event["rate"])

    try:
        try:  # refused before anything is written when the queue has no bulk API
            result["enqueue_bulk_rate"] = await enqueue("bulk")
            await q.cleanup(queue)
            bulk = True
        except Unsupported as exc:
            result["enqueue_bulk"] = f"unsupported: {exc}"
            bulk = False
        result["enqueue_single_rate"] = await enqueue("single")
        if bulk:  # the worker drains a backlog enqueued in bulk (the same entries)
            await q.cleanup(queue)
            await enqueue("bulk")
        async with worker_process(q, queue, *s.worker_args("noop", n)) as worker:
            with trio.fail_after(900):
                done = await worker.event("done")
        result.update(processing(done))
    finally:
        await q.cleanup(queue)
    return result


def processing(done: dict[str, Any]) -> dict[str, Any]:
    """The figures of a worker's "done" event: rate, time, CPU per task, peak RSS."""
    return {
        "process_rate": done["rate"],
        "process_seconds": done["seconds"],
        "cpu_ms_per_task": done["cpu_ms_per_task"],
        "hwm_mb": round(done["hwm_kb"] / 1024, 1),
    }


async def latency(q: Queue, s: Settings) -> dict[str, Any]:
    """Scenario 2: an idle worker; tasks dispatched 10 ms apart; start - dispatch."""
    n = s.n(500)
    queue = f"{q.name}-lat-{uuid.uuid4().hex[:8]}"
    try:
        async with worker_process(q, queue, *s.worker_args("latency", n)) as worker:
            with trio.fail_after(60):
                await worker.event("ready")
            await trio.sleep(1.0)  # idle: blocked in its read, or between polls
            await run_once(q, queue, "dispatch", "--n", str(n), "--interval", "0.01")
            with trio.fail_after(60):
                done = await worker.event("done")
    finally:
        await q.cleanup(queue)
    return {
        "n": n,
        "p50_ms": done["p50_ms"],
        "p99_ms": done["p99_ms"],
        "max_ms": done["max_ms"],
        "cpu_ms_per_task": done["cpu_ms_per_task"],  # at 100 tasks/s, one per read
    }


async def sleep_bound(q: Queue, s: Settings) -> dict[str, Any]:
    """Scenario 3: 2 000 tasks of ``sleep(0.05)`` at 100 workers; ideal 1.0 s."""
    n = s.n(2000)
    ideal = n * 0.05 / s.concurrency
    queue = f"{q.name}-sleep-{uuid.uuid4().hex[:8]}"
    try:
        try:
            await run_once(q, queue, *f"enqueue --task sleep --mode bulk --n {n}".split())
        except Unsupported:
            await q.cleanup(queue)
            await run_once(q, queue, *f"enqueue --task sleep --mode single --n {n}".split())
        async with worker_process(q, queue, *s.worker_args("sleep", n)) as worker:
            with trio.fail_after(300):
                done = await worker.event("done")
    finally:
        await q.cleanup(queue)
    return {
        "n": n,
        "wall_s": done["seconds"],
        "ideal_s": ideal,
        "over_ideal": round(done["seconds"] / ideal, 3),
        "cpu_ms_per_task": done["cpu_ms_per_task"],
    }


# -- scenario 8: a task body making one Redis round trip -----------------------------------


#: What every roundtrip body names its keys by (bench/queues/_driver.py: ``body_keys``).
def body_counter(queue: str) -> str:
    return f"bench-body:{queue}:count"


async def redis_body(q: Queue, s: Settings, task: str = "roundtrip") -> dict[str, Any]:
    """Scenario 8: 20 000 tasks, each body one pipelined round trip (SET NX PX + INCR) with
    the queue's own Redis client, enqueued the fastest way the queue has (not timed), then
    drained by one worker process with 100 workers."""
    n = s.n(20_000)
    queue = f"{q.name}-body-{uuid.uuid4().hex[:8]}"
    result: dict[str, Any] = {"n": n, "task": task}
    try:
        try:
            await run_once(q, queue, *f"enqueue --task {task} --mode bulk --n {n}".split())
            result["enqueued"] = "bulk"
        except Unsupported:
            await q.cleanup(queue)
            await run_once(q, queue, *f"enqueue --task {task} --mode single --n {n}".split())
            result["enqueued"] = "one by one"
        async with worker_process(q, queue, *s.worker_args(task, n)) as worker:
            with trio.fail_after(900):
                done = await worker.event("done")
        # Every body ran its round trip: the counter they incremented.
        count = await trio.to_thread.run_sync(get_int, q.url, body_counter(queue))
        if count is None or count < n:
            raise BenchError(f"{q.name}: the bodies' counter is {count} after {n} tasks")
        stopped = next((e for e in worker.seen if e["event"] == "stopped"), {})
        if "redis_batches" in stopped:  # trunner: round trips of the automatic pipelining
            result.update(
                handle_batches=stopped["redis_batches"], handle_commands=stopped["redis_commands"]
            )
        result.update(counter=count, **processing(done))
    finally:
        await q.cleanup(queue)
    return result


# -- scenarios 9-12: task handles (results, keep_result, cancel, memory of results) ---------

#: Scenario 9: round trips one at a time (arq: fewer, each takes its 0.5 s polls).
SEQUENTIAL = 300
SEQUENTIAL_BY_QUEUE = {"arq": 60}
#: Scenario 9: concurrent waiters, and round trips in all.
WAITERS, CONCURRENT = 50, 500


async def handle_results(q: Queue, s: Settings) -> dict[str, Any]:
    """Scenario 9: an idle worker (``echo`` tasks, keeping their results); a client process
    dispatches and awaits each result with the queue's own API, one at a time, then with
    50 concurrent waiters. Each round trip is timed from just before the dispatch call to
    the value in the waiter."""
    sequential = s.n(SEQUENTIAL_BY_QUEUE.get(q.name, SEQUENTIAL))
    concurrent = s.n(CONCURRENT)
    queue = f"{q.name}-res-{uuid.uuid4().hex[:8]}"
    try:
        n = sequential + concurrent
        async with worker_process(q, queue, *s.worker_args("echo", n)) as worker:
            with trio.fail_after(60):
                await worker.event("ready")
            await trio.sleep(1.0)
            one_events = await run_events(q, queue, "results", "--n", str(sequential))
            many_events = await run_events(
                q, queue, "results", "--n", str(concurrent), "--concurrency", str(WAITERS)
            )
            one, many = one_events[-1], many_events[-1]
            with trio.fail_after(60):
                done = await worker.event("done")
    finally:
        await q.cleanup(queue)
    return {
        "n": sequential,
        "seq_p50_ms": one["p50_ms"],
        "seq_p99_ms": one["p99_ms"],
        "seq_max_ms": one["max_ms"],
        "waiters": WAITERS,
        "conc_n": concurrent,
        "conc_p50_ms": many["p50_ms"],
        "conc_p99_ms": many["p99_ms"],
        "conc_max_ms": many["max_ms"],
        "conc_rate": many["rate"],
        # The part of it until the body started (the payload's send time to the start).
        "pickup_p50_ms": done.get("p50_ms"),
        "worker_cpu_ms_per_task": done["cpu_ms_per_task"],
        # saq: waits that outlived their second (see q_saq.py), counted in the figures.
        "lost_wakeups": sum(
            e["count"] for e in one_events + many_events if e["event"] == "lost_wakeups"
        ),
    }


async def drain(q: Queue, s: Settings, task: str, n: int, *worker_args: str) -> dict[str, Any]:
    """A backlog of ``n`` ``task`` enqueued in bulk (not timed), drained by one worker."""
    queue = f"{q.name}-{task}-{uuid.uuid4().hex[:8]}"
    try:
        await run_once(q, queue, *f"enqueue --task {task} --mode bulk --n {n}".split())
        async with worker_process(q, queue, *s.worker_args(task, n), *worker_args) as worker:
            with trio.fail_after(900):
                done = await worker.event("done")
        await trio.sleep(0.2)  # the last acknowledgements (and results) written
        kept = await trio.to_thread.run_sync(count_matching, q.url, f"{queue}}}:task:")
    finally:
        await q.cleanup(queue)
    return processing(done) | {"results_kept": kept}


async def keep_result(q: Queue, s: Settings, run: int) -> dict[str, Any]:
    """Scenario 10: scenario 1's drain of 20 000 no-op tasks with ``keep_result`` off, and
    with it on (``noop_keep``: ``keep_result=60``), in the same measurement (the order
    alternates run by run)."""
    n = s.n(20_000)
    order = ["noop", "noop_keep"] if run % 2 else ["noop_keep", "noop"]
    figures = {task: await drain(q, s, task, n) for task in order}
    off, on = figures["noop"], figures["noop_keep"]
    if on["results_kept"] != n:
        raise BenchError(f"{on['results_kept']} results kept after {n} tasks keeping theirs")
    return {
        "n": n,
        "first": order[0],
        "rate_off": off["process_rate"],
        "rate_on": on["process_rate"],
        "on_over_off": round(on["process_rate"] / off["process_rate"], 3),
        "cpu_ms_off": off["cpu_ms_per_task"],
        "cpu_ms_on": on["cpu_ms_per_task"],
        "hwm_mb_off": off["hwm_mb"],
        "hwm_mb_on": on["hwm_mb"],
    }


async def middleware(q: Queue, s: Settings, run: int) -> dict[str, Any]:
    """Scenario 15: scenario 1's drain of 20 000 no-op tasks by a runner without
    middleware, by one with one no-op middleware (an ``around_attempt`` that only
    yields), and by one with trunner's OpenTelemetry middleware (the SDK sampling every
    span, exporting none), in the same measurement (the order rotates run by run)."""
    n = s.n(20_000)
    variants = {"none": ("--middleware", "0"), "one": ("--middleware", "1"), "otel": ("--otel",)}
    names = list(variants)
    order = names[run % 3 :] + names[: run % 3]
    figures = {name: await drain(q, s, "noop", n, *variants[name]) for name in order}
    none, one, otel = figures["none"], figures["one"], figures["otel"]
    return {
        "n": n,
        "first": order[0],
        "rate_none": none["process_rate"],
        "rate_one": one["process_rate"],
        "rate_otel": otel["process_rate"],
        "one_over_none": round(one["process_rate"] / none["process_rate"], 3),
        "otel_over_none": round(otel["process_rate"] / none["process_rate"], 3),
        "cpu_ms_none": none["cpu_ms_per_task"],
        "cpu_ms_one": one["cpu_ms_per_task"],
        "cpu_ms_otel": otel["cpu_ms_per_task"],
        "cpu_us_added": round((one["cpu_ms_per_task"] - none["cpu_ms_per_task"]) * 1000, 2),
        "cpu_us_added_otel": round((otel["cpu_ms_per_task"] - none["cpu_ms_per_task"]) * 1000, 2),
    }


async def limits(q: Queue, s: Settings, run: int) -> dict[str, Any]:
    """Scenario 16: scenario 1's drain of 20 000 no-op tasks without limits (``noop``),
    and with a group-wide concurrency limit on every task (``noop_limited``:
    ``concurrency=100``, the worker's capacity, so nothing waits: the cost measured is
    the admission script before each attempt and the slot released with the
    acknowledgement), in the same measurement (the order alternates run by run)."""
    n = s.n(20_000)
    order = ["noop", "noop_limited"] if run % 2 else ["noop_limited", "noop"]
    figures = {task: await drain(q, s, task, n) for task in order}
    off, on = figures["noop"], figures["noop_limited"]
    return {
        "n": n,
        "first": order[0],
        "rate_off": off["process_rate"],
        "rate_on": on["process_rate"],
        "on_over_off": round(on["process_rate"] / off["process_rate"], 3),
        "cpu_ms_off": off["cpu_ms_per_task"],
        "cpu_ms_on": on["cpu_ms_per_task"],
        "cpu_us_added": round((on["cpu_ms_per_task"] - off["cpu_ms_per_task"]) * 1000, 2),
    }


# -- scenario 17: an urgent task behind a bulk backlog (priority lanes) -----------------------

#: Scenario 17: the bulk backlog of each round, the rounds of one measurement, the urgent
#: tasks of a round and the time between two of them. A round's window is ~0.5 s: a worker
#: drains 50 000-75 000 no-op tasks a second here, so most of the backlog is still there
#: when the window ends (a 1 s window left as few as 25 000 of 100 000).
LANE_BACKLOG, LANE_ROUNDS, LANE_URGENT, LANE_INTERVAL = 100_000, 10, 50, 0.01
#: Scenario 17's variants: the worker's lanes, and the priority the urgent tasks are
#: dispatched with (None: the default lane, behind the backlog).
LANE_VARIANTS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "strict": (("--lanes", "urgent:9,default:1", "--strict-lanes"), "urgent"),
    "weighted": (("--lanes", "urgent:9,default:1"), "urgent"),
    "none": ((), None),
}


async def lanes(q: Queue, s: Settings, run: int) -> dict[str, Any]:
    """Scenario 17: pickup latency of urgent tasks dispatched one at a time while one
    worker process (100 workers, batch 100) drains a backlog of 100 000 no-op tasks in
    the default lane: with the urgent tasks in a lane of their own read strictly first,
    read by weight (9:1), and, without lanes, in the backlog's lane. Each variant runs
    ``LANE_ROUNDS`` rounds (a fresh backlog and worker each; the variants take turns,
    their order rotating run by run); the latencies of its rounds are pooled."""
    backlog, urgent = s.n(LANE_BACKLOG), s.n(LANE_URGENT)
    names = list(LANE_VARIANTS)
    order = names[run % 3 :] + names[: run % 3]
    samples: dict[str, list[float]] = {name: [] for name in names}
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for _ in range(LANE_ROUNDS):
        for name in order:
            latencies, figures = await lane_round(q, s, name, backlog, urgent)
            samples[name] += latencies
            rounds[name].append(figures)
    result: dict[str, Any] = {
        "backlog": backlog,
        "urgent": urgent * LANE_ROUNDS,
        "rounds": LANE_ROUNDS,
        "first": order[0],
    }
    for name in names:
        ms, info = samples[name], rounds[name]
        left = [r["backlog_left"] for r in info]
        result |= {
            f"{name}_p50_ms": round(percentile(ms, 50), 2),
            f"{name}_p99_ms": round(percentile(ms, 99), 2),
            f"{name}_max_ms": round(max(ms), 2),
            f"{name}_rounds_p99_ms": [r["p99_ms"] for r in info],
            f"{name}_backlog_at_start": min(r["backlog_at_start"] for r in info),
            f"{name}_backlog_left_min": min(left),
            f"{name}_backlog_left_max": max(left),
            f"{name}_window_s": round(statistics.median(r["window_s"] for r in info), 3),
            f"{name}_drain_rate": round(statistics.median(r["drain_rate"] for r in info)),
            f"{name}_fetched_per_lane": [r["fetched_per_lane"] for r in info],
        }
    return result


async def lane_round(
    q: Queue, s: Settings, variant: str, backlog: int, urgent: int
) -> tuple[list[float], dict[str, Any]]:
    """One round of scenario 17: ``backlog`` no-op tasks enqueued in bulk into the default
    lane; a worker process started on them; once it is ready (draining), ``urgent``
    latency tasks dispatched from here one at a time, ``LANE_INTERVAL`` apart, each
    payload carrying ``time.time()`` taken just before its dispatch call. The worker
    counts only those (the backlog's bodies do not call its recorder) and reports every
    start - dispatch; the backlog's length is read before the first urgent dispatch and
    when the worker reports the last urgent task done."""
    worker_args, priority = LANE_VARIANTS[variant]
    queue = f"{q.name}-lanes-{uuid.uuid4().hex[:8]}"
    try:
        await run_once(q, queue, *f"enqueue --task backlog --mode bulk --n {backlog}".split())
        args = [*s.worker_args("latency", urgent), "--samples", *worker_args]
        async with (
            trunner.open_client(q.url, queue, prefix="trunner-bench") as client,
            worker_process(q, queue, *args) as worker,
        ):
            with trio.fail_after(60):
                await worker.event("ready")
            at_start = (await client.admin.lane_lengths())["default"]
            start = trio.current_time()
            for i in range(urgent):
                await trio.sleep_until(start + i * LANE_INTERVAL)
                await client.dispatch("latency", {"t": time.time()}, priority=priority)
            with trio.fail_after(300):
                done = await worker.event("done")
            left = (await client.admin.lane_lengths())["default"]
            window = trio.current_time() - start
    finally:
        await q.cleanup(queue)
    stopped = next((e for e in worker.seen if e["event"] == "stopped"), {})
    return done["latencies_ms"], {
        "p99_ms": done["p99_ms"],
        "backlog_at_start": at_start,
        "backlog_left": left,
        "window_s": window,
        "drain_rate": (at_start - left) / window,
        "fetched_per_lane": stopped.get("fetched_per_lane"),
    }


async def cancel(q: Queue, s: Settings) -> dict[str, Any]:
    """Scenario 11: a worker process runs ``hang`` tasks (awaiting for ever); another
    process dispatches one, waits until it runs (+20 ms), calls ``cancel()``, then awaits
    its result (``TaskCancelled``); 200 times, one after the other. The latency is the time
    from the ``cancel()`` call (canceller's clock) to the task's ``finally`` running in the
    worker (its cancel scope cancelled; the worker's clock: the same machine's)."""
    n = s.n(200)
    queue = f"{q.name}-cancel-{uuid.uuid4().hex[:8]}"
    try:
        async with worker_process(q, queue, *s.worker_args("hang", n)) as worker:
            with trio.fail_after(60):
                await worker.event("ready")
            await trio.sleep(1.0)
            events = await run_events(q, queue, "cancel", "--n", str(n))
            with trio.fail_after(60):
                await worker.event("done")
    finally:
        await q.cleanup(queue)
    calls = {e["i"]: e for e in events if e["event"] == "cancel"}
    ends = {e["i"]: e for e in worker.seen if e["event"] == "task_end"}
    if len(calls) != n or set(ends) != set(calls):
        raise BenchError(f"{len(calls)} cancel calls, {len(ends)} tasks cancelled, of {n}")
    seen = [(ends[i]["t"] - c["t_call"]) * 1000 for i, c in calls.items()]
    call = [(c["t_return"] - c["t_call"]) * 1000 for c in calls.values()]
    outcome = [(c["t_outcome"] - c["t_call"]) * 1000 for c in calls.values()]
    outcomes = sorted({c["outcome"] for c in calls.values()})
    return {
        "n": n,
        "p50_ms": round(percentile(seen, 50), 2),
        "p99_ms": round(percentile(seen, 99), 2),
        "max_ms": round(max(seen), 2),
        "call_p50_ms": round(percentile(call, 50), 2),
        "call_p99_ms": round(percentile(call, 99), 2),
        "outcome_p50_ms": round(percentile(outcome, 50), 2),
        "outcome_p99_ms": round(percentile(outcome, 99), 2),
        "started_after_call": sum(1 for i, c in calls.items() if ends[i]["started"] > c["t_call"]),
        "outcomes": ",".join(outcomes),
    }


#: Scenario 13: worker processes, and the pause rounds.
PAUSE_WORKERS, PAUSE_ROUNDS = 3, 100


async def pause_latency(q: Queue, s: Settings) -> dict[str, Any]:
    """Scenario 13: three idle worker processes of one group (fetchers blocked in their
    reads); a client pauses the group and resumes it, 100 times, 50 ms apart. The pause
    latency is the time from the ``pause()`` call (the client's clock) to each worker's
    fetch loops having stopped (``runner.wait_paused()`` returning in the worker; the same
    machine's clock); the resume latency, from the ``resume()`` call to each worker's
    loops fetching again."""
    rounds = s.n(PAUSE_ROUNDS)
    queue = f"{q.name}-pause-{uuid.uuid4().hex[:8]}"
    paused: list[float] = []
    resumed: list[float] = []
    calls: list[float] = []
    try:
        async with contextlib.AsyncExitStack() as stack:
            workers = [
                await stack.enter_async_context(worker_process(q, queue, *s.worker_args("noop", 1)))
                for _ in range(PAUSE_WORKERS)
            ]
            for worker in workers:
                with trio.fail_after(60):
                    await worker.event("ready")
            client = await stack.enter_async_context(
                trunner.open_client(q.url, queue, prefix="trunner-bench")
            )
            await trio.sleep(1.0)
            for _ in range(rounds):
                await trio.sleep(0.05)  # the fetchers are back in their blocked reads
                start = time.time()
                await client.admin.pause()
                calls.append((time.time() - start) * 1000)
                for worker in workers:
                    with trio.fail_after(10):
                        paused.append(((await worker.event("paused"))["t"] - start) * 1000)
                await trio.sleep(0.05)
                start = time.time()
                await client.admin.resume()
                for worker in workers:
                    with trio.fail_after(10):
                        resumed.append(((await worker.event("resumed"))["t"] - start) * 1000)
            await finish_workers(client, workers)
    finally:
        await q.cleanup(queue)
    return {
        "rounds": rounds,
        "workers": PAUSE_WORKERS,
        "p50_ms": round(percentile(paused, 50), 2),
        "p99_ms": round(percentile(paused, 99), 2),
        "max_ms": round(max(paused), 2),
        "call_p50_ms": round(percentile(calls, 50), 2),
        "resume_p50_ms": round(percentile(resumed, 50), 2),
        "resume_p99_ms": round(percentile(resumed, 99), 2),
    }


async def finish_workers(client: trunner.Client, workers: list[WorkerProcess]) -> None:
    """Each worker stops after its first task: dispatch one every 20 ms until each ran one
    (a worker that stopped fetches no more, so the next goes to another)."""
    async with trio.open_nursery() as nursery:
        left = [len(workers)]

        async def done(worker: WorkerProcess) -> None:
            await worker.event("done")
            left[0] -= 1

        for worker in workers:
            nursery.start_soon(done, worker)
        with trio.fail_after(60):
            while left[0]:
                await client.dispatch("noop", {"t": time.time()})
                await trio.sleep(0.02)


async def result_memory(q: Queue, s: Settings, keep: float = 60) -> dict[str, Any]:
    """Scenario 12: 100 000 no-op tasks keeping their results 60 s (``noop_keep``),
    enqueued in bulk into an idle worker; Redis's ``used_memory`` before and after (per
    result), the worker's RSS every 10 % of the tasks and every 5 s while the results are
    kept, and Redis's memory once they expired."""
    n = s.n(100_000)
    queue = f"{q.name}-resmem-{uuid.uuid4().hex[:8]}"
    samples: list[tuple[float, float]] = []
    linger = keep + 5
    try:
        command = f"--task noop_keep --n {n} --concurrency {s.concurrency} --batch {s.batch}"
        args = [*command.split(), "--linger", str(linger), "--progress"]
        async with worker_process(q, queue, *args) as w:
            with trio.fail_after(60):
                await w.event("ready")
            await trio.sleep(1.0)
            idle = proc_status(w.pid)["rss_kb"]
            before = await trio.to_thread.run_sync(used_memory, q.url)
            await run_once(q, queue, *f"enqueue --task noop_keep --mode bulk --n {n}".split())
            with trio.fail_after(900):
                done = await w.event("done")
            await trio.sleep(0.5)  # the last acknowledgements (and results) written
            after = await trio.to_thread.run_sync(used_memory, q.url)
            kept = await trio.to_thread.run_sync(count_matching, q.url, f"{queue}}}:task:")
            usage = await trio.to_thread.run_sync(sample_usage, q.url, f"{queue}}}:task:")
            start = trio.current_time()
            async with trio.open_nursery() as nursery:

                async def sample() -> None:
                    while True:
                        with contextlib.suppress(OSError):
                            rss = proc_status(w.pid)["rss_kb"] / 1024
                            samples.append((round(trio.current_time() - start, 1), round(rss, 1)))
                        await trio.sleep(5.0)

                nursery.start_soon(sample)
                with trio.fail_after(linger + 60):
                    final = await w.event("final")
                nursery.cancel_scope.cancel()
            expired = await trio.to_thread.run_sync(used_memory, q.url)
            left = await trio.to_thread.run_sync(count_matching, q.url, f"{queue}}}:task:")
    finally:
        await q.cleanup(queue)
    progress = [e["rss_kb"] / 1024 for e in w.seen if e["event"] == "progress"]
    return {
        "n": n,
        "keep_s": keep,
        "results_kept": kept,
        "used_memory_before_mb": round(before / 2**20, 1),
        "used_memory_after_mb": round(after / 2**20, 1),
        "bytes_per_result": round((after - before) / n),
        "memory_usage_per_record": usage,
        "results_left_after_keep": left,
        "used_memory_after_keep_mb": round(expired / 2**20, 1),
        "process_rate": done["rate"],
        "rss_idle_mb": round(idle / 1024, 1),
        "rss_progress_mb": [round(x, 1) for x in progress],
        "rss_done_mb": round(done["rss_kb"] / 1024, 1),
        "rss_keep_samples_mb": samples,
        "rss_after_keep_mb": round(final["rss_kb"] / 1024, 1),
        "rss_growth_20_100_mb": round(done["rss_kb"] / 1024 - progress[1], 1)
        if len(progress) >= 2
        else None,
        "rss_growth_keep_mb": round(final["rss_kb"] / 1024 - done["rss_kb"] / 1024, 1),
        "peak_rss_mb": round(final["hwm_kb"] / 1024, 1),
    }


# -- scenario 18: dispatching from asyncio, beside the peers (and the sync client) ----------

#: Scenario 18: round trips one at a time (arq and taskiq poll for results: fewer).
CLIENT_TRIPS = 300
CLIENT_TRIPS_BY_QUEUE = {"arq": 60, "taskiq": 100}
#: Scenario 18: trunner's clients, and the scenario and impl each is recorded under.
TRUNNER_CLIENTS = {
    "asyncio": ("clients", "trunner"),
    "sync": ("clients-sync", "trunner-sync"),
    "trio": ("clients-trio", "trunner-trio"),
}


async def clients(q: Queue, s: Settings, client: str = "asyncio") -> dict[str, Any]:
    """Scenario 18: 20 000 no-op tasks (the same small dict for every queue) dispatched
    from asyncio one at a time, by 100 concurrent senders (``asyncio.gather``), and with
    the queue's bulk API where it has one (only the sending is timed); then, with a worker
    process of the queue's own running ``echo``, round trips one at a time (dispatch, and
    await the result with the queue's own API). ``client``: trunner's client (asyncio,
    sync or Trio); the peers produce from asyncio. Each producer is a process of its own."""
    n = s.n(20_000)
    trips = s.n(CLIENT_TRIPS_BY_QUEUE.get(q.name, CLIENT_TRIPS))
    queue = f"{q.name}-clients-{uuid.uuid4().hex[:8]}"
    result: dict[str, Any] = {"n": n, "client": client}

    async def produce(mode: str, count: int) -> list[dict[str, Any]]:
        args = ["--mode", mode, "--n", str(count), "--client", client]
        return await run_events(q, queue, "produce", *args)

    try:
        for mode in ("single", "concurrent", "bulk"):
            try:
                event = (await produce(mode, n))[-1]
                result[f"{mode}_rate"] = event["rate"]
                result[f"{mode}_how"] = event["how"]
            except Unsupported as exc:
                result[f"{mode}_how"] = f"unsupported: {exc}"
            finally:
                await q.cleanup(queue)
        # In bulk, the fastest way the queue has: its bulk API, or concurrent senders.
        rates = {m: result[f"{m}_rate"] for m in ("concurrent", "bulk") if f"{m}_rate" in result}
        if rates:
            best = max(rates, key=rates.__getitem__)
            result.update(bulk_best_rate=rates[best], bulk_best=best)
        worker_args = [*s.worker_args("echo", trips), "--loop", "asyncio"]
        async with worker_process(q, queue, *worker_args) as worker:
            with trio.fail_after(60):
                await worker.event("ready")
            await trio.sleep(1.0)
            events = await produce("trips", trips)
            with trio.fail_after(60):
                done = await worker.event("done")
    finally:
        await q.cleanup(queue)
    trip = events[-1]
    return result | {
        "trips": trips,
        "trip_p50_ms": trip["p50_ms"],
        "trip_p99_ms": trip["p99_ms"],
        "trip_max_ms": trip["max_ms"],
        "trip_how": trip["how"],
        # The part of it until the body started (the payload's send time to the start).
        "pickup_p50_ms": done.get("p50_ms"),
        # saq: waits that outlived their second (see q_saq.py), counted in the figures.
        "lost_wakeups": sum(e["count"] for e in events if e["event"] == "lost_wakeups"),
    }


# -- scenario 4: the original's harness (trunner and the peers) -----------------------------


async def memory(q: Queue, s: Settings, workers: int) -> dict[str, Any]:
    """100 000 tasks of 500 ms on one instance: wall time, peak RSS and RSS growth."""
    n = s.n(100_000)
    ideal = n * 0.5 / workers
    queue = f"{q.name}-mem-{uuid.uuid4().hex[:8]}"
    samples: list[int] = []
    try:
        command = f"--task sleep --n {n} --concurrency {workers} --batch {s.batch}"
        async with worker_process(q, queue, *command.split(), "--linger", "2", "--progress") as w:
            with trio.fail_after(60):
                await w.event("ready")
            await trio.sleep(1.0)
            baseline = proc_status(w.pid)
            async with trio.open_nursery() as nursery:

                async def sample() -> None:
                    while True:
                        with contextlib.suppress(OSError):
                            samples.append(proc_status(w.pid)["rss_kb"])
                        await trio.sleep(0.2)

                nursery.start_soon(sample)
                with trio.fail_after(900):
                    enqueue = f"enqueue --task sleep --n {n} --sleep 0.5 --mode"
                    try:  # the fastest way the queue has (not timed: the worker times itself)
                        await run_once(q, queue, *enqueue.split(), "bulk")
                    except Unsupported:
                        await run_once(q, queue, *enqueue.split(), "single")
                    done = await w.event("done")
                    final = await w.event("final")
                nursery.cancel_scope.cancel()
    finally:
        await q.cleanup(queue)
    # Under full load: RSS when 90 % of the tasks were done minus RSS at 20 % (a leak grows
    # it; the working set of the concurrent tasks does not).
    progress = {e["count"]: e["rss_kb"] for e in w.seen if e["event"] == "progress"}
    marks = sorted(progress)
    drift = None
    if len(marks) >= 9:
        drift = round((progress[marks[8]] - progress[marks[1]]) / 1024, 1)
    return {
        "n": n,
        "workers": workers,
        "wall_s": done["seconds"],
        "ideal_s": ideal,
        "over_ideal": round(done["seconds"] / ideal, 3),
        "cpu_ms_per_task": done["cpu_ms_per_task"],
        "rss_idle_mb": round(baseline["rss_kb"] / 1024, 1),
        "rss_end_mb": round(final["rss_kb"] / 1024, 1),
        "rss_end_after_gc_mb": round(final["rss_after_gc_kb"] / 1024, 1),
        "rss_growth_mb": round((final["rss_kb"] - baseline["rss_kb"]) / 1024, 1),
        "rss_drift_20_90_mb": drift,
        "peak_rss_mb": round(final["hwm_kb"] / 1024, 1),
        "max_sampled_rss_mb": round(max(samples, default=0) / 1024, 1),
    }


# -- scenario 5: delayed precision (ported from bench/delayed.py) ----------------------------


async def delayed(url: str, count: int, over: float) -> dict[str, Any]:
    """2 000 delayed tasks due at random times over 10 s; lateness of their starts."""
    prefix = f"bench-delayed-{uuid.uuid4().hex[:8]}"
    lateness: list[float] = []
    done = trio.Event()
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def due(payload: float) -> None:
        lateness.append(time.time() - payload)
        if len(lateness) == count:
            done.set()

    config = trunner.RunnerConfig(
        consumer_group="bench", prefix=prefix, num_workers=100, batch_size=100
    )
    warning = None
    try:
        async with (
            trunner.open_runner(url, config, tasks),
            trunner.open_client(url, "bench", prefix=prefix) as client,
        ):
            # Every task is scheduled before the first is due (~1.5 ms per dispatch here).
            start = time.time() + 1.0 + count * 0.002
            dues = [start + random.uniform(0, over) for _ in range(count)]
            for when in dues:
                await client.dispatch_delayed("due", when, when - time.time())
            if time.time() > start:
                warning = "scheduling outlasted the head start"
            with trio.fail_after(over + 60):
                await done.wait()
    finally:
        await trio.to_thread.run_sync(delete_matching, url, prefix)
    ms = [x * 1000 for x in lateness]
    result: dict[str, Any] = {
        "n": count,
        "p50_ms": round(percentile(ms, 50), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "max_ms": round(max(ms), 2),
        "early": sum(1 for x in ms if x < 0),
    }
    if warning:
        result["warning"] = warning
    return result


# -- scenario 6: failover at the runner level ------------------------------------------------

LEADER = """
import sys, trio, trunner
async def main(url, prefix):
    tasks = trunner.TaskRegistry()
    @tasks.task
    async def noop(payload): pass
    config = trunner.RunnerConfig(consumer_group="bench", prefix=prefix, num_workers=10)
    async with trunner.open_runner(url, config, tasks) as runner:
        while not (runner.is_leader and runner.statistics().scheduler_passes > 0):
            await trio.sleep(0.005)
        print("leader", flush=True)
        await trio.lowlevel.FdStream(0).receive_some()   # "stop", or EOF
        stop = trio.current_time()
    print("stopped", round(trio.current_time() - stop, 4), flush=True)
trio.run(main, sys.argv[1], sys.argv[2])
"""


async def first_pass(runner: trunner.Runner, limit: float) -> None:
    """Until ``runner`` (now a follower) led and finished a scheduler pass."""
    with trio.fail_after(limit):
        while runner.statistics().scheduler_passes == 0:  # noqa: ASYNC110 (no event for it)
            await trio.sleep(0.001)


@contextlib.asynccontextmanager
async def leader_process(url: str, prefix: str, out: Output) -> AsyncIterator[trio.Process]:
    """A runner process that leads the group ``bench`` under ``prefix`` (ready: it led and
    finished a scheduler pass). Writing to its stdin stops it gracefully."""
    command = [sys.executable, "-c", LEADER, url, prefix]
    with open_log(out.log_path("failover-leader"), command) as log:
        process = await trio.lowlevel.open_process(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log
        )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        line = b""
        with trio.fail_after(30):
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(1)
                if not chunk:
                    raise BenchError("the leader process exited early; see its log")
                line += chunk
        assert line.strip() == b"leader", line
        yield process
    finally:
        await reap(process)


async def failover(url: str, mode: str, out: Output) -> dict[str, Any]:
    """The leader runner (a process) stops gracefully or is SIGKILLed; time until the
    follower runner (here) became leader and finished its first scheduler pass."""
    prefix = f"bench-failover-{uuid.uuid4().hex[:8]}"
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def noop(payload: Any) -> None:
        pass

    config = trunner.RunnerConfig(consumer_group="bench", prefix=prefix, num_workers=10)
    limit = config.leader_ttl + config.leader_wait + 10
    result: dict[str, Any] = {"mode": mode}
    try:
        async with (
            leader_process(url, prefix, out) as leader,
            trunner.open_runner(url, config, tasks) as follower,
        ):
            assert not follower.is_leader
            assert leader.stdin is not None
            assert leader.stdout is not None
            if mode == "graceful":
                await trio.sleep(0.5)
                start = trio.current_time()
                await leader.stdin.send_all(b"stop\n")
                await first_pass(follower, limit)
                result["seconds"] = round(trio.current_time() - start, 4)
                await leader.wait()
                tail = await leader.stdout.receive_some()
                with contextlib.suppress(ValueError, IndexError):
                    result["leader_shutdown_s"] = float(tail.split()[1])
            else:
                # A random phase of the follower's retry cycle, as in production.
                await trio.sleep(random.uniform(0.5, 0.5 + config.leader_wait))
                leader.send_signal(signal.SIGKILL)
                await leader.wait()
                start = trio.current_time()
                await first_pass(follower, limit)
                result["seconds"] = round(trio.current_time() - start, 4)
                result["worst_case_s"] = config.leader_ttl + config.leader_wait
    finally:
        await trio.to_thread.run_sync(delete_matching, url, prefix)
    return result


# -- peers -----------------------------------------------------------------------------------


def install_peer(name: str, out: Output) -> str:
    """Create bench/.peers/NAME and install the peer into it (once); return its python."""
    packages, _ = PEERS[name]
    venv = PEERS_DIR / name
    python = venv / "bin" / "python"
    marker = venv / ".bench-installed"
    spec = "\n".join(packages)
    if python.exists() and marker.exists() and marker.read_text() == spec:
        return str(python)
    out.note(f"installing {name} into {venv} ...")
    with open(out.log_path(f"install-{name}"), "ab") as log:
        subprocess.run(
            [sys.executable, "-m", "venv", "--clear", str(venv)], check=True, stdout=log, stderr=log
        )
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *packages],
            check=True,
            stdout=log,
            stderr=log,
        )
    marker.write_text(spec)
    return str(python)


def peer_versions(python: str, name: str) -> str:
    """The versions installed: the peer's packages and its Redis client."""
    packages = [p.split("[")[0].split("==")[0] for p in PEERS[name][0]]
    packages += [p for p in ("redis", "coredis", "hiredis", "anyio") if p not in packages]
    code = (
        "import importlib.metadata as m, sys\n"
        "for p in sys.argv[1:]:\n"
        "    try: print(f'{p}=={m.version(p)}', end=' ')\n"
        "    except m.PackageNotFoundError: pass\n"
    )
    result = subprocess.run(
        [python, "-c", code, *packages], capture_output=True, text=True, check=False
    )
    return result.stdout.strip()


# -- summary ---------------------------------------------------------------------------------

Results = dict[tuple[str, str], list[dict[str, Any]]]

#: The summary's rows: label, unit, scenario, metric, higher is better, decimals.
ROWS: list[tuple[str, str, str, str, bool, int]] = [
    ("1 enqueue one by one", "tasks/s", "throughput", "enqueue_single_rate", True, 0),
    ("1 enqueue in bulk (dispatch_many)", "tasks/s", "throughput", "enqueue_bulk_rate", True, 0),
    ("1 process 20 000 no-op, 100 workers", "tasks/s", "throughput", "process_rate", True, 0),
    ("1 worker CPU per task", "ms", "throughput", "cpu_ms_per_task", False, 3),
    ("1 worker peak RSS", "MB", "throughput", "hwm_mb", False, 1),
    ("2 pickup latency p50", "ms", "latency", "p50_ms", False, 2),
    ("2 pickup latency p99", "ms", "latency", "p99_ms", False, 2),
    ("2 pickup latency max", "ms", "latency", "max_ms", False, 2),
    ("2 worker CPU per task at 100 tasks/s", "ms", "latency", "cpu_ms_per_task", False, 3),
    ("3 sleep-bound 2 000 x 50 ms: wall", "s", "sleep", "wall_s", False, 3),
    ("3 sleep-bound: wall / ideal", "x", "sleep", "over_ideal", False, 2),
    ("4 100 000 x 500 ms: wall", "s", "memory", "wall_s", False, 2),
    ("4 worker CPU per task", "ms", "memory", "cpu_ms_per_task", False, 3),
    ("4 peak RSS (VmHWM)", "MB", "memory", "peak_rss_mb", False, 1),
    ("4 RSS growth (end - idle start)", "MB", "memory", "rss_growth_mb", False, 1),
    ("4 RSS drift under load (90 % - 20 %)", "MB", "memory", "rss_drift_20_90_mb", False, 1),
    ("5 delayed lateness p50", "ms", "delayed", "p50_ms", False, 1),
    ("5 delayed lateness p99", "ms", "delayed", "p99_ms", False, 1),
    ("5 delayed lateness max", "ms", "delayed", "max_ms", False, 1),
    ("6 failover, leader stops gracefully", "s", "failover-graceful", "seconds", False, 3),
    ("6 failover, leader SIGKILLed", "s", "failover-crash", "seconds", False, 2),
    (
        "8 process 20 000 x one Redis round trip (pipelined SET NX + INCR), 100 workers",
        "tasks/s",
        "redis-body",
        "process_rate",
        True,
        0,
    ),
    ("8 worker CPU per task", "ms", "redis-body", "cpu_ms_per_task", False, 3),
    ("8 worker peak RSS", "MB", "redis-body", "hwm_mb", False, 1),
    (
        "8 trunner (auto-pipelined): await set, await incr",
        "tasks/s",
        "redis-body",
        "process_rate",
        True,
        0,
    ),
    ("8 trunner (auto-pipelined): CPU per task", "ms", "redis-body", "cpu_ms_per_task", False, 3),
    (
        "8 trunner, own bridged redis-py client (trio-asyncio): pipelined SET NX + INCR",
        "tasks/s",
        "redis-body",
        "process_rate",
        True,
        0,
    ),
    (
        "8 trunner, own bridged redis-py client: CPU per task",
        "ms",
        "redis-body",
        "cpu_ms_per_task",
        False,
        3,
    ),
    ("8 trunner, own bridged redis-py client: peak RSS", "MB", "redis-body", "hwm_mb", False, 1),
    ("9 result round trip, one at a time: p50", "ms", "results", "seq_p50_ms", False, 2),
    ("9 result round trip, one at a time: p99", "ms", "results", "seq_p99_ms", False, 2),
    ("9 result round trip, one at a time: max", "ms", "results", "seq_max_ms", False, 2),
    ("9 result round trip, 50 waiters: p50", "ms", "results", "conc_p50_ms", False, 2),
    ("9 result round trip, 50 waiters: p99", "ms", "results", "conc_p99_ms", False, 2),
    ("9 round trips/s, 50 waiters", "1/s", "results", "conc_rate", True, 0),
    ("10 process 20 000 no-op, keep_result off", "tasks/s", "keep-result", "rate_off", True, 0),
    ("10 process 20 000 no-op, keep_result on", "tasks/s", "keep-result", "rate_on", True, 0),
    ("10 keep_result on / off", "x", "keep-result", "on_over_off", True, 2),
    ("10 worker CPU per task, keep_result on", "ms", "keep-result", "cpu_ms_on", False, 3),
    (
        "11 cancel: cancel() call to the task's scope cancelled, p50",
        "ms",
        "cancel",
        "p50_ms",
        False,
        2,
    ),
    ("11 cancel: the same, p99", "ms", "cancel", "p99_ms", False, 2),
    ("11 cancel: the same, max", "ms", "cancel", "max_ms", False, 2),
    ("11 cancel: cancel() call returns, p50", "ms", "cancel", "call_p50_ms", False, 2),
    ("11 cancel: TaskCancelled in the waiter, p50", "ms", "cancel", "outcome_p50_ms", False, 2),
    (
        "12 Redis memory per kept result (used_memory)",
        "bytes",
        "result-memory",
        "bytes_per_result",
        False,
        0,
    ),
    (
        "12 MEMORY USAGE of one result record",
        "bytes",
        "result-memory",
        "memory_usage_per_record",
        False,
        0,
    ),
    ("12 worker RSS, 100 000 results done", "MB", "result-memory", "rss_done_mb", False, 1),
    (
        "12 worker RSS growth, 20 % -> 100 % of the tasks",
        "MB",
        "result-memory",
        "rss_growth_20_100_mb",
        False,
        1,
    ),
    (
        "12 worker RSS growth while the results are kept (60 s)",
        "MB",
        "result-memory",
        "rss_growth_keep_mb",
        False,
        1,
    ),
    ("12 results left once expired", "keys", "result-memory", "results_left_after_keep", False, 0),
    ("13 pause: each worker's fetching stopped, p50", "ms", "pause", "p50_ms", False, 2),
    ("13 pause: the same, p99", "ms", "pause", "p99_ms", False, 2),
    ("13 pause: the same, max", "ms", "pause", "max_ms", False, 2),
    ("13 pause: pause() call returns, p50", "ms", "pause", "call_p50_ms", False, 2),
    ("13 resume: each worker fetching again, p50", "ms", "pause", "resume_p50_ms", False, 2),
    ("13 resume: the same, p99", "ms", "pause", "resume_p99_ms", False, 2),
    ("14 dashboard group page: first byte, p50", "ms", "dashboard", "group_ttfb_p50_ms", False, 2),
    ("14 dashboard group page: full HTML, p50", "ms", "dashboard", "group_full_p50_ms", False, 2),
    ("14 dashboard group page: full HTML, p99", "ms", "dashboard", "group_full_p99_ms", False, 2),
    ("14 dead letters 50 000 deep: full, p50", "ms", "dashboard", "older_full_p50_ms", False, 2),
    ("14 dashboard overview: full, p50", "ms", "dashboard", "overview_full_p50_ms", False, 2),
    ("14 live snapshot JSON: full, p50", "ms", "dashboard", "snapshot_full_p50_ms", False, 2),
    (
        "14 Redis write to SSE event, p50 (1 s interval)",
        "ms",
        "dashboard",
        "update_p50_ms",
        False,
        1,
    ),
    ("14 Redis write to SSE event, p99", "ms", "dashboard", "update_p99_ms", False, 1),
    ("14 one snapshot's reads, p50", "ms", "dashboard", "snapshot_read_p50_ms", False, 2),
    ("15 process 20 000 no-op, no middleware", "tasks/s", "middleware", "rate_none", True, 0),
    ("15 process 20 000 no-op, one no-op middleware", "tasks/s", "middleware", "rate_one", True, 0),
    ("15 one middleware / none", "x", "middleware", "one_over_none", True, 2),
    ("15 worker CPU per task, no middleware", "ms", "middleware", "cpu_ms_none", False, 4),
    ("15 worker CPU per task, one middleware", "ms", "middleware", "cpu_ms_one", False, 4),
    ("15 process 20 000 no-op, OpenTelemetry", "tasks/s", "middleware", "rate_otel", True, 0),
    ("15 OpenTelemetry / none", "x", "middleware", "otel_over_none", True, 2),
    ("15 worker CPU per task, OpenTelemetry", "ms", "middleware", "cpu_ms_otel", False, 4),
    ("16 process 20 000 no-op, no limits", "tasks/s", "limits", "rate_off", True, 0),
    ("16 process 20 000 no-op, concurrency=100", "tasks/s", "limits", "rate_on", True, 0),
    ("16 concurrency limit / none", "x", "limits", "on_over_off", True, 2),
    ("16 worker CPU per task, no limits", "ms", "limits", "cpu_ms_off", False, 4),
    ("16 worker CPU per task, concurrency=100", "ms", "limits", "cpu_ms_on", False, 4),
    (
        "17 urgent task behind 100 000 bulk, strict lanes: pickup p50",
        "ms",
        "lanes",
        "strict_p50_ms",
        False,
        2,
    ),
    ("17 strict lanes: pickup p99", "ms", "lanes", "strict_p99_ms", False, 2),
    ("17 strict lanes: pickup max", "ms", "lanes", "strict_max_ms", False, 2),
    ("17 weighted lanes (9:1): pickup p50", "ms", "lanes", "weighted_p50_ms", False, 2),
    ("17 weighted lanes (9:1): pickup p99", "ms", "lanes", "weighted_p99_ms", False, 2),
    ("17 weighted lanes (9:1): pickup max", "ms", "lanes", "weighted_max_ms", False, 2),
    ("17 no lanes (the backlog's lane): pickup p50", "ms", "lanes", "none_p50_ms", False, 0),
    ("17 no lanes (the backlog's lane): pickup p99", "ms", "lanes", "none_p99_ms", False, 0),
    (
        "17 bulk backlog left at a round's end, fewest (strict)",
        "tasks",
        "lanes",
        "strict_backlog_left_min",
        True,
        0,
    ),
    (
        "17 bulk backlog left at a round's end, fewest (weighted)",
        "tasks",
        "lanes",
        "weighted_backlog_left_min",
        True,
        0,
    ),
    ("17 backlog drain rate, strict lanes", "tasks/s", "lanes", "strict_drain_rate", True, 0),
    ("17 backlog drain rate, weighted lanes", "tasks/s", "lanes", "weighted_drain_rate", True, 0),
    ("17 backlog drain rate, no lanes", "tasks/s", "lanes", "none_drain_rate", True, 0),
    ("18 asyncio: dispatch one at a time", "tasks/s", "clients", "single_rate", True, 0),
    (
        "18 asyncio: 100 concurrent senders (asyncio.gather), one dispatch each at a time",
        "tasks/s",
        "clients",
        "concurrent_rate",
        True,
        0,
    ),
    (
        "18 asyncio: bulk API (dispatch_many; streaq: enqueue_many)",
        "tasks/s",
        "clients",
        "bulk_rate",
        True,
        0,
    ),
    (
        "18 asyncio: in bulk, the fastest way each has (the two rows above)",
        "tasks/s",
        "clients",
        "bulk_best_rate",
        True,
        0,
    ),
    ("18 asyncio: result round trip, one at a time: p50", "ms", "clients", "trip_p50_ms", False, 2),
    ("18 asyncio: result round trip, one at a time: p99", "ms", "clients", "trip_p99_ms", False, 2),
    ("18 asyncio: result round trip, one at a time: max", "ms", "clients", "trip_max_ms", False, 2),
    ("18 sync client: dispatch one at a time", "tasks/s", "clients-sync", "single_rate", True, 0),
    ("18 sync client: dispatch_many", "tasks/s", "clients-sync", "bulk_rate", True, 0),
    ("18 sync client: result round trip: p50", "ms", "clients-sync", "trip_p50_ms", False, 2),
    ("18 sync client: result round trip: p99", "ms", "clients-sync", "trip_p99_ms", False, 2),
    ("18 Trio client: dispatch one at a time", "tasks/s", "clients-trio", "single_rate", True, 0),
    (
        "18 Trio client: 100 concurrent senders (a nursery)",
        "tasks/s",
        "clients-trio",
        "concurrent_rate",
        True,
        0,
    ),
    ("18 Trio client: dispatch_many", "tasks/s", "clients-trio", "bulk_rate", True, 0),
    ("18 Trio client: result round trip: p50", "ms", "clients-trio", "trip_p50_ms", False, 2),
    ("18 Trio client: result round trip: p99", "ms", "clients-trio", "trip_p99_ms", False, 2),
]

#: Rows whose "trunner" column shows another trunner variant (by its impl name).
ROW_IMPL = {
    "8 trunner (auto-pipelined): await set, await incr": "trunner-auto",
    "8 trunner (auto-pipelined): CPU per task": "trunner-auto",
    "8 trunner, own bridged redis-py client (trio-asyncio): pipelined SET NX + INCR": (
        "trunner-bridged"
    ),
    "8 trunner, own bridged redis-py client: CPU per task": "trunner-bridged",
    "8 trunner, own bridged redis-py client: peak RSS": "trunner-bridged",
}
#: Scenarios whose "trunner" column shows another trunner variant (by its impl name).
SCENARIO_IMPL = {"clients-sync": "trunner-sync", "clients-trio": "trunner-trio"}
#: Variants the targets do not apply to (issue 12's target is the task Redis handle's).
NO_TARGET = {"trunner-bridged"}


@dataclass
class Context:
    """What the targets are checked against: the ceiling's value, the peers' figures."""

    ceiling: float | None
    best_peer_rate: float | None
    lightest_peer_mb: float | None
    #: This row's peers' figures (medians).
    peer_values: list[float] = field(default_factory=list)


def _targets() -> dict[str, tuple[str, Callable[[float, Context], bool | None]]]:
    """Each target: its text, and its check (None: not checkable, e.g. without the peers)."""

    def of_ceiling(v: float, c: Context) -> bool:
        return c.ceiling is not None and v >= 0.8 * c.ceiling

    def no_op(v: float, c: Context) -> bool | None:
        if v < 20_000:
            return False
        return None if c.best_peer_rate is None else v >= 15 * c.best_peer_rate

    def of_best_peer(v: float, c: Context) -> bool | None:
        return None if c.best_peer_rate is None else v >= 5 * c.best_peer_rate

    def rss(v: float, c: Context) -> bool:
        return v < (c.lightest_peer_mb if c.lightest_peer_mb is not None else 31.0)

    def below(limit: float) -> Callable[[float, Context], bool]:
        """At most ``limit``, and below every peer's figure in the row."""
        return lambda v, c: v <= limit and all(v < p for p in c.peer_values)

    def ahead(v: float, c: Context) -> bool | None:
        """Above every peer's figure in the row (without the peers: not checkable)."""
        return all(v > p for p in c.peer_values) if c.peer_values else None

    return {
        "throughput/enqueue_single_rate": (">= 0.8 x ceiling", of_ceiling),
        "throughput/enqueue_bulk_rate": (">= 0.8 x ceiling", of_ceiling),
        "throughput/process_rate": (">= 20 000/s and >= 15 x best peer", no_op),
        "redis-body/process_rate": (">= 5 x best peer", of_best_peer),
        "latency/p50_ms": ("<= 2 ms", lambda v, _: v <= 2),
        "latency/p99_ms": ("<= 10 ms", lambda v, _: v <= 10),
        "sleep/over_ideal": ("<= 1.3", lambda v, _: v <= 1.3),
        "memory/peak_rss_mb": ("< lightest peer's peak (no peers: 31 MB)", rss),
        "memory/rss_growth_mb": ("< 10 MB", lambda v, _: v < 10),
        "delayed/p99_ms": ("<= 100 ms", lambda v, _: v <= 100),
        "results/seq_p50_ms": ("<= 2 ms and < every peer", below(2)),
        "results/seq_p99_ms": ("<= 10 ms and < every peer", below(10)),
        "keep-result/on_over_off": (">= 0.7", lambda v, _: v >= 0.7),
        "cancel/p99_ms": ("<= 50 ms", lambda v, _: v <= 50),
        "pause/p99_ms": ("<= 100 ms", lambda v, _: v <= 100),
        "result-memory/rss_growth_keep_mb": ("no growth (< 2 MB)", lambda v, _: v < 2),
        "dashboard/older_full_p50_ms": ("pages quickly (< 100 ms)", lambda v, _: v < 100),
        "lanes/strict_p99_ms": ("<= 10 ms", lambda v, _: v <= 10),
        "lanes/weighted_p99_ms": ("<= 10 ms", lambda v, _: v <= 10),
        "clients/single_rate": ("> every peer", ahead),
        "clients/bulk_best_rate": ("> every peer", ahead),
        "clients/trip_p50_ms": ("<= 2 ms and < every peer", below(2)),
        "clients/trip_p99_ms": ("<= 10 ms and < every peer", below(10)),
        "clients-sync/trip_p50_ms": ("<= 2 ms", lambda v, _: v <= 2),
        "clients-sync/trip_p99_ms": ("<= 10 ms", lambda v, _: v <= 10),
    }


def fmt(value: Any, digits: int) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if digits == 0 or abs(value) >= 1000:
        return f"{value:,.0f}".replace(",", " ")
    return f"{value:.{digits}f}"


def median_of(results: Results, key: tuple[str, str], metric: str) -> float | None:
    values = [r[metric] for r in results.get(key, []) if isinstance(r.get(metric), int | float)]
    return statistics.median(values) if values else None


def summary(
    results: Results, notes: dict[str, str], peers: list[str], ideals: dict[str, float]
) -> str:
    """The table: trunner, the ceiling (or the ideal), targets, the peers."""

    def best_rate(scenario: str) -> float | None:
        rates = [median_of(results, (scenario, p), "process_rate") for p in peers]
        return max((r for r in rates if r is not None), default=None)

    # Scenario 4's peak against the peers' peaks in the same scenario (same tasks, workers).
    rss = [median_of(results, ("memory", p), "peak_rss_mb") for p in peers]
    lightest = min((h for h in rss if h is not None), default=None)
    targets = _targets()
    head = ["scenario", "unit", "trunner", "ceiling", "trunner / ceiling", "target", "met"]
    if peers:
        head += [*peers, "trunner / best peer"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ran = {scenario for scenario, _ in results}
    for label, unit, scenario, metric, higher, digits in ROWS:
        if scenario not in ran:
            continue
        key = f"{scenario}/{metric}"
        impl = ROW_IMPL.get(label) or SCENARIO_IMPL.get(scenario, "trunner")
        value = median_of(results, (scenario, impl), metric)
        ceiling = median_of(results, (scenario, "ceiling"), metric)
        shown: Any = ceiling
        if ceiling is None and key in ideals:
            ceiling = ideals[key]
            shown = f"{fmt(ceiling, digits)} (ideal)"
        ratio = f"{value / ceiling:.2f}" if value is not None and ceiling else "-"
        target, met = "", "-"
        if key in targets and impl not in NO_TARGET:
            target, check = targets[key]
            if value is not None:
                figures = [median_of(results, (scenario, p), metric) for p in peers]
                row_peers = [x for x in figures if x is not None]
                context = Context(ceiling, best_rate(scenario), lightest, row_peers)
                ok = check(value, context)
                met = "-" if ok is None else "yes" if ok else "**no**"
        cells = [label, unit, fmt(value, digits), fmt(shown, digits), ratio, target, met]
        if peers:
            found = []
            for p in peers:
                v = median_of(results, (scenario, p), metric)
                cells.append(fmt(v, digits) if v is not None else notes.get(f"{key}/{p}", "-"))
                if v is not None:
                    found.append(v)
            best = (max if higher else min)(found) if found else None
            cells.append(f"{value / best:.2f}" if value is not None and best else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- main ------------------------------------------------------------------------------------

#: What a failed measurement may raise (recorded; the suite goes on).
FAILURES = (
    BenchError,
    trio.TooSlowError,
    OSError,
    trunner.TrunnerError,
    redis.RedisError,
    AssertionError,
    BodyError,
    WorkflowError,
)


async def measure(
    out: Output, results: Results, scenario: str, impl: str, run: int, coro: Any
) -> None:
    """Run one measurement; record its result or its failure, never stop the suite."""
    busy = await wait_quiet(out.quiet_wait) if out.quiet_wait else None
    if busy is not None:
        out.busy.append(busy)
    try:
        result = await coro
    except Unsupported as exc:
        out.unsupported[(scenario, impl)] = str(exc)
        out.record(scenario=scenario, impl=impl, run=run, unsupported=str(exc))
        return
    except FAILURES as exc:
        out.failed[(scenario, impl)] = error = f"{type(exc).__name__}: {exc}"
        out.record(scenario=scenario, impl=impl, run=run, error=error)
        return
    except BaseExceptionGroup as group:  # from a nursery
        failures, rest = group.split(FAILURES)
        if rest is not None or failures is None:
            raise
        errors = "; ".join(f"{type(e).__name__}: {e}" for e in failures.exceptions)
        out.failed[(scenario, impl)] = errors
        out.record(scenario=scenario, impl=impl, run=run, error=errors)
        return
    results.setdefault((scenario, impl), []).append(result)
    out.record(scenario=scenario, impl=impl, run=run, **result, busy_before=busy, load=loadavg())


async def setup_peers(
    args: argparse.Namespace, url: str, out: Output, notes: dict[str, str]
) -> list[Queue]:
    """Install the peers (once); a peer that cannot be installed is reported and skipped."""
    queues = []
    for name in args.peer or list(PEERS):
        peer_url = with_db(url, PEERS[name][1] + args.peer_db_offset)
        try:
            python = await trio.to_thread.run_sync(install_peer, name, out)
            if await trio.to_thread.run_sync(db_size, peer_url):
                raise BenchError(f"database of {peer_url} is not empty: not touching it")
        except (subprocess.CalledProcessError, OSError, BenchError, redis.RedisError) as exc:
            out.record(event="peer_unavailable", peer=name, error=str(exc))
            for scenario, metric, *_ in [r[2:] for r in ROWS]:
                notes[f"{scenario}/{metric}/{name}"] = "not run"
            continue
        versions = await trio.to_thread.run_sync(peer_versions, python, name)
        out.record(event="peer", peer=name, versions=versions, redis_url=peer_url)
        queues.append(Queue(name, python, peer_url, owns_db=True, log=out.log_path(name)))
    return queues


async def run_all(
    args: argparse.Namespace, url: str, out: Output, chosen: set[str], results: Results
) -> list[str]:
    """Every chosen scenario, ``--runs`` times; return the peers that ran."""
    s = Settings(runs=args.runs, scale=args.scale)
    notes: dict[str, str] = args.notes
    trunner_queue = Queue("trunner", sys.executable, url, log=out.log_path("trunner"))
    queues = [] if args.scenarios == ["ceiling"] else [trunner_queue]
    if chosen & {"throughput", "latency", "ceiling", "redis-body"}:
        queues.append(Queue("ceiling", sys.executable, url, log=out.log_path("ceiling")))
        chosen = chosen | ({"throughput", "latency"} if "ceiling" in chosen else set())
    if not args.peer and not chosen & {*BODY_SCENARIOS, *WORKFLOW_SCENARIOS}:  # celery: only those
        args.peer = [name for name in PEERS if name not in BODY_ONLY_PEERS]
    every_peer = await setup_peers(args, url, out, notes) if args.peers else []
    peers = [q for q in every_peer if q.name not in BODY_ONLY_PEERS]
    await rounds_1_to_3(args, out, chosen, results, queues, peers, s)
    await rounds_4_to_6(args, url, out, chosen, results, trunner_queue, peers, s)

    async def measure_body(scenario: str, impl: str, run: int, coro: Any) -> None:
        await measure(out, results, scenario, impl, run, coro)

    await bodies.rounds(chosen, args.runs, args.scale, trunner_queue, every_peer, measure_body)
    await workflow_runs.rounds(
        chosen, args.runs, args.scale, trunner_queue, every_peer, measure_body
    )
    for q in peers:
        if median_of(results, ("throughput", q.name), "enqueue_bulk_rate") is None:
            notes.setdefault(f"throughput/enqueue_bulk_rate/{q.name}", "no bulk API")
        if "clients" in chosen and median_of(results, ("clients", q.name), "bulk_rate") is None:
            notes.setdefault(f"clients/bulk_rate/{q.name}", "no bulk API")
        if median_of(results, ("latency", q.name), "p50_ms") is None:
            notes.setdefault(f"latency/p50_ms/{q.name}", "failed")
        if "redis-body" in chosen:
            missing = "not supported" if ("redis-body", q.name) in out.unsupported else "failed"
            for metric in ("process_rate", "cpu_ms_per_task", "hwm_mb"):
                if median_of(results, ("redis-body", q.name), metric) is None:
                    notes.setdefault(f"redis-body/{metric}/{q.name}", missing)
    return [q.name for q in peers]  # the summary's columns (19-21: bodies.summary; 22: workflows)


async def rounds_1_to_3(
    args: argparse.Namespace,
    out: Output,
    chosen: set[str],
    results: Results,
    queues: list[Queue],
    peers: list[Queue],
    s: Settings,
) -> None:
    """Scenarios 1-3 and 8 (and 7): the queues take turns, run after run."""
    with_peers = [q for q in queues if q.name != "ceiling"] + peers
    for run in range(1, args.runs + 1):
        if "throughput" in chosen:
            for q in queues + peers:
                await measure(out, results, "throughput", q.name, run, throughput(q, s))
        if "latency" in chosen:
            for q in queues + peers:
                await measure(out, results, "latency", q.name, run, latency(q, s))
        if "sleep" in chosen:
            for q in with_peers:
                await measure(out, results, "sleep", q.name, run, sleep_bound(q, s))
        if "redis-body" in chosen:
            for q in queues + peers:
                await measure(out, results, "redis-body", q.name, run, redis_body(q, s))
                if q.name == "trunner":  # the variant: two awaited commands, auto-pipelined
                    work = redis_body(q, s, "roundtrip_auto")
                    await measure(out, results, "redis-body", "trunner-auto", run, work)
                    # and without the handle: the body's own redis-py client, bridged
                    work = redis_body(q, s, "roundtrip_bridged")
                    await measure(out, results, "redis-body", "trunner-bridged", run, work)
        await rounds_9_to_11(out, chosen, results, queues, peers, s, run)


async def rounds_9_to_11(
    out: Output,
    chosen: set[str],
    results: Results,
    queues: list[Queue],
    peers: list[Queue],
    s: Settings,
    run: int,
) -> None:
    """Scenarios 9 (trunner and the peers with a result API), 10, 11, 13, 15, 16 and 17
    (trunner), and 18 (trunner's three clients and the asyncio peers)."""
    trunner_queue = next(q for q in queues if q.name == "trunner")
    if "results" in chosen:
        for q in [trunner_queue, *(p for p in peers if p.name in RESULT_PEERS)]:
            await measure(out, results, "results", q.name, run, handle_results(q, s))
    if "keep-result" in chosen:
        work = keep_result(trunner_queue, s, run)
        await measure(out, results, "keep-result", "trunner", run, work)
    if "cancel" in chosen:
        await measure(out, results, "cancel", "trunner", run, cancel(trunner_queue, s))
    if "pause" in chosen:
        await measure(out, results, "pause", "trunner", run, pause_latency(trunner_queue, s))
    if "middleware" in chosen:
        work = middleware(trunner_queue, s, run)
        await measure(out, results, "middleware", "trunner", run, work)
    if "limits" in chosen:
        await measure(out, results, "limits", "trunner", run, limits(trunner_queue, s, run))
    if "lanes" in chosen:
        await measure(out, results, "lanes", "trunner", run, lanes(trunner_queue, s, run))
    if "clients" in chosen:
        for client, (scenario, impl) in TRUNNER_CLIENTS.items():
            work = clients(trunner_queue, s, client)
            await measure(out, results, scenario, impl, run, work)
        for q in peers:
            if q.name in CLIENT_PEERS:
                await measure(out, results, "clients", q.name, run, clients(q, s))


async def rounds_4_to_6(
    args: argparse.Namespace,
    url: str,
    out: Output,
    chosen: set[str],
    results: Results,
    q: Queue,
    peers: list[Queue],
    s: Settings,
) -> None:
    """Scenario 4 (trunner and the peers, taking turns), 5 and 6 (trunner only)."""
    for run in range(1, args.runs + 1):
        if "memory" in chosen:
            for queue in [q, *peers]:
                work = memory(queue, s, args.memory_workers)
                await measure(out, results, "memory", queue.name, run, work)
        if "delayed" in chosen:
            work = delayed(url, s.n(2000), args.delayed_over)
            await measure(out, results, "delayed", "trunner", run, work)
        if "result-memory" in chosen:
            work = result_memory(q, s)
            await measure(out, results, "result-memory", "trunner", run, work)
        if "dashboard" in chosen:
            work = dashboard(url, s.n(100_000), s.n(100_000))
            await measure(out, results, "dashboard", "trunner", run, work)
        if "failover" in chosen:
            for mode in ("graceful", "crash"):
                work = failover(url, mode, out)
                await measure(out, results, f"failover-{mode}", "trunner", run, work)


async def main(args: argparse.Namespace, url: str, out: Output) -> None:
    chosen = set(SCENARIOS) if "all" in args.scenarios else set(args.scenarios)
    info = machine() | {"redis": redis_version(url), "redis_url": trunner.redact_url(url)}
    out.record(event="start", scenarios=sorted(chosen), runs=args.runs, scale=args.scale, **info)
    results: Results = {}
    args.notes = {}
    peers = await run_all(args, url, out, chosen, results)
    for (scenario, impl), runs in results.items():
        numeric = [k for k in runs[0] if all(isinstance(r.get(k), int | float) for r in runs)]
        medians = {k: statistics.median(r[k] for r in runs) for k in numeric}
        spread = {k: [min(r[k] for r in runs), max(r[k] for r in runs)] for k in numeric}
        out.record(
            event="median", scenario=scenario, impl=impl, runs=len(runs), **medians, spread=spread
        )
    load_end = loadavg()
    digest_end = source_digest()
    out.record(event="end", load_at_end=load_end, source_digest=digest_end)
    s = Settings(runs=args.runs, scale=args.scale)
    ideals = {
        "sleep/wall_s": s.n(2000) * 0.05 / s.concurrency,
        "sleep/over_ideal": 1.0,
        "memory/wall_s": s.n(100_000) * 0.5 / args.memory_workers,
    }
    table = summary(results, args.notes, peers, ideals)
    scale = f", task counts scaled by {args.scale}" if args.scale != 1 else ""
    header = (
        f"\ntrunner {info['trunner']} ({info['git']}), Python {info['python']}, "
        f"trio {info['trio']}, redis-py {info['redis_py']}, Redis {info['redis']}; "
        f"{info['cores']} cores ({info['cpu']}); load average {info['load_at_start']} at "
        f"start, {load_end} at end. Medians of {args.runs} run{'s' * (args.runs != 1)}{scale}; "
        f"scenario 4 with "
        f"num_workers={args.memory_workers}.\n"
    )
    if out.busy:
        header += (
            f"CPUs busy with other work just before each measurement: median "
            f"{statistics.median(out.busy):.0%}, max {max(out.busy):.0%} "
            f"(waited up to {out.quiet_wait:g} s for < 20 %).\n"
        )
    if digest_end != info["source_digest"]:
        header += "WARNING: trunner's source changed during the run (figures may mix versions).\n"
    text = header + ("\n" + table + "\n" if chosen - {*BODY_SCENARIOS, *WORKFLOW_SCENARIOS} else "")
    if chosen & set(BODY_SCENARIOS):
        text += "\nTask bodies that are not async (bench/bodies.py):\n\n" + bodies.summary(results)
    if chosen & set(WORKFLOW_SCENARIOS):
        flows = workflow_runs.summary(results, out.failed)
        text += "\nWorkflows: a chain and a chord (bench/workflow_runs.py):\n\n" + flows
    print(text)
    (out.directory / "summary.md").write_text(text)
    out.note(f"results in {out.directory}")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # No choices= here: argparse checks a list default against them, and refuses it.
    parser.add_argument(
        "scenarios", nargs="*", default=["all"], help=", ".join([*SCENARIOS, "all (default)"])
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--redis", help="use this Redis (default: start a private one)")
    parser.add_argument(
        "--peers", action="store_true", help="also run the peers (1-4, 8, 9, 18-22)"
    )
    parser.add_argument("--peer", action="append", choices=list(PEERS), help="only this peer")
    parser.add_argument(
        "--peer-db-offset",
        type=int,
        default=0,
        help="shift the peers' database numbers (1-6 by default)",
    )
    parser.add_argument(
        "--memory-workers",
        type=int,
        default=1000,
        help="workers of scenario 4, for every queue (default 1000: ideal 50 s)",
    )
    parser.add_argument(
        "--delayed-over",
        type=float,
        default=10.0,
        help="scenario 5: the delayed tasks fall due over this many seconds (default 10)",
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply the task counts (e.g. 0.1 for a smoke test)",
    )
    parser.add_argument("--out", type=Path, help="results directory")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=60.0,
        help="before each measurement wait up to this long for the CPUs to be < 20%% busy "
        "(other processes); 0: do not wait",
    )
    args = parser.parse_args()
    unknown = sorted(set(args.scenarios) - {*SCENARIOS, "all"})
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)} (choose from {', '.join(SCENARIOS)})")
    if args.peer:
        args.peers = True
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Output(args.out or HERE / "results" / stamp, args.quiet_wait)
    try:
        if args.redis:
            trio.run(main, args, args.redis, out)
        else:
            with redis_server(out) as url:
                trio.run(main, args, url, out)
    finally:
        out.close()


if __name__ == "__main__":
    cli()
