"""The supervisor of ``trunner worker --processes N`` (trunner/_worker/supervisor.py), with
small stand-in worker processes (``python -c``): its restart policy, how it relays and
attributes their output, when it gives up, and how its stop escalates. The real worker
processes, on real Redis, are tests/system/test_supervisor.py's."""

from __future__ import annotations

import io
import json
import os
import signal
import sys

import attrs
import pytest
import trio

from trunner._worker.supervised import Supervised
from trunner._worker.supervisor import ChildCommand, RestartPolicy, Supervisor, attribute
from trunner.cli import main
from trunner.config import RunnerConfig

#: Stand-in worker processes report ready as ``trunner worker --supervised`` does.
READY = "import os, sys; os.write(int(sys.argv[2]), b'{\"ready\": true}\\n')\n"
#: Short delays, so a test of restarts takes milliseconds.
QUICK = RestartPolicy(first_delay=0.01, max_delay=0.02)


@attrs.frozen
class Script:
    """A stand-in worker process: ``python -c code INDEX STATUS_FD``."""

    code: str

    def argv(self, index: int, status_fd: int) -> list[str]:
        return [sys.executable, "-c", self.code, str(index), str(status_fd)]


class Output(io.BytesIO):
    """What the supervisor relays; tests wait for a piece of it to arrive."""

    def __init__(self) -> None:
        super().__init__()
        self._lot = trio.lowlevel.ParkingLot()

    def write(self, data: bytes) -> int:  # type: ignore[override]
        written = super().write(data)
        self._lot.unpark_all()
        return written

    async def wait_for(self, piece: bytes, count: int = 1) -> None:
        while self.getvalue().count(piece) < count:
            await self._lot.park()

    def lines(self) -> list[bytes]:
        return self.getvalue().splitlines()


def test_the_restart_delay_doubles_up_to_its_cap() -> None:
    policy = RestartPolicy(first_delay=0.5, max_delay=30.0)
    assert [policy.delay(n) for n in range(1, 9)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert policy.delay(10_000) == 30.0  # no overflow after a long crash loop


def test_lines_are_attributed_to_their_worker_process() -> None:
    assert attribute(b"INFO hello", 1, 42, json_lines=False, stream="stderr") == (
        b"[worker 1 pid 42] INFO hello"
    )
    record = json.loads(
        attribute(b'{"level": "INFO", "pid": 7}', 1, 42, json_lines=True, stream="stderr")
    )
    assert list(record) == ["worker", "pid", "level"]
    assert record == {"worker": 1, "pid": 42, "level": "INFO"}  # the true pid wins
    for line in (b"Traceback (most recent call last):", b"[1, 2]", b"\xff oops"):
        record = json.loads(attribute(line, 0, 42, json_lines=True, stream="stdout"))
        assert record["worker"] == 0
        assert record["stream"] == "stdout"
        assert record["message"] == line.decode("utf-8", "replace")


def test_each_worker_process_gets_its_metrics_port_and_place() -> None:
    command = ChildCommand(("app:settings", "--group", "g"), metrics_port=9100)
    assert command.argv(2, 7)[1:] == [
        "-m", "trunner", "worker", "app:settings", "--group", "g",
        "--metrics-port", "9102", "--supervised", "2:7",
    ]  # fmt: skip
    assert "--metrics-port" not in ChildCommand(("app:settings",)).argv(0, 7)
    any_port = ChildCommand(("app:settings",), metrics_port=0).argv(3, 7)
    assert any_port[any_port.index("--metrics-port") + 1] == "0"


def test_a_supervised_worker_process_has_a_consumer_name_of_its_own() -> None:
    place = Supervised.parse("3:11")
    assert place == Supervised(3, 11)
    named = RunnerConfig(consumer_group="g", consumer_name="billing")
    assert place.config(named).consumer_name == "billing-3"
    default = RunnerConfig(consumer_group="g")
    assert place.config(default) is default  # the default name holds the pid already
    with pytest.raises(ValueError, match="INDEX:FD"):
        Supervised.parse("3")


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--processes", "-1"], "expected a number >= 0"),
        (["--processes", "many"], "expected a number >= 0"),
    ],
)
def test_processes_takes_a_count(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["worker", "app:settings", *argv])
    assert exited.value.code == 2
    assert error in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--redis", "memory://x"], "the worker processes of --processes cannot share it"),
        (["--redis", "redis://h", "--metrics-port", "65535"], "past the last port (65535)"),
    ],
)
def test_what_cannot_work_with_processes_is_refused_before_any_starts(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["worker", "no_such_module_xyz:settings", "--processes", "2", *argv]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("trunner worker: ValueError: "), err
    assert error in err


def test_processes_0_is_one_per_core(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 2, 5})  # a CPU set of 3
    argv = ["--redis", "redis://h", "--metrics-port", "65534"]
    assert main(["worker", "no_such_module_xyz:settings", "--processes", "0", *argv]) == 1
    assert "--metrics-port 65534 with 3 worker processes" in capsys.readouterr().err


