"""Worker processes for the reliability suite, and the producer side of its history.

::

    async with open_fleet(url, log_dir, config) as fleet:
        await fleet.start(3)                     # `trunner worker` processes, ready
        await feed(client, fleet.history, payloads(1000, "t"))
        fleet.kill(fleet.workers[0])             # SIGKILL, recorded as a crash
        await fleet.wait_finished(fleet.history.acknowledged())
        report = await fleet.check(raw, group)   # once the group drained

Leaving the block checks that every worker not killed or stopped by the test is still
running (none crashed or exited by itself), stops them with SIGTERM, and expects exit code
0 from each. On failure the tail of every worker's log (stderr, INFO) is printed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

import trunner
from trunner.keys import Keys

from ..conftest import redis_state
from ..processes.reliability_worker import LOG_ENV, OPTIONS_ENV
from .history import FINISHED, History, LogReader, Report

__all__ = ["Fleet", "WorkerProcess", "feed", "leftover", "open_fleet", "payloads"]

ROOT = Path(__file__).resolve().parent.parent
#: How often files and Redis are looked at while waiting.
POLL = 0.05


class WorkerProcess:
    """One ``trunner worker tests.processes.reliability_worker:settings`` process."""

    def __init__(self, url: str, log_dir: Path, options: dict[str, Any], name: str) -> None:
        self.name = name
        self.stderr_path = log_dir / f"{name}.stderr"
        env = {**os.environ, LOG_ENV: str(log_dir), OPTIONS_ENV: json.dumps(options)}
        args = ["-m", "trunner", "worker", "tests.processes.reliability_worker:settings"]
        with self.stderr_path.open("wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, *args, "--redis", url, "--log-level", "INFO"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        self.pid = self.process.pid
        #: Set when the test ended the process on purpose (killed or stopped).
        self.ended_by_test = False
        self.is_ready = False

    async def ready(self) -> None:
        assert self.process.stdout is not None
        line = await trio.to_thread.run_sync(self.process.stdout.readline, abandon_on_cancel=True)
        try:
            ready = json.loads(line).get("ready") is True
        except ValueError:
            ready = False
        assert ready, f"worker {self.name} did not start: {line!r}\n{self.log_tail()}"
        self.is_ready = True

    def kill(self) -> float:
        """SIGKILL; return the wall-clock time by which the process was dead."""
        self.ended_by_test = True
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        return time.time()

    async def terminate(self) -> int:
        """SIGTERM (a graceful stop by the command line); return the exit code."""
        self.ended_by_test = True
        self.process.send_signal(signal.SIGTERM)
        return await trio.to_thread.run_sync(self.process.wait, abandon_on_cancel=True)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        text = self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""
        tail = "\n".join(text.splitlines()[-lines:])
        return f"--- {self.name} (pid {self.pid}, exit {self.process.poll()}) ---\n{tail}"

    def close(self) -> None:
        if self.alive:
            self.process.kill()
            self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()


class Fleet:
    """The worker processes of one scenario, sharing one log directory and one history."""

    def __init__(self, url: str, log_dir: Path, options: dict[str, Any]) -> None:
        self.url = url
        self.log_dir = log_dir
        self.options = options
        self.history = History()
        self.reader = LogReader(log_dir)
        self.workers: list[WorkerProcess] = []

    async def start(
        self, count: int, url: str | None = None, options: dict[str, Any] | None = None
    ) -> list[WorkerProcess]:
        """Start ``count`` workers (on ``url``, default the fleet's; with ``options``,
        default the fleet's) and wait until ready."""
        new = [
            WorkerProcess(
                url or self.url, self.log_dir, options or self.options, f"w{len(self.workers) + i}"
            )
            for i in range(count)
        ]
        self.workers.extend(new)
        async with trio.open_nursery() as nursery:
            for worker in new:
                nursery.start_soon(worker.ready)
        return new

    @property
    def running(self) -> list[WorkerProcess]:
        return [w for w in self.workers if not w.ended_by_test]

    @property
    def ready(self) -> list[WorkerProcess]:
        """The running workers that have started, oldest first."""
        return [w for w in self.running if w.is_ready]

    def kill(self, worker: WorkerProcess) -> None:
        """SIGKILL ``worker`` and record the crash in the history."""
        self.history.crashed(worker.pid, worker.kill())

    def poll(self) -> None:
        """Add the events the workers appended since the last poll to the history."""
        self.history.extend(self.reader.poll())

    def in_flight(self, pid: int) -> set[str]:
        """Task ids whose run on ``pid`` started and has not ended (as far as logged)."""
        self.poll()
        runs = self.history.runs()
        return {i for i, rs in runs.items() for r in rs if r.pid == pid and r.end is None}

    async def wait_running(self, worker: WorkerProcess) -> None:
        """Wait until ``worker`` is running at least one task (as far as it logged)."""
        while not self.in_flight(worker.pid):  # noqa: ASYNC110 - polling the worker's log
            await trio.sleep(0.005)

    def finished(self) -> set[str]:
        self.poll()
        return {e.id for e in self.history.events if e.kind == FINISHED}

    async def wait_finished(self, ids: Iterable[str]) -> None:
        """Wait until every task of ``ids`` finished at least once."""
        wanted = set(ids)

        async def done() -> bool:
            await trio.lowlevel.checkpoint()
            return wanted <= self.finished()

        await redis_state(done, poll=POLL)

    async def wait_count(self, count: int) -> None:
        """Wait until at least ``count`` distinct tasks finished."""

        async def done() -> bool:
            await trio.lowlevel.checkpoint()
            return len(self.finished()) >= count

        await redis_state(done, poll=POLL)

    async def check(self, raw: Any, group: str, *, drain_timeout: float = 20.0) -> Report:
        """Wait until the group's stream and pending list are empty (at most
        ``drain_timeout``), then check the history against what is left in Redis."""
        stream = Keys("trunner", group).stream

        async def drained() -> bool:
            await trio.lowlevel.checkpoint()
            return bool(raw.xlen(stream) == 0 and raw.xpending(stream, group)["pending"] == 0)

        with trio.move_on_after(drain_timeout):
            await redis_state(drained, poll=POLL)
        self.poll()
        return self.history.check(leftover=leftover(raw, group))

    async def stop_all(self) -> None:
        """SIGTERM every worker still running; each must exit with code 0."""
        crashed = [w.log_tail() for w in self.running if not w.alive]
        assert not crashed, "workers exited by themselves:\n" + "\n".join(crashed)
        codes: dict[str, int] = {}

        async def stop(worker: WorkerProcess) -> None:
            codes[worker.name] = await worker.terminate()

        async with trio.open_nursery() as nursery:
            for worker in self.running:
                nursery.start_soon(stop, worker)
        bad = {name: code for name, code in codes.items() if code != 0}
        assert not bad, f"exit codes {bad}\n" + self.log_tails()

    def log_tails(self) -> str:
        return "\n".join(w.log_tail() for w in self.workers)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()


@asynccontextmanager
async def open_fleet(url: str, log_dir: Path, options: dict[str, Any]) -> AsyncIterator[Fleet]:
    fleet = Fleet(url, log_dir, options)
    try:
        yield fleet
        await fleet.stop_all()
    except BaseException:
        print(fleet.log_tails())
        raise
    finally:
        fleet.close()


def payloads(count: int, prefix: str, start: int = 0, **fields: Any) -> list[dict[str, Any]]:
    """Task payloads with unique ids ``<prefix><n>``."""
    return [{"id": f"{prefix}{n}", **fields} for n in range(start, start + count)]


async def feed(
    client: trunner.Client,
    history: History,
    items: list[dict[str, Any]],
    *,
    batch: int = 50,
    interval: float = 0.0,
    task: str = "work",
) -> None:
    """Dispatch ``items`` in batches, ``interval`` apart, recording the history: a batch
    whose call raised RedisUnavailable is indeterminate, and is not sent again."""
    for start in range(0, len(items), batch):
        chunk = items[start : start + batch]
        ids = [p["id"] for p in chunk]
        history.invoke(ids)
        try:
            await client.dispatch_many(task, chunk)
        except trunner.RedisUnavailable:
            history.fail(ids)
        else:
            history.ok(ids)
        await trio.sleep(interval)


def leftover(raw: Any, group: str) -> set[str]:
    """Entry ids still in the group's stream or pending list."""
    stream = Keys("trunner", group).stream
    ids = {entry_id.decode() for entry_id, _ in raw.xrange(stream)}
    pending = raw.xpending_range(stream, group, "-", "+", 10_000)
    return ids | {p["message_id"].decode() for p in pending}
