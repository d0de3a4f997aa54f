"""Supervising is responsible for keeping the worker processes of ``trunner worker TARGET
--processes N`` running: N fresh interpreters (``python -m trunner worker ... --supervised``),
each the single-process worker, with its own runner and consumer name.

- A worker process that exits while it should run is started again, after a delay that
  doubles with each consecutive failure of its place (:class:`RestartPolicy`); one that
  fails to start (exits before it reported ready) ``max_boot_failures`` times in a row makes
  the supervisor give up: it stops the others and exits 1, saying why.
- Every line they write is relayed, on the supervisor's stdout or stderr, attributed to its
  worker (index and pid): prefixed in text, as fields of the object in JSON.
- The supervisor owns the signals. The first SIGINT or SIGTERM is passed to every worker
  process as SIGTERM (each drains, as one worker does), the second as SIGINT (each stops at
  once: another signal number, so the two never merge into one pending signal), later
  ones kill them (SIGKILL). It exits once all of them are gone. A worker process reads
  the two by kind, not by count (SIGTERM drains however many come): a service manager
  that signals every process of the unit (systemd's default ``KillMode``) adds one.
- Worker processes live in a process group of their own: a terminal's Ctrl-C, sent to the
  whole foreground group, reaches the supervisor alone, which passes it on once (otherwise
  each worker would see it twice, and the second stops it at once). Each watches its stdin,
  a pipe from the supervisor, and stops gracefully when the supervisor is gone, even
  SIGKILLed (see :mod:`trunner._worker.supervised`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import BinaryIO, Protocol

import attrs
import trio

from .._util import logger
from .._wording import death
from .http import Handler, Response, serve_http

__all__ = ["ChildCommand", "Command", "RestartPolicy", "Supervisor", "attribute", "supervise"]

#: Seconds the output and the ready report of a worker process that exited may take to
#: reach their end: more only when a process it started still holds them open.
RELAY_GRACE = 5.0
#: A line longer than this (bytes) is relayed in pieces.
MAX_LINE = 64 * 1024
#: What each escalation of the stop sends to the worker processes: drain, at once, kill.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGKILL)


@attrs.frozen
class RestartPolicy:
    """When a worker process that exited is started again, and when the supervisor gives up.

    A process that exits while it should run is started again after ``first_delay``
    seconds, doubled with each further consecutive failure of its place, up to
    ``max_delay``; once a process stayed ready ``stable_after`` seconds, its place's
    failures are forgotten. ``max_boot_failures`` processes in a row of one place that exit
    before they are ready (an import error, a bad option, Redis unreachable at start) make
    the supervisor give up.
    """

    first_delay: float = 0.5
    max_delay: float = 30.0
    stable_after: float = 60.0
    max_boot_failures: int = 3

    def delay(self, failures: int) -> float:
        """The delay before starting a place's process again after its ``failures``-th
        consecutive failure (1, 2, ...)."""
        doublings: int = min(max(failures - 1, 0), 32)
        return min(self.max_delay, self.first_delay * 2.0**doublings)


class Command(Protocol):
    def argv(self, index: int, status_fd: int) -> list[str]:
        """The command line of worker process ``index``, which writes its ready report
        (one JSON line, ``{"ready": true, ...}``) to the descriptor ``status_fd``."""
        ...


@attrs.frozen
class ChildCommand:
    """The command line of one worker process: ``trunner worker`` with the arguments the
    supervisor passes on, its own metrics port, and where it reports ready."""

    arguments: tuple[str, ...]
    """The target and the options every worker process takes."""
    metrics_port: int | None = None
    """The first metrics port: worker ``i`` serves ``/metrics`` on it plus ``i`` (0: each
    picks a free port)."""

    def argv(self, index: int, status_fd: int) -> list[str]:
        argv = [sys.executable, "-m", "trunner", "worker", *self.arguments]
        if self.metrics_port is not None:
            port = self.metrics_port + index if self.metrics_port else 0
            argv += ["--metrics-port", str(port)]
        return [*argv, "--supervised", f"{index}:{status_fd}"]


@attrs.define
class Child:
    """One place among the N: the worker process in it now, and its failures."""

    index: int
    process: trio.Process | None = None
    ready: bool = False
    ready_at: float = 0.0
    metrics: int | None = None
    failures: int = 0  # consecutive exits, for the restart delay
    boot_failures: int = 0  # consecutive exits before ready
    last_error: str = ""  # the last line its process wrote on stderr

    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None


def _exit_status(code: int) -> str:
    """``exited with code 1``, ``was killed by signal SIGKILL (9)``."""
    return f"exited with code {code}" if code >= 0 else f"was {death(code)}"


def attribute(line: bytes, index: int, pid: int, *, json_lines: bool, stream: str) -> bytes:
    """A line a worker process wrote, attributed to it: ``[worker 1 pid 4242] ...`` in
    text; in JSON, its object with ``worker`` and ``pid`` first (a line that is not a JSON
    object becomes ``{"worker", "pid", "stream", "message"}``)."""
    if not json_lines:
        return b"[worker %d pid %d] %s" % (index, pid, line)
    try:
        record = json.loads(line)
    except ValueError:
        record = None
    ours: dict[str, object] = {"worker": index, "pid": pid}
    if isinstance(record, dict):
        ours.update((k, v) for k, v in record.items() if k not in ours)
    else:
        ours.update(stream=stream, message=line.decode("utf-8", "replace"))
    return json.dumps(ours).encode()


class Supervisor:
    """Keeps ``processes`` worker processes running until :meth:`stop` (or giving up),
    then waits until every one has exited."""

    def __init__(
        self,
        command: Command,
        processes: int,
        *,
        env: Mapping[str, str] | None = None,
        policy: RestartPolicy = RestartPolicy(),
        json_lines: bool = False,
        stdout: BinaryIO | None = None,
        stderr: BinaryIO | None = None,
    ) -> None:
        if processes < 1:
            raise ValueError(f"processes must be >= 1, got {processes}")
        self.children = [Child(index) for index in range(processes)]
        self.policy = policy
        self.failure: str | None = None
        """Why the supervisor gave up, if it did."""
        self.all_ready = trio.Event()
        """Set once every worker process has been ready (each place once)."""
        self._command = command
        self._env = dict(env) if env is not None else None
        self._json = json_lines
        self._out = stdout or sys.stdout.buffer
        self._err = stderr or sys.stderr.buffer
        self._stopping = trio.Event()
        self._level = 0  # how far the stop escalated: 1 drain, 2 at once, 3 kill
        self._unclean = False

    # -- stopping ------------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        """Whether the stop began (asked for, or after giving up)."""
        return self._stopping.is_set()

    def stop(self, reason: str = "asked") -> None:
        """Stop the worker processes, one step further at each call: the first passes
        SIGTERM to each (they drain), the second SIGINT (they stop at once), later ones
        SIGKILL. Returns at once; :meth:`run` returns when all are gone."""
        self._level += 1
        count = sum(child.running() for child in self.children)
        if self._level == 1:
            logger.warning(
                "%s: stopping %d worker process(es) gracefully (each drains its running "
                "tasks); send it again to stop them at once",
                reason,
                count,
            )
        elif self._level == 2:
            logger.warning(
                "%s: stopping %d worker process(es) at once (running tasks are cancelled "
                "and released); send it again to kill them",
                reason,
                count,
            )
        else:
            logger.warning("%s: killing %d worker process(es) (SIGKILL)", reason, count)
        self._stopping.set()
        for child in self.children:
            self._signal(child)

    def _signal(self, child: Child) -> None:
        if self._level and child.process is not None and child.running():
            sent = STOP_SIGNALS[min(self._level, len(STOP_SIGNALS)) - 1]
            child.process.send_signal(sent)

    def _give_up(self, message: str) -> None:
        self.failure = message
        logger.error("giving up: %s", message)
        if not self._stopping.is_set():
            self.stop("giving up")

    # -- running -------------------------------------------------------------------------------

    def readiness(self) -> tuple[bool, str]:
        """Whether every worker process is ready, and a line saying how many are."""
        ready = sum(child.ready and child.running() for child in self.children)
        total = len(self.children)
        if self._stopping.is_set():
            return False, f"stopping ({ready} of {total} worker processes ready)"
        word = "ready" if ready == total else "starting"
        return ready == total, f"{word} ({ready} of {total} worker processes ready)"

    async def run(self) -> bool:
        """Run until stopped and every worker process has exited; True after a clean stop
        (each drained and exited 0, no second signal, no giving up)."""
        async with trio.open_nursery() as nursery:
            for child in self.children:
                nursery.start_soon(self._keep, child)
        return self.failure is None and self._level < 2 and not self._unclean

    async def _keep(self, child: Child) -> None:
        """Keep ``child``'s place filled until the stop."""
        while not self._stopping.is_set():
            try:
                code = await self._run_one(child)
            except OSError as exc:  # not started at all: no descriptors, no memory ...
                delay = self._not_started(child, exc)
            else:
                if self._stopping.is_set():
                    return
                delay = self._after_failure(child, code)
            if delay is None:
                return
            with trio.move_on_after(delay):
                await self._stopping.wait()

    async def _run_one(self, child: Child) -> int:
        """Start one worker process in ``child``'s place, relay its output, wait until it
        exited (and its output ended); its exit status."""
        status_read, status_write = os.pipe()
        try:
            process = await trio.lowlevel.open_process(
                self._command.argv(child.index, status_write),
                stdin=subprocess.PIPE,  # the watch: end of file once the supervisor is gone
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(status_write,),
                process_group=0,  # a terminal's signals reach the supervisor alone
                env=self._env,
            )
        except BaseException:
            os.close(status_read)
            raise
        finally:
            os.close(status_write)
        child.process, child.ready, child.last_error = process, False, ""
        self._signal(child)  # a stop that came while it was being started
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_report, child, trio.lowlevel.FdStream(status_read))
                nursery.start_soon(self._relay, child, process.stdout, self._out, "stdout")
                nursery.start_soon(self._relay, child, process.stderr, self._err, "stderr")
                code = await process.wait()
                nursery.cancel_scope.deadline = trio.current_time() + RELAY_GRACE
        finally:
            await trio.aclose_forcefully(process.stdin)  # if cancelled: it stops itself
        if self._stopping.is_set():
            logger.info("worker %d (pid %d) %s", child.index, process.pid, _exit_status(code))
            if code not in (0, -signal.SIGTERM):
                self._unclean = True
        return code

    def _after_failure(self, child: Child, code: int) -> float | None:
        """Count an exit that came before the stop; the delay before the next start, or
        None after giving up."""
        assert child.process is not None
        pid, how = child.process.pid, _exit_status(code)
        if not child.ready:
            child.boot_failures += 1
            # What it wrote last is most likely why (the command's one-line error).
            how += " before it was ready" + (f": {child.last_error}" if child.last_error else "")
            if child.boot_failures >= self.policy.max_boot_failures:
                self._give_up(
                    f"worker {child.index} failed to start {child.boot_failures} times in a "
                    f"row; the last one {how}"
                )
                return None
        elif trio.current_time() - child.ready_at >= self.policy.stable_after:
            child.failures = 0
        child.failures += 1
        delay = self.policy.delay(child.failures)
        logger.warning(
            "worker %d (pid %d) %s; starting it again in %.3g s", child.index, pid, how, delay
        )
        return delay

    def _not_started(self, child: Child, error: OSError) -> float | None:
        """Count a worker process that could not be started as a failure to start; the
        delay before the next try, or None after giving up."""
        child.boot_failures += 1
        how = f"could not be started: {type(error).__name__}: {error}"
        if child.boot_failures >= self.policy.max_boot_failures:
            self._give_up(
                f"worker {child.index} failed to start {child.boot_failures} times in a "
                f"row; the last one {how}"
            )
            return None
        child.failures += 1
        delay = self.policy.delay(child.failures)
        logger.warning("worker %d %s; trying again in %.3g s", child.index, how, delay)
        return delay

    async def _read_report(self, child: Child, stream: trio.lowlevel.FdStream) -> None:
        """Read the worker process's ready report (one JSON line); end of file first: it
        exited before it was ready."""
        data = b""
        async with stream:
            while b"\n" not in data and len(data) < MAX_LINE:
                chunk = await stream.receive_some()
                if not chunk:
                    return
                data += chunk
        try:
            report = json.loads(data.split(b"\n", 1)[0])
        except ValueError:
            report = None
        if not isinstance(report, dict) or report.get("ready") is not True:
            logger.warning("worker %d sent an unreadable ready report: %r", child.index, data)
            return
        metrics = report.get("metrics")
        child.metrics = metrics if isinstance(metrics, int) else None
        child.ready, child.ready_at, child.boot_failures = True, trio.current_time(), 0
        pid = child.process.pid if child.process is not None else 0
        where = f"; metrics on port {child.metrics}" if child.metrics is not None else ""
        logger.info("worker %d (pid %d) ready%s", child.index, pid, where)
        if all(place.ready for place in self.children):
            self.all_ready.set()

    async def _relay(
        self, child: Child, stream: trio.abc.ReceiveStream, out: BinaryIO, name: str
    ) -> None:
        """Write each line of ``stream`` on ``out``, attributed to the worker process."""
        assert child.process is not None
        pid = child.process.pid
        pending = b""
        async with stream:
            async for chunk in stream:
                *lines, pending = (pending + chunk).split(b"\n")
                if len(pending) > MAX_LINE:
                    lines, pending = [*lines, pending], b""
                self._write(child, pid, lines, out, name)
        if pending:
            self._write(child, pid, [pending], out, name)

    def _write(self, child: Child, pid: int, lines: list[bytes], out: BinaryIO, name: str) -> None:
        if not lines:
            return
        if name == "stderr" and (text := [line for line in lines if line.strip()]):
            child.last_error = text[-1].decode("utf-8", "replace").strip()
        attributed = (
            attribute(line, child.index, pid, json_lines=self._json, stream=name) + b"\n"
            for line in lines
        )
        try:
            out.write(b"".join(attributed))
            out.flush()
        except OSError:
            pass  # nobody reads the supervisor's output any more (as logging does: go on)


