"""The heartbeater keeps the reservations of the messages this instance holds fresh, so
nobody reclaims a live task.

A running attempt heartbeats (XCLAIM ... JUSTID, one script per consumer and round) every
:func:`~trunner._engine.holdings.beat_interval` of its task, at most every ``reclaim_delay / 3``;
so does a finished one whose acknowledgement is not written yet (Redis trouble), or it
would be reclaimed and run again. A reply saying the message is no longer ours marks the
job *lost*: another consumer claimed it while it ran, so it may run twice.
"""

from __future__ import annotations

import trio

from .._redis import Broker
from .._util import ErrorLog, LoopBackoff, logger
from ..errors import BackendError, RedisUnavailable, ReservationLost
from .counters import Counters
from .holdings import Holdings, Job

__all__ = ["STALL_SLACK", "Heartbeater"]

#: A heartbeat whose deadline is found passed by more than this (seconds) missed it because
#: the event loop was blocked, not because Redis was slow.
STALL_SLACK = 0.1


class Heartbeater:
    """Beats the reservations of :class:`~trunner._engine.holdings.Holdings` until :meth:`stop`.

    ``min_interval`` is the shortest beat interval of any task this instance runs: it
    bounds each heartbeat call, and how long the loop may sleep.
    """

    def __init__(
        self,
        broker: Broker,
        holdings: Holdings,
        min_interval: float,
        counters: Counters,
        errors: ErrorLog,
    ) -> None:
        self._broker = broker
        self._holdings = holdings
        self.min_interval = min_interval
        self._counters = counters
        self._errors = errors
        self._scope = trio.CancelScope()
        self.stopped = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Beat until :meth:`stop` (or cancellation)."""
        try:
            with self._scope:
                task_status.started()
                await self._loop()
        finally:
            self.stopped.set()

    def stop(self) -> None:
        """Stop beating now (call it once every held message was acknowledged or released)."""
        self._scope.cancel()

    async def _loop(self) -> None:
        # Retries come sooner than the next beat would: a reservation must not go stale
        # because the loop backed off longer than reclaim_delay allows.
        backoff = LoopBackoff(cap=min(5.0, self.min_interval / 2))
        holdings = self._holdings
        while True:
            now = trio.current_time()
            failed = stalled = False
            for consumer, (jobs, finished) in self._due(now).items():
                try:
                    lost = await self._beat(consumer, [*jobs, *finished])
                except _Stalled as exc:
                    stalled = stalled or exc.stalled
                    failed = True
                    continue
                for job in jobs:
                    job.next_beat = now + job.interval
                    # (not if a claim of this instance's own gave it another consumer's
                    # delivery while the beat was on the way: see Job.reclaimed)
                    if (
                        job.message_id in lost
                        and job.message_id in holdings.running
                        and job.consumer == consumer
                    ):
                        self._lost(job)
                for job in finished:
                    job.next_beat = now + job.interval
            if failed:
                if stalled:
                    await trio.lowlevel.checkpoint()
                else:
                    await trio.sleep(backoff.next_delay())
                continue
            backoff.reset()
            upcoming = [job.next_beat for job in holdings.running.values() if not job.lost]
            upcoming += [job.next_beat for job in holdings.finished.values()]
            wake = min([now + self.min_interval, *upcoming])
            await trio.sleep_until(max(wake, trio.current_time() + 0.001))

    def _due(self, now: float) -> dict[str, tuple[list[Job], list[Job]]]:
        """Per consumer, (running jobs, finished ones) whose heartbeat is due.

        Finished tasks whose acknowledgement is not written yet (Redis trouble) keep their
        reservations fresh too, or they would be reclaimed and run again. A job being
        ended by a transition script, or lost to another consumer, does not beat.
        """
        due: dict[str, tuple[list[Job], list[Job]]] = {}
        for job in self._holdings.running.values():
            if job.next_beat <= now and not job.lost and not job.finishing:
                due.setdefault(job.consumer, ([], []))[0].append(job)
        for job in self._holdings.finished.values():
            if job.next_beat <= now:
                due.setdefault(job.consumer, ([], []))[1].append(job)
        return due

    async def _beat(self, consumer: str, jobs: list[Job]) -> set[str]:
        """One heartbeat call for ``consumer``'s ``jobs``: the ids no longer ours."""
        began = trio.current_time()
        try:
            # Bounded by the beat interval, not the (longer) command timeout: a reply lost
            # on the way must not keep every reservation waiting.
            with trio.fail_after(self.min_interval):
                return set(await self._broker.heartbeat(consumer, [j.message_id for j in jobs]))
        except (BackendError, trio.TooSlowError) as exc:
            # A deadline that passed long ago was passed while this process was not
            # running (a task blocked the event loop): that says nothing of Redis, and the
            # reservations aged meanwhile. Beat again at once: another stall may follow
            # soon, and a backoff would wait it out.
            late = trio.current_time() - began - self.min_interval
            error = (
                exc
                if isinstance(exc, BackendError)
                else RedisUnavailable(f"heartbeat: no reply within {self.min_interval:.3g} s")
            )
            self._errors.capture(error)
            raise _Stalled(isinstance(exc, trio.TooSlowError) and late > STALL_SLACK) from exc

    def _lost(self, job: Job) -> None:
        job.lost = True
        self._counters.reservations_lost += 1
        self._errors.capture(
            ReservationLost(
                f"message {job.message_id} of task {job.message.task_name!r} was claimed by "
                "another consumer while running; it may run twice"
            )
        )
        logger.warning(
            "%s: reservation lost (claimed by another consumer while running)",
            job.about(),
            extra=job.log_fields(),
        )


class _Stalled(Exception):
    """A heartbeat call failed; ``stalled``: because the event loop was blocked."""

    def __init__(self, stalled: bool) -> None:
        super().__init__()
        self.stalled = stalled
