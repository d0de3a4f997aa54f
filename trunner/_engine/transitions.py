"""The state transitions an attempt's failure writes: its retry (``retry.lua``:
acknowledge and schedule the next attempt, atomically), or, once given up, the failed-task
handler and then its dead letter (``dead_letter.lua``; ``mark_given_up.lua`` when the
handler raised).

Each write is shielded from cancellation and bounded (:data:`TRANSITION_TIMEOUT`): the
outcome of an attempt that ran is written even past the drain timeout. What cannot be
written stays pending for a later delivery (*kept*).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import trio

from .._redis import Broker
from .._task import Task
from .._util import ErrorLog, LoopBackoff, logger, wall_ms
from .._wire.envelope import NO_SIZE_LIMIT, reencode_for_retry
from .._wire.marks import GIVEN_UP, MARK_LIFETIME
from .._wire.record import UNASKED_KEEP
from ..config import RunnerConfig
from ..errors import BackendError
from ..statistics import UNREGISTERED
from .acks import AckBuffer
from .counters import Counters
from .holdings import Holdings, Job
from .quarantine import Quarantine
from .records import Records, keep_of
from .steps import step_end

__all__ = ["TRANSITION_TIMEOUT", "Transitions"]

#: Bound on one state-transition write (retry, dead-letter) including its own retries.
TRANSITION_TIMEOUT = 10.0


class Transitions:
    """Writes the retries and dead letters of one runner's attempts (see the module
    docs); :class:`~trunner._engine.outcomes.Outcomes` decides which."""

    def __init__(
        self,
        broker: Broker,
        config: RunnerConfig,
        holdings: Holdings,
        acks: AckBuffer,
        counters: Counters,
        errors: ErrorLog,
        on_retry_scheduled: Callable[[int], None],
        quarantine: Quarantine | None,
        records: Records,
    ) -> None:
        self._broker = broker
        self._keys = broker.keys
        self._config = config
        self._holdings = holdings
        self._acks = acks
        self._counters = counters
        self._errors = errors
        self._on_retry_scheduled = on_retry_scheduled
        self._quarantine = quarantine
        self._record = records.record

    async def retry(self, job: Job, task: Task, failure: BaseException) -> None:
        if job.lost:  # another consumer's delivery owns the message: its attempt decides
            self._acks.discarded(job, "retry")
            return
        message = job.message
        try:
            delay = task.retry_delay(message.attempt)
        except Exception as exc:  # noqa: BLE001 - a broken backoff callable
            self._errors.capture(exc)
            delay = 1.0
        due_ms = wall_ms() + math.ceil(delay * 1000)
        data = reencode_for_retry(message, message.attempt + 1, NO_SIZE_LIMIT, self._keys.group)
        keep = keep_of(job, task)
        record = None
        if keep is not None:
            record = self._record(job, "retrying", keep, finished=False, error=failure)

        async def write() -> bool | Literal["cancelled"]:
            return await self._broker.retry(
                job.message_id, message.task_id, due_ms, data, record, job.slot, step,
                owner=job, lock=job.lock(self._keys) if step is not None else None,
            )  # fmt: skip

        step = step_end(job, "failed", failure)
        written = await self._transition(job, write, "retry")
        if written is False:
            self._acks.discarded(job, "retry")
        elif written == "cancelled":  # a step of a workflow that failed or was cancelled
            self._counters.cancelled += 1
            logger.info(
                "%s failed, and its workflow no longer runs: cancelled, not retried: %r",
                job.about(),
                failure,
                extra=job.log_fields(),
            )
        elif written is True:
            if job.cancel_requested:  # cancelled while the retry was written: it goes
                await self._cancel_retry(job, task)
                return
            self._counters.retried += 1
            self._counters.task(task.name).retried += 1
            self._on_retry_scheduled(due_ms)
            logger.info(
                "%s failed; retry scheduled in %.3f s: %r",
                job.about(),
                delay,
                failure,
                extra=job.log_fields(),
            )

    async def _cancel_retry(self, job: Job, task: Task) -> None:
        """Remove the retry just scheduled for ``job``, whose task was cancelled while the
        retry was written; its outcome is 'cancelled'. If that fails, the cancel mark drops
        the retry when it is fetched."""
        task_id = job.fields[4]
        record = self._record(job, "cancelled", keep_of(job, task, UNASKED_KEEP))
        until = wall_ms() + int(MARK_LIFETIME * 1000)
        where = None
        with trio.move_on_after(TRANSITION_TIMEOUT, shield=True):
            try:
                where = await self._broker.cancel_task(task_id, until, job.lock(self._keys), record)
            except BackendError as exc:
                self._errors.capture(exc)
        if where in ("delayed", "waiting", "queued"):
            self._counters.cancelled += 1
            self._holdings.cancelled.pop(task_id, None)
            logger.info("%s cancelled (its retry removed)", job.about(), extra=job.log_fields())
        else:
            logger.warning(
                "%s: cancelled while its retry was written, and the retry could not be "
                "removed (%s): its cancel mark drops it when it is fetched",
                job.about(),
                where or "Redis failed",
                extra=job.log_fields(),
            )

    async def give_up(
        self,
        job: Job,
        error: BaseException,
        reason: str,
        task: Task | None = None,
        *,
        ran: bool = False,
    ) -> None:
        """The failed-task handler runs, then the message is dead-lettered with ``reason``;
        a task that keeps its result records it as failed (``ran``: its last attempt ran
        and raised) or dead (it did not run). Not for an attempt whose delivery was lost
        to another consumer: neither the handler nor the write runs."""
        if job.lost:
            self._acks.discarded(job, "dead letter")
            return
        message = job.message
        self._errors.capture(error)
        handler = self._config.failed_task_handler
        if handler is not None:
            exc = await _guarded(handler, message, error)
            if exc is not None:
                self._errors.capture(exc)
                self._holdings.keep(job)
                await self._mark_given_up(job)
                logger.error(
                    "failed-task handler raised for %s; left pending for a later delivery: %r",
                    job.about(),
                    exc,
                    extra=job.log_fields(),
                )
                return
        fields: list[tuple[str, Any]] = [
            ("payload", message.raw),
            ("reason", reason),
            ("error", f"{type(error).__name__}: {error}"),
            ("task", message.task_name),
            ("message_id", message.message_id),
            ("task_id", message.task_id),
            ("attempt", message.attempt),
            ("failed_at", wall_ms()),
            ("consumer", job.consumer),
        ]
        cause = ""
        if error.__cause__ is not None:
            cause = f"{type(error.__cause__).__name__}: {error.__cause__}"
            fields.append(("cause", cause))
        maxlen = self._config.dead_letter_maxlen
        lock = job.lock(self._broker.keys)
        keep = keep_of(job, task)
        record = None
        if keep is not None:
            record = self._record(job, "failed" if ran else "dead", keep, error=error)

        async def write() -> str | bool:
            dead_id = await self._broker.dead_letter(
                job.message_id,
                fields,
                maxlen,
                lock,
                message.task_id,
                record,
                job.slot,
                step_end(job, "failed", error),
                owner=job,
            )
            return False if dead_id is None else dead_id

        written = await self._transition(job, write, "dead-letter")
        if written is False:
            self._acks.discarded(job, "dead letter")
        elif written:
            self._counters.dead_lettered += 1
            # Per-name counters only for registered tasks: names read from the stream
            # are unbounded (each junk name would be a counter, and a metric, for ever).
            name = job.task.name if job.task is not None else UNREGISTERED
            self._counters.task(name).dead_lettered += 1
            logger.error(
                "%s dead-lettered, %s: %s%s",
                job.about(),
                reason,
                error,
                f" ({cause})" if cause else "",
                extra=job.log_fields(),
            )

    async def _mark_given_up(self, job: Job) -> None:
        """Mark ``job``'s message given up (its handler raised): its next delivery calls
        the handler again, never runs the task (see ``GIVEN_UP``). Best effort, one try:
        unmarked, a redelivery runs the task again, as after a crash."""
        if job.given_up:
            return
        with trio.move_on_after(TRANSITION_TIMEOUT, shield=True):
            try:
                await self._broker.mark_given_up(job, job.message_id, GIVEN_UP)
            except BackendError as exc:
                self._errors.capture(exc)
                logger.warning(
                    "%s: marking it given up failed (its next delivery runs it again): %s",
                    job.about(),
                    exc,
                    extra=job.log_fields(),
                )

    async def _transition(self, job: Job, write: Callable[[], Awaitable[Any]], what: str) -> Any:
        """Run one state-transition write, retrying Redis errors for a bounded time.

        If it cannot be written, the message stays pending and is redelivered later. A
        write refused (False) while a claim of this instance's own gave the job another
        delivery (``Job.reclaimed``) is written again, for that delivery.
        """
        job.finishing = True  # acknowledged by the write: heartbeats would call it lost
        backoff = LoopBackoff()
        # Shielded: the outcome of an attempt that ran is written even past the drain timeout.
        with trio.move_on_after(TRANSITION_TIMEOUT, shield=True):
            while True:
                try:
                    sent = job.delivery_count
                    written = await write()
                    if written is not False or job.delivery_count == sent:
                        return written
                    continue
                except BackendError as exc:
                    self._errors.capture(exc)
                    logger.warning(
                        "%s of %s failed, will retry: %s",
                        what,
                        job.about(),
                        exc,
                        extra=job.log_fields(),
                    )
                    if self._quarantine is not None:  # a key of a wrong type: set aside
                        await self._quarantine.after_error(exc)
                await trio.sleep(backoff.next_delay())
        self._holdings.keep(job)
        logger.error(
            "%s of %s could not be written; it stays pending for a later delivery",
            what,
            job.about(),
            extra=job.log_fields(),
        )
        return None


async def _guarded(func: Callable[..., Awaitable[Any]], *args: Any) -> Exception | None:
    """Run user code; return what it raised (cancellation passes, see the pool)."""
    try:
        await func(*args)
    except Exception as exc:  # noqa: BLE001 - user code failures are handled by callers
        return exc
    return None
