"""Scenarios 19-21 of bench/run.py: task bodies that are not ``async``, on every core.

- ``sync-io`` (19): 10 000 tasks whose body is a plain function blocking 10 ms in
  ``time.sleep(0.01)`` (task ``io``), enqueued the fastest way the queue has (not timed),
  drained by one worker process running them in ``THREADS`` threads, each queue by its
  own way of running sync functions: trunner's ``def`` tasks (``max_threads`` =
  ``num_workers``), saq's, taskiq's and streaq's sync tasks, celery's thread pool and
  dramatiq's worker threads. Ideal: 10 000 x 0.01 / 32 = 3.1 s (3 200 tasks/s).
- ``cpu`` (20): 400 tasks of the same pure-Python loop (``_driver.burn``, ~50 ms of one
  core), enqueued once the worker processes are ready, drained with both cores: trunner
  as two ``trunner worker`` processes of one slot each (``trunner-2proc``), as one
  ``trunner worker --processes 2`` (``trunner-supervised``: the same two workers under
  its supervisor; :func:`trunner_workers` is the one place that starts them) and as one
  worker running them with ``run_in="process"`` (``trunner-process``, ``max_processes``
  by default one per core, started when the first tasks need them), against celery's prefork pool
  (``-c 2``), the ``dramatiq`` command with 2 processes of one thread, and taskiq's
  process pool of 2. Each body reports its own start and end; the rate is n over the
  first start to the last end. Ideal: 2 cores / 50 ms = 40 tasks/s; the ceiling
  (``bare``): a ``multiprocessing.Pool`` of two processes handed the bodies one at a time,
  no Redis, no queue.
- ``cpu-timeout`` (21): a task spinning in pure Python under a time limit of 1 s
  (``_driver.spin``), one at a time: from the deadline to the failure reaching a waiter
  (the queue's result API, in another process) and to the core free (the body's process
  gone, or its loop stopped). trunner's timeout counts from the attempt's start (reported
  by a middleware: a process's start-up is inside the limit), the peers' from the body's
  start (celery's from the pool's receipt of the job, dramatiq's from the message handed to
  the actor). celery (prefork, ``time_limit``), dramatiq (``time_limit``) and taskiq
  (process pool, a ``timeout`` label); the first attempt of each measurement is a warm-up
  and not counted. The row ``trunner-executor`` is bench/process_kill.py: the process
  executor alone, in this process.

Every worker is a separate process (celery, dramatiq, taskiq: their ``q_<name>.py worker``;
trunner's CPU scenarios: the ``trunner worker`` command on ``queues/trunner_app.py``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import trio

HERE = Path(__file__).resolve().parent
QUEUES = HERE / "queues"
sys.path.insert(0, str(QUEUES))  # _driver's constants (standard library only)
from _driver import IO_SLEEP, SPIN_FOR, SPIN_LIMIT  # noqa: E402

BODY_SCENARIOS = ["sync-io", "cpu", "cpu-timeout"]
#: Peers installed for these scenarios only (their q_<name>.py has only these bodies): the
#: packages of the peer's virtual environment, and its Redis database.
BODY_ONLY_PEERS: dict[str, tuple[list[str], int]] = {
    "celery": (["celery[redis]==5.7.0", "hiredis"], 6),
}
SYNC_IO_PEERS = ["saq", "taskiq", "streaq", "celery", "dramatiq"]
CPU_PEERS = ["celery", "dramatiq", "taskiq"]
TIMEOUT_PEERS = ["celery", "dramatiq", "taskiq"]
#: Scenario 19: the threads every queue runs the sync bodies in (one worker process).
THREADS = 32
#: Scenario 20: the processes (cores) the CPU-bound bodies run in.
CORES = 2
#: Scenario 20: ~50 ms a body: two cores' ideal rate.
CPU_IDEAL_RATE = CORES / 0.05
#: Scenario 21: attempts measured per run (after one warm-up); taskiq's each take
#: SPIN_FOR (its bodies run to their end).
ATTEMPTS = 20
ATTEMPTS_BY_QUEUE = {"taskiq": 5}
#: Scenario 21: once a body's loop stopped, how long to watch for its process to end.
EXIT_GRACE = 0.5


class BodyError(Exception):
    """One measurement of these scenarios failed; the others go on."""


class Queue(Protocol):
    """What bench/run.py's ``Queue`` gives these scenarios."""

    name: str
    python: str
    url: str
    log: Path

    def command(self, queue: str, *args: str) -> list[str]: ...

    async def cleanup(self, queue: str) -> None: ...


