"""What a stall of the event loop means for one runner (the watchdog's thread sees it:
:mod:`trunner._executors.watchdog`): a warning naming the task that holds the loop and
where, a count, and the reservations of every message held here kept fresh meanwhile, so
that a task blocking the loop within its own limits never gets itself or its neighbours
reclaimed and run a second time.

The rule that keeps both guarantees of the heartbeat:

- while the loop is blocked, the watchdog's thread beats every held reservation (running
  messages, and finished ones whose acknowledgement is not written yet) over a connection
  of its own (:class:`~trunner._redis.StallLink`), as often as the heartbeater would;
- only while the task holding the loop is within its limit: its timeout (the dispatch's,
  else the task's) counted from its start, or, without one (or when no task holds the
  loop), ``max_stall`` seconds of stall. Past it the beats stop, with an error logged: the
  worker is hung, and its messages are reclaimed by other instances after
  ``reclaim_delay``, as for a dead one. A process that is stopped whole, or whose thread
  cannot get the GIL, beats nothing either.

Everything here but :meth:`StallGuard.resumed` runs in the watchdog's thread, while the
loop's thread is blocked: it only reads the holdings (copies of their dicts) and bumps one
counter.
"""

from __future__ import annotations

import time
import traceback
from types import FrameType

from .._executors.watchdog import Watchdog
from .._redis import Broker, StallLink, open_stall_link
from .._util import logger
from ..config import RunnerConfig
from ..message import NO_OPTIONS
from .counters import Counters
from .holdings import Holdings, Job
from .pool import WorkerPool

__all__ = ["StallGuard", "open_watchdog"]

#: The frame every task body runs under: its ``job`` local names the task.
_RUN_JOB = WorkerPool._run_job.__code__
#: The most frames of the blocking stack a warning shows (innermost kept).
MAX_FRAMES = 30


def blocking_job(frame: FrameType | None) -> tuple[Job | None, list[FrameType]]:
    """The job whose body the loop's thread is in (None: no task's), and the frames from
    that body's innermost outwards (all of them, when no task's)."""
    frames: list[FrameType] = []
    while frame is not None:
        if frame.f_code is _RUN_JOB:
            job = frame.f_locals.get("job")
            return (job if isinstance(job, Job) else None), frames
        frames.append(frame)
        frame = frame.f_back
    return None, frames


def job_limit(job: Job) -> float | None:
    """The timeout of ``job``'s attempt (the dispatch's, else the task's), or None."""
    options = job.fields[8] or NO_OPTIONS
    if options.timeout is not None:
        return options.timeout
    return job.task.timeout if job.task is not None else None


