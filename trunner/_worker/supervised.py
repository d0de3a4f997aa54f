"""A worker process under a supervisor is responsible for its side of the supervision
(``trunner worker --processes N`` starts each with ``--supervised INDEX:FD``, see
:mod:`trunner._worker.supervisor`): a consumer name of its own, its ready report on the
descriptor ``FD``, and stopping gracefully once the supervisor is gone.

The supervisor is watched through this process's stdin, a pipe whose other end only the
supervisor holds: the kernel closes it when the supervisor exits however it ends (SIGKILL
included), and a read then sees end of file. Unlike ``PR_SET_PDEATHSIG``, this needs no
Linux-only call, leaves no window between the start and the watch (a supervisor gone
before the watch begins is seen at once), and does not fire when the thread that started
the process exits (Trio starts processes from a worker thread, which ends when idle).
"""

from __future__ import annotations

import json
import os

import attrs
import trio

from .._util import logger
from ..config import RunnerConfig

__all__ = ["Supervised", "wait_supervisor_gone"]


@attrs.frozen
class Supervised:
    """This worker process's place among the supervisor's: ``--supervised INDEX:FD``."""

    index: int
    status_fd: int

    @classmethod
    def parse(cls, value: str) -> Supervised:
        index, _, fd = value.partition(":")
        try:
            return cls(int(index), int(fd))
        except ValueError:
            raise ValueError(f"--supervised takes INDEX:FD, got {value!r}") from None

    def config(self, config: RunnerConfig) -> RunnerConfig:
        """``config`` with a consumer name of this process's own: the settings' name (when
        they give one, every worker process would share it) followed by ``-INDEX``."""
        if config.consumer_name is None:
            return config  # the default name holds the pid: unique already
        return attrs.evolve(config, consumer_name=f"{config.consumer_name}-{self.index}")

    def report_ready(self, ports: dict[str, int]) -> None:
        """Tell the supervisor this process is ready (one JSON line), and close the pipe."""
        line = json.dumps({"ready": True, **ports}).encode() + b"\n"
        try:
            os.write(self.status_fd, line)  # under PIPE_BUF: written whole, or not at all
        except OSError:
            pass  # the supervisor is gone: wait_supervisor_gone stops this process
        finally:
            os.close(self.status_fd)


async def wait_supervisor_gone() -> None:
    """Return once the supervisor is gone (end of file on stdin), with this process's
    output sent to ``/dev/null``: nobody reads its pipes any more, and writing to them
    would fail (the log lines of the drain, a task's ``print``)."""
    stdin = trio.lowlevel.FdStream(os.dup(0))
    async with stdin:
        while await stdin.receive_some():
            pass  # the supervisor writes nothing; read on until the end
    logger.warning("the supervisor is gone: stopping gracefully")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
