"""The executors of one run, one per place a task body may run in (``Task.run_in``): the
event loop, worker threads, and worker processes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Executor, LoopExecutor, RunIn
from .threads import ThreadExecutor

if TYPE_CHECKING:
    from ..config import RunnerConfig

__all__ = ["default_executors"]


def default_executors(config: RunnerConfig) -> dict[RunIn, Executor]:
    """The executors ``config`` asks for (threads: ``max_threads``, else ``num_workers``)."""
    threads = config.max_threads if config.max_threads is not None else config.num_workers
    return {"loop": LoopExecutor(), "thread": ThreadExecutor(threads)}
