"""What happens once an attempt ends: acknowledged, retried, or given up.

Each end is one state transition of the message in Redis, one command or one script:

* **succeeded**: acknowledged through the :class:`~trunner._engine.acks.AckBuffer` (batched);
* **failed** with attempts left: re-enqueued for its next attempt through the delayed set
  after its backoff (``retry.lua``: acknowledge and schedule, atomically);
* **given up** (failed its last attempt, undecodable, unknown task, delivered more often
  than ``max_redeliveries`` allows, or delivered again after it was given up): the
  failed-task handler runs, then the message is moved to the dead-letter stream with its
  reason (``dead_letter.lua``); when the handler raises, the message stays pending,
  marked given up (``mark_given_up.lua``): its next delivery calls the handler again;
* **interrupted** (still running when the drain timeout passed): released for immediate
  reclaim, never acknowledged.

The retries and dead letters are written by :mod:`trunner._engine.transitions`, shielded
and bounded; the records written with them are built by :mod:`trunner._engine.records`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from .._redis import AckRecord, Broker, StepEnd
from .._task import Task
from .._util import ErrorLog, gives_up, logger
from .._wire.marks import GIVEN_UP
from .._wire.record import RUNNING_TTL, UNASKED_KEEP
from ..config import RunnerConfig
from ..errors import (
    BackendError,
    InvalidPayload,
    MaxRetryExceeded,
    TaskFailed,
    TaskNotFound,
)
from .acks import AckBuffer
from .counters import Counters
from .holdings import Holdings, Job
from .quarantine import Quarantine
from .records import Records, keep_of
from .steps import step_end
from .transitions import Transitions

__all__ = ["Outcomes"]


class Outcomes:
    """Ends attempts: see the module docs. One per runner, used by the pool."""

    def __init__(
        self,
        broker: Broker,
        config: RunnerConfig,
        holdings: Holdings,
        acks: AckBuffer,
        counters: Counters,
        errors: ErrorLog,
        on_retry_scheduled: Callable[[int], None],
        quarantine: Quarantine | None = None,
        task_names: Callable[[], Iterable[str]] = frozenset,
    ) -> None:
        self._broker = broker
        self._task_names = task_names
        self._keys = broker.keys
        self._holdings = holdings
        self._acks = acks
        records = Records(broker.keys)
        acks.running_record = records.running
        # Bound once: the record of a task that keeps its result is built for every one.
        self._record = records.record
        self._outcome = records.outcome
        self._add_ack = acks.add
        self._counters = counters
        self._errors = errors
        transitions = Transitions(
            broker,
            config,
            holdings,
            acks,
            counters,
            errors,
            on_retry_scheduled,
            quarantine,
            records,
        )
        self._retry = transitions.retry
        self._give_up = transitions.give_up

    def succeeded(self, job: Job, task_name: str, duration: float) -> None:
        """The attempt returned: acknowledge it (batched), with its outcome if it keeps its
        result."""
        counters = self._counters
        counters.succeeded += 1
        counters.task(task_name).succeeded += 1
        if job.fields[8] is not None and job.fields[8].workflow is not None:
            self._step_succeeded(job)
        elif job.cancel_requested:  # it swallowed its cancellation: it returned all the same
            self._succeeded_though_cancelled(job)
        elif job.keep_result is not None:
            self._add_ack(job, self._outcome(job, "succeeded", job.keep_result, job.result))
        elif job.progress is not None:  # it reported progress but keeps no result
            self._add_ack(job, (self._keys.task(job.fields[4]), 0, ()))
        else:
            self._add_ack(job)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "%s succeeded in %.3f s",
                job.about(),
                duration,
                extra=job.log_fields(duration=duration),
            )

    def _step_succeeded(self, job: Job) -> None:
        """A workflow's step returned: acknowledged with its step's end (its result goes to
        the steps that read it), and its own record if it keeps its result."""
        step = step_end(job, "ok")
        if job.cancel_requested:
            self._succeeded_though_cancelled(job, step)
            return
        record = None
        if job.keep_result is not None:
            record = self._outcome(job, "succeeded", job.keep_result, job.result)
        elif job.progress is not None:
            record = (self._keys.task(job.fields[4]), 0, ())
        self._add_ack(job, record, step=step)

    def _succeeded_though_cancelled(self, job: Job, step: StepEnd | None = None) -> None:
        """A task cancelled while it ran caught the cancellation and returned: its outcome
        is what it returned, and its cancel mark goes."""
        record = None
        if job.keep_result is not None:
            record = self._record(job, "succeeded", job.keep_result, result=job.result)
        elif job.progress is not None:
            record = (self._keys.task(job.fields[4]), 0, ())
        self._add_ack(job, record, cancelled=True, step=step)
        self._holdings.cancelled.pop(job.fields[4], None)
        logger.info("%s caught its cancellation and returned", job.about(), extra=job.log_fields())

    async def failed(self, job: Job, task: Task, failure: BaseException) -> None:
        """The attempt raised: retry it, or give up after its last attempt."""
        attempt = job.fields[2]
        self._counters.failed += 1
        self._counters.task(task.name).failed += 1
        self._errors.capture(TaskFailed(task.name, job.message_id, attempt, failure))
        if gives_up(failure, task.give_up_on):
            await self._give_up(job, failure, "given up by the task (no retry)", task, ran=True)
        elif attempt < task.max_attempts:
            await self._retry(job, task, failure)
        else:
            exhausted = MaxRetryExceeded(task.name, attempt)
            exhausted.__cause__ = failure
            await self._give_up(job, exhausted, "max retries exceeded", task, ran=True)

    async def refuse(self, job: Job, task: Task | None) -> None:
        """Give up a message that may not run: undecodable, unknown task, given up on an
        earlier delivery, delivered more often than ``max_redeliveries`` allows, or past
        its last attempt."""
        if job.decode_error is not None:
            await self._give_up(job, job.decode_error, "undecodable")
        elif task is None:
            unknown = TaskNotFound(job.fields[0], self._task_names())
            await self._give_up(job, unknown, "unknown task")
        elif job.given_up or job.fields[2] > task.max_attempts:
            error = MaxRetryExceeded(task.name, job.fields[2], redelivered=True)
            await self._give_up(job, error, "max retries exceeded (redelivered)", task)
        else:
            error = MaxRetryExceeded(task.name, job.fields[2], deliveries=job.deliveries)
            await self._give_up(job, error, "max redeliveries exceeded", task)

    async def invalid_payload(self, job: Job, task: Task, error: InvalidPayload) -> None:
        """The payload does not fit the task's declared type: given up at once (a retry
        would not fit it better)."""
        error = InvalidPayload(f"payload of task {task.name!r} {error}")
        await self._give_up(job, error, "invalid payload", task)

    async def progress(self, job: Job) -> None:
        """Write ``job``'s progress into its task's record (best effort: a Redis error is
        logged, never raised into the task)."""
        if job.lost:  # another consumer's delivery owns the task's record now
            return
        keep = job.keep_result if job.keep_result is not None else RUNNING_TTL
        record = self._record(job, "running", keep, finished=False)
        try:
            await self._broker.record_progress(record, job.message_id, job)
        except BackendError as exc:
            logger.debug("%s: recording its progress failed: %s", job.about(), exc)

    def started(self, job: Job) -> None:
        """A task that keeps its result started: its record says so (batched)."""
        self._acks.started(job)

    def expired(self, job: Job, task: Task) -> None:
        """Not started before its ``expires`` time: dropped (acknowledged, not run)."""
        self._counters.expired += 1
        keep = keep_of(job, task, UNASKED_KEEP)
        self._add_ack(job, self._record(job, "expired", keep), step=step_end(job, "expired"))
        logger.info(
            "%s expired before it started; dropped",
            job.about(),
            extra=job.log_fields(),
        )

    def skipped(self, job: Job) -> None:
        """Another group's message (its retry, replay or cron tick, on a queue several
        groups read): acknowledged for this group and nothing else (its lock, its record,
        its cancel mark are the other group's)."""
        self._counters.skipped += 1
        self._add_ack(job, bare=True)

    def cancelled(self, job: Job, task: Task | None) -> None:
        """The task was cancelled (before it started, or while it ran): acknowledged with
        the outcome 'cancelled', never retried, its unique lock released, no failed-task
        handler; its cancel mark goes."""
        self._counters.cancelled += 1
        record = self._cancelled_record(job, task)
        self._add_ack(job, record, cancelled=True, step=step_end(job, "cancelled"))
        self._holdings.cancelled.pop(job.fields[4], None)
        logger.info("%s cancelled", job.about(), extra=job.log_fields())

    def _cancelled_record(self, job: Job, task: Task | None) -> AckRecord | None:
        """The record of a task cancelled: kept as long as it asked, else an hour (its
        handle says it was cancelled) -- but a workflow's step cancelled by its workflow
        (failing fast, or cancelled as a whole) keeps only what it asked for: its workflow's
        outcome tells of it, and lives as long as the workflow's ``keep_result``."""
        keep = keep_of(job, task)
        if keep is None:
            options = job.fields[8]
            by_workflow = (
                options is not None
                and options.workflow is not None
                and job.fields[4] not in self._holdings.cancelled
            )
            if not by_workflow:
                return self._record(job, "cancelled", UNASKED_KEEP)
            return (self._keys.task(job.fields[4]), 0, ()) if job.progress is not None else None
        return self._record(job, "cancelled", keep)

    def clean_up_raised(self, job: Job, error: BaseException) -> None:
        """The task was cancelled, and its clean-up raised ``error``: it changes nothing
        (a cancelled task stays cancelled), and is logged."""
        self._errors.capture(error)
        logger.warning(
            "%s: its clean-up raised when it was cancelled: %r",
            job.about(),
            error,
            extra=job.log_fields(),
        )

    def interrupted(self, job: Job, *, attempt_ended: bool = False) -> None:
        """Cancelled past the drain timeout: release the message for immediate reclaim.

        An attempt cut off while it ran does not count (its delivery is given back); one
        that had ended was being given up (its failed-task handler was cut off): it is
        marked given up, so that its next delivery calls the handler again, never runs
        the task again.
        """
        self._counters.interrupted += 1
        give_back = -GIVEN_UP if attempt_ended else 1
        self._holdings.release_later(job.consumer, job.message_id, give_back)
        logger.warning(
            "%s interrupted by shutdown%s; message released",
            job.about(),
            " while its failure was handled" if attempt_ended else "",
            extra=job.log_fields(),
        )

    def internal_error(self, job: Job, error: BaseException) -> None:
        """A defect of trunner while ending ``job``: it stays pending, the runner goes on."""
        self._errors.capture(error)
        self._holdings.keep(job)
        logger.error(
            "internal error while handling %s; it stays pending",
            job.about(),
            exc_info=error,
            extra=job.log_fields(),
        )