Measure = Callable[[str, str, int, Coroutine[Any, Any, dict[str, Any]]], Awaitable[None]]


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def parse_line(line: bytes) -> dict[str, Any] | None:
    """A JSON object with an ``"event"`` (``trunner worker``'s ``{"ready": true}`` is one
    too), else None."""
    import json  # noqa: PLC0415

    try:
        value = json.loads(line)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    if "event" not in value and value.get("ready") is True:
        value["event"] = "ready"
    return value if "event" in value else None


# -- processes -------------------------------------------------------------------------------


@dataclass
class Proc:
    """A subprocess whose stdout lines (events) go to a shared channel, tagged by ``role``."""

    role: str
    process: trio.Process


class Procs:
    """Subprocesses started in one measurement: their events in one channel; stopped
    (SIGTERM, then SIGKILL after ``grace`` seconds) and reaped at the end."""

    def __init__(self, nursery: trio.Nursery, log: Path) -> None:
        self._nursery = nursery
        self._log = log
        self.send, self.receive = trio.open_memory_channel[dict[str, Any]](10_000)
        self.procs: list[Proc] = []

    async def start(self, role: str, command: list[str], *, stdin: bool = False) -> Proc:
        with open_log(self._log, command) as log:
            process = await trio.lowlevel.open_process(
                command,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                env=with_queues(),
            )
        proc = Proc(role, process)
        self.procs.append(proc)
        self._nursery.start_soon(self._read, proc)
        return proc

    async def _read(self, proc: Proc) -> None:
        stdout = proc.process.stdout
        assert stdout is not None
        buffer = b""
        while True:
            chunk = await stdout.receive_some(65536)
            if not chunk:
                await self.send.send({"event": "exited", "role": proc.role})
                return
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                event = parse_line(line)
                if event is not None:
                    event["role"] = proc.role
                    await self.send.send(event)

    async def event(self, *wanted: str) -> dict[str, Any]:
        """The next event named ``wanted``; a worker exiting first is a failure (a waiter
        exits once it has dispatched its last task)."""
        async for event in self.receive:
            if event["event"] in wanted:
                return event
            if event["event"] == "exited" and event["role"] == "worker":
                raise BodyError(f"{event['role']} exited early; see {self._log}")
            if event["event"] == "unsupported":
                raise BodyError(f"{event['role']}: unsupported: {event.get('reason')}")
        raise BodyError("no more events")

    async def wait_exit(self, seconds: float) -> None:
        """Give the processes ``seconds`` to exit by themselves (a worker that stops after
        its n-th task)."""
        with trio.move_on_after(seconds):
            for proc in self.procs:
                await proc.process.wait()

    async def stop(self, grace: float = 30.0) -> None:
        """SIGTERM each process still running (a graceful stop), SIGKILL after ``grace``."""
        with trio.CancelScope(shield=True):
            for proc in self.procs:
                if proc.process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.process.send_signal(signal.SIGTERM)
            with trio.move_on_after(grace):
                for proc in self.procs:
                    await proc.process.wait()
            for proc in self.procs:
                if proc.process.returncode is None:
                    proc.process.kill()
                    await proc.process.wait()

    async def close(self) -> None:
        """Close the pipes (once nothing reads them)."""
        with trio.CancelScope(shield=True):
            for proc in self.procs:
                for pipe in (proc.process.stdin, proc.process.stdout):
                    if pipe is not None:
                        await pipe.aclose()


@contextlib.asynccontextmanager
async def processes(log: Path) -> AsyncIterator[Procs]:
    procs: Procs | None = None
    try:
        async with trio.open_nursery() as nursery:
            procs = Procs(nursery, log)
            try:
                yield procs
            finally:
                await procs.stop()
                nursery.cancel_scope.cancel()
    finally:
        if procs is not None:
            await procs.close()


def trunner_workers(
    q: Queue, queue: str, processes: int, workers: int, *, supervised: bool = False
) -> list[list[str]]:
    """The one place that starts trunner's worker processes for scenarios 20 and 21:
    ``processes`` ``trunner worker`` commands (each ``--workers W``) on trunner_app.py; with
    ``supervised``, one ``trunner worker --processes N`` (its supervisor relays the worker
    processes' lines as JSON objects: ``--log-format json``)."""
    command = [
        *(q.python, "-m", "trunner", "worker", "trunner_app:settings"),
        *("--group", queue, "--redis", q.url, "--workers", str(workers)),
    ]
    if supervised:
        return [[*command, "--processes", str(processes), "--log-format", "json"]]
    return [command] * processes


