"""Worker processes for multi-process tests, seen from the test: start one, wait until it is
ready, kill or stop it, and read what its tasks logged."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

from ..conftest import REPO

__all__ = ["Worker", "read_log"]


class Worker:
    """A worker process (tests/processes/worker_process.py) of one group; its tasks log to
    ``log`` (see :func:`read_log`)."""

    def __init__(
        self,
        url: str,
        group: str,
        log: Path,
        options: dict[str, Any],
        module: str = "tests.processes.worker_process",
    ) -> None:
        """``module``: another worker of the same command line (``URL GROUP LOG
        OPTIONS``), such as ``tests.processes.otel_worker``."""
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                module,
                url,
                group,
                str(log),
                json.dumps(options),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )

    async def ready(self) -> None:
        assert self.process.stdout is not None
        line = await trio.to_thread.run_sync(self.process.stdout.readline)
        assert line.strip() == "ready", line

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()


def read_log(path: Path) -> list[tuple[int, str, Any]]:
    """The log the worker processes wrote: (pid, event, payload) per line."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [(int(p), e, json.loads(v)) for p, e, v in (line.split(" ", 2) for line in lines)]