class StallGuard:
    """Handles the stalls the watchdog sees, for one runner (see the module docs)."""

    def __init__(
        self,
        config: RunnerConfig,
        holdings: Holdings,
        counters: Counters,
        link: StallLink | None,
        beat_interval: float,
    ) -> None:
        assert config.stall_threshold is not None
        self._warn_after = config.stall_threshold
        self._max_stall = config.max_stall
        self._holdings = holdings
        self._counters = counters
        self._link = link
        self._interval = beat_interval
        #: How late the watchdog's ticker must be for a stall: soon enough to beat in time.
        self.threshold = min(self._warn_after, beat_interval / 2)
        self._stall: _Stall | None = None
        self._last_beat = 0.0

    def stalled(self, late: float, frame: FrameType | None) -> None:
        """The loop has not run for ``late`` seconds: note the task and the stack.

        The stall is noted (and its reservations kept) before anything that could fail
        is tried: a stack that cannot be read costs the warning its stack, never the
        heartbeats. The task's own timeout bounds the stall only while its body runs; a
        stall after the body (its failed-task handler, middleware, the outcome) is bounded
        by ``max_stall``, as one of no task's."""
        now = time.perf_counter()
        self._stall = _Stall(None, None, now - late + self._max_stall, "")
        try:
            job, frames = blocking_job(frame)
        except Exception as exc:  # noqa: BLE001 - the stall stays noted, without its task
            self._stall.stack = f"(where it blocks could not be read: {exc!r})"
            return
        limit = job_limit(job) if job is not None else None
        in_body = job is not None and job.began and not job.ended
        if job is not None and limit is not None and in_body:
            self._stall = _Stall(job, limit, job.began + limit, "")
        else:
            self._stall = _Stall(job, None, now - late + self._max_stall, "")
        try:
            self._stall.stack = "".join(
                traceback.StackSummary.extract(
                    ((f, f.f_lineno) for f in reversed(frames[:MAX_FRAMES])), lookup_lines=True
                ).format()
            )
        except Exception as exc:  # noqa: BLE001 - see above
            self._stall.stack = f"(where it blocks could not be read: {exc!r})"

    def look(self, late: float) -> None:
        """The loop is ``late`` seconds late: warn once past ``stall_threshold``, and keep
        the held reservations fresh while the task holding it is within its limit."""
        stall = self._stall
        if stall is None:
            return
        if not stall.warned and late >= self._warn_after:
            stall.warned = True
            self._counters.stalls += 1
            self._warn(stall, late)
        if self._link is None:
            return
        now = time.perf_counter()
        if now > stall.deadline:
            if not stall.gave_up:
                stall.gave_up = True
                logger.error(
                    "event loop blocked for %.1f s by %s, past its limit: its reservations "
                    "are kept no longer, and other instances will reclaim its messages",
                    late,
                    stall.who,
                )
            return
        if now - self._last_beat >= self._interval / 2:
            self._last_beat = now
            self._beat()

    def _warn(self, stall: _Stall, late: float) -> None:
        job = stall.job
        logger.warning(
            "event loop blocked for %.2f s by %s: a blocking call in an 'async def'? Make the "
            "task a plain 'def' (it runs in a worker thread) or run the call with "
            "trio.to_thread.run_sync. Its messages stay reserved for up to %s. Where it "
            "blocks (most recent call last):\n%s",
            late,
            stall.who,
            "its timeout" if stall.limit is not None else f"{self._max_stall:g} s of stall",
            stall.stack,
            extra=job.log_fields(stall=late) if job is not None else {"stall": late},
        )

    def _beat(self) -> None:
        """One heartbeat of every reservation held here, per consumer."""
        assert self._link is not None
        by_consumer: dict[str, list[str]] = {}
        for job in list(self._holdings.running.values()):
            if not job.lost and not job.finishing:
                by_consumer.setdefault(job.consumer, []).append(job.message_id)
        for job in list(self._holdings.finished.values()):
            by_consumer.setdefault(job.consumer, []).append(job.message_id)
        for consumer, ids in by_consumer.items():
            try:
                self._link.beat(consumer, ids)
            except Exception as exc:  # noqa: BLE001 - Redis trouble: the next look tries again
                logger.warning("stall watchdog: a heartbeat failed: %s", exc)

    def resumed(self, lasted: float) -> None:
        """The loop runs again after a stall of about ``lasted`` seconds."""
        stall, self._stall = self._stall, None
        if stall is not None and stall.warned:
            logger.info("event loop ran again after a stall of about %.2f s", lasted)


class _Stall:
    """One stall: the task holding the loop (None: no task's), its limit, until when its
    reservations are kept (``perf_counter``), and where it blocks."""

    def __init__(self, job: Job | None, limit: float | None, deadline: float, stack: str):
        self.job = job
        self.limit = limit
        self.deadline = deadline
        self.stack = stack
        self.who = "no task (trunner's own code, or another's)"
        if job is not None:
            try:
                self.who = job.about()
            except Exception:  # noqa: BLE001 - named by its id instead
                self.who = f"the task of message {job.message_id}"
        self.warned = False
        self.gave_up = False


def open_watchdog(
    url: str,
    broker: Broker,
    config: RunnerConfig,
    holdings: Holdings,
    counters: Counters,
    beat_interval: float,
) -> tuple[Watchdog | None, StallLink | None]:
    """The stall watchdog of one run and its Redis link (None with
    ``stall_threshold=None``; no link where it cannot help: see ``StallLink``)."""
    if config.stall_threshold is None:
        return None, None
    link = open_stall_link(url, broker, timeout=beat_interval)
    guard = StallGuard(config, holdings, counters, link, beat_interval)
    period = guard.threshold / 5
    return Watchdog(guard.threshold, period, guard.stalled, guard.look, guard.resumed), link
