"""The executors of one run, one per place a task body may run in (``Task.run_in``): the
event loop, worker threads, and worker processes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING

import trio

from .._util import usable_cores
from .base import Executor, LoopExecutor, RunIn
from .processes import ProcessExecutor
from .threads import ThreadExecutor

if TYPE_CHECKING:
    from ..config import RunnerConfig

__all__ = ["default_executors", "executors_open"]


def default_executors(config: RunnerConfig) -> dict[RunIn, Executor]:
    """The executors ``config`` asks for (threads: ``max_threads``, else ``num_workers``;
    processes: ``max_processes``, else one per core this process may run on)."""
    threads = config.max_threads if config.max_threads is not None else config.num_workers
    processes = config.max_processes or usable_cores()
    return {
        "loop": LoopExecutor(),
        "thread": ThreadExecutor(threads),
        "process": ProcessExecutor(processes),
    }


@contextlib.asynccontextmanager
async def executors_open(executors: Mapping[RunIn, Executor]) -> AsyncIterator[None]:
    """The executors that hold resources (worker processes) opened for the block, and
    closed after it (shielded: the block's jobs have ended by then)."""
    processes = executors.get("process")
    if not isinstance(processes, ProcessExecutor):
        yield
        return
    await processes.open()
    try:
        yield
    finally:
        with trio.CancelScope(shield=True):
            await processes.aclose()
