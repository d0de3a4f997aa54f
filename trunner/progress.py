"""Task code reports its progress: ``await trunner.report_progress(0.5, "decoded")``.

The progress goes into the task's record, where :meth:`TaskHandle.status
<trunner.TaskHandle.status>` and ``trunner inspect`` read it. Reports are throttled: at
most one write per attempt every :data:`PROGRESS_INTERVAL` seconds (a report within it is
kept, and written by the next report or with the task's outcome); the first report of
``1.0`` is always written at once (later ones are throttled as any other). A report never
fails the task: a Redis error is logged.
"""

from __future__ import annotations

import math
import time
from typing import Protocol, cast

import trio

from ._context import Given, _current_message, running_runner
from ._engine.holdings import Job
from .errors import RunnerNotRunning

__all__ = ["PROGRESS_INTERVAL", "report_progress"]

#: The least time between two writes of one attempt's progress (seconds).
PROGRESS_INTERVAL = 0.25
#: The longest progress message kept (characters).
MAX_MESSAGE = 200


class _ProgressWriter(Protocol):
    """What a report needs of the runner running the task (a :class:`trunner.Runner`)."""

    async def _record_progress(self, job: Job) -> None: ...


async def report_progress(fraction: float, message: str | None = None) -> None:
    """Report the running task's progress.

    Args:
        fraction: How far it is, from 0 to 1.
        message: A few words on where it is (at most 200 characters are kept).

    Raises:
        ValueError: ``fraction`` is not a number from 0 to 1.
        TypeError: ``message`` is not a string.
        RunnerNotRunning: Called outside of a task a runner runs. In eager mode
            (``TaskRegistry.call``) a report is accepted and goes nowhere.
    """
    if (
        not isinstance(fraction, int | float)
        or isinstance(fraction, bool)
        or not math.isfinite(fraction)
        or not 0 <= fraction <= 1
    ):
        raise ValueError(f"fraction must be a number from 0 to 1, got {fraction!r}")
    if message is not None and not isinstance(message, str):
        raise TypeError(f"message must be a str or None, got {type(message).__name__}")
    source = _current_message.get(None)
    if isinstance(source, Given):  # eager mode: nowhere to write
        await trio.lowlevel.checkpoint()
        return
    if not isinstance(source, Job):
        raise RunnerNotRunning("report_progress() is only available inside a task")
    job = source
    if not job.started_at:
        job.started_at = time.time() - (time.perf_counter() - job.began)
    job.progress = float(fraction)
    job.progress_message = message[:MAX_MESSAGE] if message is not None else None
    now = trio.current_time()
    if now - job.progress_at < PROGRESS_INTERVAL and (fraction < 1 or job.progress_done):
        await trio.lowlevel.checkpoint()
        return
    job.progress_at = now
    job.progress_done = fraction >= 1
    await cast(_ProgressWriter, running_runner())._record_progress(job)