async def test_every_line_is_relayed_attributed_and_in_order() -> None:
    code = READY + (
        "for i in range(20000): print(i)\n"
        "print('last words', file=sys.stderr)\n"
        "sys.stdout.write('no newline at the end')\n"
    )
    out, err = Output(), Output()
    supervisor = Supervisor(Script(code), 1, policy=QUICK, stdout=out, stderr=err)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(supervisor.run)
        await out.wait_for(b"no newline at the end")
        supervisor.stop()
    lines = out.lines()
    prefix = lines[0].split(b"] ", 1)[0] + b"] "
    assert prefix.startswith(b"[worker 0 pid ")
    assert lines[:20000] == [prefix + str(i).encode() for i in range(20000)]
    assert lines[20000] == prefix + b"no newline at the end"
    assert err.lines()[0] == prefix + b"last words"


class Gone(io.BytesIO):
    """An output nobody reads any more: a closed pipe."""

    def write(self, data: bytes) -> int:  # type: ignore[override]
        raise BrokenPipeError(32, "Broken pipe")


async def test_an_output_nobody_reads_does_not_stop_the_supervisor() -> None:
    code = READY + "print('lost', flush=True); print('seen', file=sys.stderr, flush=True)\n"
    code += "import time; time.sleep(60)\n"
    err = Output()
    supervisor = Supervisor(Script(code), 1, policy=QUICK, stdout=Gone(), stderr=err)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(supervisor.run)
        await err.wait_for(b"seen")
        supervisor.stop()
    assert supervisor.failure is None


async def test_it_gives_up_on_worker_processes_that_fail_to_start() -> None:
    code = "import sys; print('ImportError: no app here', file=sys.stderr); sys.exit(3)"
    err = Output()
    supervisor = Supervisor(Script(code), 2, policy=QUICK, stderr=err)
    assert await supervisor.run() is False
    assert supervisor.failure is not None
    assert "failed to start 3 times in a row" in supervisor.failure
    assert "exited with code 3 before it was ready: ImportError: no app here" in supervisor.failure
    # It gave up at the third failure of a place: not before, and with no fourth start.
    starts = {line.split(b"]")[0] for line in err.lines()}
    per_place = [sum(s.startswith(b"[worker %d " % i) for s in starts) for i in (0, 1)]
    assert max(per_place) == 3


@attrs.frozen
class Unstartable:
    """A worker process that cannot be started at all (as when descriptors run out)."""

    def argv(self, index: int, status_fd: int) -> list[str]:
        return ["/nonexistent/trunner-worker", str(index), str(status_fd)]


async def test_a_worker_process_that_cannot_be_started_counts_as_failing_to_start() -> None:
    """An error starting the process (no descriptors, no memory, a missing interpreter)
    is a failure to start, retried with the backoff and given up on like one; the
    supervisor itself does not crash on it."""
    supervisor = Supervisor(Unstartable(), 2, policy=QUICK)
    assert await supervisor.run() is False
    assert supervisor.failure is not None
    assert "failed to start 3 times in a row" in supervisor.failure
    assert "could not be started: FileNotFoundError" in supervisor.failure
    assert max(child.boot_failures for child in supervisor.children) == 3


async def test_a_worker_process_that_dies_after_it_was_ready_is_started_again() -> None:
    """Crashes after a ready report are restarted for ever (with backoff), never given up:
    only failures to start are."""
    code = READY + "import os, signal; print('up', flush=True); os.kill(os.getpid(), 9)\n"
    out = Output()
    supervisor = Supervisor(Script(code), 1, policy=QUICK, stdout=out)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(supervisor.run)
        await out.wait_for(b"up", 5)
        supervisor.stop()
    assert supervisor.failure is None
    assert supervisor.children[0].failures >= 4
    assert len({line.split(b"]")[0] for line in out.lines()}) >= 5, "five processes"


async def test_the_stop_escalates_from_sigterm_to_sigint_to_sigkill() -> None:
    code = READY + (
        "import signal, time\n"
        "def seen(signum, frame): print(signal.Signals(signum).name, flush=True)\n"
        "signal.signal(signal.SIGTERM, seen)\n"
        "signal.signal(signal.SIGINT, seen)\n"
        "print('listening', flush=True)\n"
        "while True: time.sleep(1)\n"
    )
    out = Output()
    supervisor = Supervisor(Script(code), 2, policy=QUICK, stdout=out)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(supervisor.run)
        await out.wait_for(b"listening", 2)
        supervisor.stop()
        await out.wait_for(b"SIGTERM", 2)
        assert supervisor.readiness() == (False, "stopping (2 of 2 worker processes ready)")
        supervisor.stop()
        await out.wait_for(b"SIGINT", 2)
        supervisor.stop()  # the third: SIGKILL; run returns once both are gone
    assert all(child.process and child.process.returncode == -signal.SIGKILL
               for child in supervisor.children)  # fmt: skip
    assert supervisor.failure is None