async def supervise(
    supervisor: Supervisor,
    *,
    health_port: int | None = None,
    host: str = "127.0.0.1",
    on_ready: Callable[[Mapping[str, object]], None] = lambda _info: None,
) -> bool:
    """Run ``supervisor`` until SIGINT/SIGTERM (each one escalates :meth:`Supervisor.stop`)
    and its worker processes are gone; True after a clean stop.

    ``health_port``: the supervisor serves ``/healthz`` (200 while it runs) and ``/readyz``
    (200 while every worker process is ready), bound before any process starts.
    ``on_ready`` gets the processes' pids and ports once all are ready.
    """
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            ports: dict[str, object] = {}
            if health_port is not None:
                routes = _health_routes(supervisor)
                ports["health"] = await nursery.start(serve_http, routes, health_port, host)

            async def watch_signals() -> None:
                async for signum in signals:
                    supervisor.stop(signal.Signals(signum).name)

            async def announce() -> None:
                await supervisor.all_ready.wait()
                if supervisor.stopping:
                    return
                children = supervisor.children
                info: dict[str, object] = {"processes": len(children), **ports}
                info["pids"] = [c.process.pid if c.process else None for c in children]
                if any(child.metrics is not None for child in children):
                    info["metrics"] = [child.metrics for child in children]
                on_ready(info)

            nursery.start_soon(watch_signals)
            nursery.start_soon(announce)
            clean = await supervisor.run()
            nursery.cancel_scope.cancel()
    return clean


def _health_routes(supervisor: Supervisor) -> dict[str, Handler]:
    async def healthz() -> Response:
        await trio.lowlevel.checkpoint()
        return 200, "text/plain", b"ok\n"

    async def readyz() -> Response:
        await trio.lowlevel.checkpoint()
        ready, text = supervisor.readiness()
        return (200 if ready else 503), "text/plain", f"{text}\n".encode()

    return {"/healthz": healthz, "/readyz": readyz}