async def enqueue_backlog(q: Queue, queue: str, task: str, n: int) -> str:
    """``n`` tasks enqueued the fastest way the queue has (not timed): how."""
    for mode in ("bulk", "single"):
        command = q.command(queue, "enqueue", "--task", task, "--mode", mode, "--n", str(n))
        with open_log(q.log, command) as log:
            result = await trio.run_process(
                command, capture_stdout=True, stderr=log, check=False, env=with_queues()
            )
        if result.returncode == 3:  # no bulk API: refused before anything was written (and
            continue  # no cleanup: a worker may be running on the queue already)
        if result.returncode != 0:
            raise BodyError(f"{q.name} enqueue failed (status {result.returncode}); see {q.log}")
        return mode
    raise BodyError(f"{q.name}: no way to enqueue")


def open_log(path: Path, command: list[str]) -> BinaryIO:
    """The log a subprocess's stderr is appended to, headed by its command line."""
    log = open(path, "ab")  # noqa: SIM115
    log.write(f"\n$ {' '.join(command)}\n".encode())
    log.flush()
    return log


def with_queues() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(QUEUES), *filter(None, [env.get("PYTHONPATH")])])
    return env


# -- scenario 19: sync bodies blocking 10 ms, in threads -------------------------------------


async def sync_io(q: Queue, scale: float) -> dict[str, Any]:
    """Scenario 19: ``n`` io tasks drained by one worker process with ``THREADS`` threads."""
    n = max(10, round(10_000 * scale))
    ideal = n * IO_SLEEP / THREADS
    queue = f"{q.name}-io-{uuid.uuid4().hex[:8]}"
    try:
        enqueued = await enqueue_backlog(q, queue, "io", n)
        args = f"--task io --n {n} --concurrency {THREADS} --batch {THREADS}".split()
        async with processes(q.log) as procs:
            await procs.start("worker", q.command(queue, "worker", *args))
            with trio.fail_after(600):
                done = await procs.event("done")
            await procs.wait_exit(30)
    finally:
        await q.cleanup(queue)
    return {
        "n": n,
        "threads": THREADS,
        "enqueued": enqueued,
        "process_rate": done["rate"],
        "wall_s": done["seconds"],
        "ideal_s": ideal,
        "over_ideal": round(done["seconds"] / ideal, 3),
        "cpu_ms_per_task": done["cpu_ms_per_task"],
        "hwm_mb": round(done["hwm_kb"] / 1024, 1),
    }


# -- scenario 20: CPU-bound bodies on both cores ---------------------------------------------

#: Scenario 20's trunner variants: (task, worker processes, slots of each, supervised).
TRUNNER_CPU = {
    "trunner-2proc": ("cpu", CORES, 1, False),
    "trunner-supervised": ("cpu", CORES, 1, True),
    "trunner-process": ("cpu_process", 1, CORES, False),
}


async def cpu(q: Queue, impl: str, scale: float) -> dict[str, Any]:
    """Scenario 20: ``n`` cpu tasks enqueued, then drained using both cores."""
    n = max(10, round(400 * scale))
    queue = f"{q.name}-cpu-{uuid.uuid4().hex[:8]}"
    task, count, slots, supervised = TRUNNER_CPU.get(impl, ("cpu", 1, 1, False))
    if impl == "bare":
        return await bare_cpu(q, n)
    if impl in TRUNNER_CPU:
        commands = trunner_workers(q, queue, count, slots, supervised=supervised)
        ready = len(commands)  # the supervisor reports once, when all its workers are
    else:
        args = f"--task cpu --n {n} --concurrency 1 --processes {CORES}"
        if q.name == "taskiq":  # its receiver hands the process pool at most this many
            args = args.replace("--concurrency 1", f"--concurrency {CORES}")
        commands = [q.command(queue, "worker", *args.split())]
        ready = CORES if q.name == "dramatiq" else 1  # dramatiq: each worker process
    bodies: list[dict[str, Any]] = []
    try:
        async with processes(q.log) as procs:
            for command in commands:
                await procs.start("worker", command)
            with trio.fail_after(120):  # every worker process started, then the backlog
                for _ in range(ready):
                    await procs.event("ready")
            enqueued = await enqueue_backlog(q, queue, task, n)
            with trio.fail_after(600):
                while len(bodies) < n:
                    bodies.append(await procs.event("body"))
    finally:
        await q.cleanup(queue)
    return cpu_figures(n, bodies, enqueued)


def cpu_figures(n: int, bodies: list[dict[str, Any]], enqueued: str) -> dict[str, Any]:
    first = min(b["start"] for b in bodies)
    last = max(b["end"] for b in bodies)
    seconds = last - first
    durations = [(b["end"] - b["start"]) * 1000 for b in bodies]
    pids = {b["pid"] for b in bodies}
    return {
        "n": n,
        "enqueued": enqueued,
        "process_rate": round(n / seconds, 2),
        "seconds": round(seconds, 3),
        "ideal_rate": CPU_IDEAL_RATE,
        "of_ideal": round(n / seconds / CPU_IDEAL_RATE, 3),
        "body_ms_p50": round(statistics.median(durations), 1),
        # what the bodies' own pace allows on two cores: the gap to it is the queue's
        "of_body_pace": round(n / seconds / (CORES * 1000 / statistics.median(durations)), 3),
        "body_processes": len(pids),
        "duplicates": n - len({b["i"] for b in bodies}),
    }


#: Scenario 20's ceiling: a pool of CORES forked processes handed the bodies one at a time
#: (``multiprocessing.Pool.imap_unordered``, chunks of 1): no Redis, no queue.
BARE = """
import multiprocessing, sys
from _driver import cpu_body
cores, n = map(int, sys.argv[1:])
with multiprocessing.get_context("fork").Pool(cores) as pool:
    for _ in pool.imap_unordered(cpu_body, ({"i": i} for i in range(n)), chunksize=1):
        pass
"""


async def bare_cpu(q: Queue, n: int) -> dict[str, Any]:
    """Scenario 20's ``bare`` row: the same bodies in a plain process pool of ``CORES``."""
    bodies: list[dict[str, Any]] = []
    async with processes(q.log) as procs:
        await procs.start("bare", [q.python, "-c", BARE, str(CORES), str(n)])
        with trio.fail_after(600):
            while len(bodies) < n:
                bodies.append(await procs.event("body"))
        await procs.wait_exit(10)
    return cpu_figures(n, bodies, "none")


# -- scenario 21: a CPU-bound body past its time limit ---------------------------------------


async def watch_pid(i: int, pid: int, send: trio.MemorySendChannel[dict[str, Any]]) -> None:
    """Report ``{"event": "gone", "i", "t"}`` when process ``pid`` ends (a pidfd: readable
    once the process has terminated, reaped or not)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:  # already gone
        await send.send({"event": "gone", "i": i, "t": time.time(), "role": "harness"})
        return
    try:
        await trio.lowlevel.wait_readable(fd)
        await send.send({"event": "gone", "i": i, "t": time.time(), "role": "harness"})
    finally:
        os.close(fd)


async def cpu_timeout(q: Queue, scale: float) -> dict[str, Any]:
    """Scenario 21: one spin task at a time (a waiter dispatches it when told, and awaits
    its failure); per attempt, the deadline (attempt start, or body start, + SPIN_LIMIT),
    the failure in the waiter, and the core free."""
    n = max(2, round(ATTEMPTS_BY_QUEUE.get(q.name, ATTEMPTS) * scale)) + 1
    queue = f"{q.name}-spin-{uuid.uuid4().hex[:8]}"
    if q.name == "trunner":
        workers = trunner_workers(q, queue, 1, 1)
    else:
        args = ["--task", "spin", "--n", "1", "--concurrency", "1", "--processes", "1"]
        workers = [q.command(queue, "worker", *args)]
    attempts: list[dict[str, Any]] = []
    try:
        async with processes(q.log) as procs:
            for command in workers:
                await procs.start("worker", command)
            command = q.command(queue, "timeouts", "--n", str(n))
            waiter = await procs.start("waiter", command, stdin=True)
            assert waiter.process.stdin is not None
            for i in range(n):
                await waiter.process.stdin.send_all(b"go\n")
                with trio.fail_after(SPIN_FOR + 60):
                    attempts.append(await one_attempt(procs, i))
            await waiter.process.stdin.aclose()
    finally:
        await q.cleanup(queue)
    return summarize_attempts(attempts[1:])


async def one_attempt(procs: Procs, i: int) -> dict[str, Any]:
    """The events of attempt ``i``, until it failed in the waiter and its core is free."""
    seen: dict[str, dict[str, Any]] = {}
    async with trio.open_nursery() as watcher:
        while not ("timeout" in seen and ("spin_stop" in seen or "gone" in seen)):
            event = await procs.event("spin_start", "spin_stop", "attempt_start", "timeout", "gone")
            if event.get("i") != i:
                continue  # a late line of an earlier attempt
            seen.setdefault(event["event"], event)
            if event["event"] == "spin_start":
                watcher.start_soon(watch_pid, i, event["pid"], procs.send)
        # The loop stopped: does its process end too (celery's, after SIGTERM, SIGKILL)?
        with trio.move_on_after(EXIT_GRACE):
            while "gone" not in seen:
                event = await procs.event("gone")
                if event["i"] == i:
                    seen["gone"] = event
        watcher.cancel_scope.cancel()
    if "spin_start" not in seen:
        raise BodyError(f"attempt {i} failed ({seen['timeout']['outcome']}) before its body ran")
    start = seen.get("attempt_start", seen["spin_start"])["t"]
    deadline = start + SPIN_LIMIT
    free = min(e["t"] for name, e in seen.items() if name in ("spin_stop", "gone"))
    stop = seen.get("spin_stop")
    natural = stop is not None and stop["raised"] is None and "gone" not in seen
    return {
        "failed_ms": (seen["timeout"]["t_failed"] - deadline) * 1000,
        "free_ms": (free - deadline) * 1000,
        "exit_ms": (seen["gone"]["t"] - deadline) * 1000 if "gone" in seen else None,
        "start_gap_ms": (seen["spin_start"]["t"] - start) * 1000,
        "stopped": not natural,
        "how": "killed"
        if "gone" in seen and free == seen["gone"]["t"]
        else (f"raised {stop['raised']}" if stop and stop["raised"] else "ran to its end"),
        "outcome": seen["timeout"]["outcome"][:80],
    }


def summarize_attempts(attempts: list[dict[str, Any]]) -> dict[str, Any]:
    failed = [a["failed_ms"] for a in attempts]
    free = [a["free_ms"] for a in attempts]
    gap = [a["start_gap_ms"] for a in attempts]
    ended = [a["exit_ms"] for a in attempts if a["exit_ms"] is not None]
    exits: dict[str, Any] = {"process_ended": len(ended)}
    if ended:
        exits |= {"exit_p50_ms": round(percentile(ended, 50), 1)}
        exits |= {"exit_p99_ms": round(percentile(ended, 99), 1)}
    return exits | {
        "attempts": len(attempts),
        "limit_s": SPIN_LIMIT,
        "failed_p50_ms": round(percentile(failed, 50), 1),
        "failed_p99_ms": round(percentile(failed, 99), 1),
        "failed_max_ms": round(max(failed), 1),
        "free_p50_ms": round(percentile(free, 50), 1),
        "free_p99_ms": round(percentile(free, 99), 1),
        "free_max_ms": round(max(free), 1),
        "stopped": sum(a["stopped"] for a in attempts),
        "start_gap_p50_ms": round(percentile(gap, 50), 1),
        "how": ", ".join(sorted({a["how"] for a in attempts})),
        "outcomes": " | ".join(sorted({a["outcome"] for a in attempts})),
    }


async def executor_alone(scale: float) -> dict[str, Any]:
    """Scenario 21's row ``trunner-executor``: bench/process_kill.py (the process executor
    alone, in this process: deadline to ``TaskTimeout``, the process killed and reaped)."""
    from process_kill import kill_latencies  # noqa: PLC0415 - trunner's internals

    late = await kill_latencies(max(2, round(ATTEMPTS * scale)))
    return {
        "attempts": len(late),
        "limit_s": 1.0,
        "failed_p50_ms": round(percentile(late, 50), 1),
        "failed_p99_ms": round(percentile(late, 99), 1),
        "failed_max_ms": round(max(late), 1),
        "free_p50_ms": round(percentile(late, 50), 1),
        "free_p99_ms": round(percentile(late, 99), 1),
        "free_max_ms": round(max(late), 1),
        "stopped": len(late),
    }


# -- the rounds and the summary ----------------------------------------------------------------


async def rounds(
    chosen: set[str],
    runs: int,
    scale: float,
    trunner_queue: Queue,
    peers: Sequence[Queue],
    measure: Measure,
) -> None:
    """Scenarios 19-21, ``runs`` times; the queues take turns within each run."""
    by_name = {p.name: p for p in peers}
    for run in range(1, runs + 1):
        if "sync-io" in chosen:
            for q in [trunner_queue, *(by_name[p] for p in SYNC_IO_PEERS if p in by_name)]:
                await measure("sync-io", q.name, run, sync_io(q, scale))
        if "cpu" in chosen:
            for impl in ["bare", *TRUNNER_CPU]:
                await measure("cpu", impl, run, cpu(trunner_queue, impl, scale))
            for q in (by_name[p] for p in CPU_PEERS if p in by_name):
                await measure("cpu", q.name, run, cpu(q, q.name, scale))
        if "cpu-timeout" in chosen:
            await measure("cpu-timeout", "trunner", run, cpu_timeout(trunner_queue, scale))
            await measure("cpu-timeout", "trunner-executor", run, executor_alone(scale))
            for q in (by_name[p] for p in TIMEOUT_PEERS if p in by_name):
                await measure("cpu-timeout", q.name, run, cpu_timeout(q, scale))


#: The summary's rows: label, unit, scenario, metric, decimals.
ROWS: list[tuple[str, str, str, str, int]] = [
    ("19 sync io: 10 000 x time.sleep(0.01), 32 threads", "tasks/s", "sync-io", "process_rate", 0),
    ("19 wall / ideal (3.1 s)", "x", "sync-io", "over_ideal", 2),
    ("19 worker CPU per task", "ms", "sync-io", "cpu_ms_per_task", 3),
    ("19 worker peak RSS", "MB", "sync-io", "hwm_mb", 1),
    ("20 cpu: 400 x ~50 ms pure Python, 2 cores", "tasks/s", "cpu", "process_rate", 1),
    ("20 of the ideal 40/s", "x", "cpu", "of_ideal", 2),
    ("20 body time, p50", "ms", "cpu", "body_ms_p50", 1),
    ("20 of the bodies' own pace on 2 cores", "x", "cpu", "of_body_pace", 2),
    ("20 processes the bodies ran in", "", "cpu", "body_processes", 0),
    (
        "21 cpu timeout 1 s: deadline to failure in a waiter, p50",
        "ms",
        "cpu-timeout",
        "failed_p50_ms",
        1,
    ),
    ("21 the same, p99", "ms", "cpu-timeout", "failed_p99_ms", 1),
    ("21 deadline to the core free, p50", "ms", "cpu-timeout", "free_p50_ms", 1),
    ("21 the same, p99", "ms", "cpu-timeout", "free_p99_ms", 1),
    ("21 deadline to the body's process ended, p50", "ms", "cpu-timeout", "exit_p50_ms", 1),
    ("21 attempts stopped before their end / measured", "", "cpu-timeout", "stopped", 0),
]


def summary(results: dict[tuple[str, str], list[dict[str, Any]]]) -> str:
    """A table of these scenarios: one column per queue (and trunner variant) that ran."""
    impls: list[str] = []
    for scenario, impl in results:
        if scenario in BODY_SCENARIOS and impl not in impls:
            impls.append(impl)
    if not impls:
        return ""
    order = ["trunner", "bare", *TRUNNER_CPU, "trunner-executor"]
    impls.sort(key=lambda x: (order.index(x) if x in order else len(order), x))
    lines = [
        "| scenario | unit | " + " | ".join(impls) + " |",
        "|" + "---|" * (len(impls) + 2),
    ]
    ran = {scenario for scenario, _ in results}
    for label, unit, scenario, metric, digits in ROWS:
        if scenario not in ran:
            continue
        cells = []
        for impl in impls:
            values = [
                r[metric]
                for r in results.get((scenario, impl), [])
                if isinstance(r.get(metric), int | float)
            ]
            if not values:
                cells.append("-")
                continue
            value = statistics.median(values)
            if metric == "stopped":
                attempts = statistics.median(r["attempts"] for r in results[(scenario, impl)])
                cells.append(f"{value:.0f} / {attempts:.0f}")
            elif digits == 0 or abs(value) >= 1000:
                cells.append(f"{value:,.0f}".replace(",", " "))
            else:
                cells.append(f"{value:.{digits}f}")
        lines.append(f"| {label} | {unit} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
