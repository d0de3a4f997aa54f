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

A retry or dead-letter write is shielded from cancellation and bounded
(:data:`TRANSITION_TIMEOUT`): the outcome of an attempt that ran is written even past the
drain timeout. What cannot be written stays pending for a later delivery (*kept*).
"""

from __future__ import annotations

import logging
import math
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, overload

import trio

from .._redis import AckRecord, Arg, Broker, Record
from .._util import ErrorLog, LoopBackoff, logger, wall_ms
from .._wire.envelope import NO_SIZE_LIMIT, reencode_for_retry
from ..config import RunnerConfig
from ..errors import (
    BackendError,
    InvalidPayload,
    MaxRetryExceeded,
    TaskFailed,
    TaskNotFound,
    gives_up,
)
from ..quarantine import Quarantine
from ..statistics import UNREGISTERED, Counters
from ..status import MAX_TRACEBACK, RUNNING_TTL, UNASKED_KEEP, ttl_ms
from ..task import Task
from .acks import AckBuffer
from .cancellation import MARK_LIFETIME
from .holdings import GIVEN_UP, Holdings, Job

__all__ = ["TRANSITION_TIMEOUT", "Outcomes"]

#: Bound on one state-transition write (retry, dead-letter) including its own retries.
TRANSITION_TIMEOUT = 10.0


class Outcomes:
    """Ends attempts: see the module docs. One per runner, used by the pool."""

    def _fields(self, job: Job, state: str, keep: float, *, finished: bool) -> dict[str, Any]:
        """The fields of ``job``'s record in ``state`` but its result and error (see
        ``trunner.status``), ``state`` first. The fields :func:`~trunner.status.record_fields`
        would give, built without it: this runs for every task that keeps its result."""
        task_name, _, attempt, enqueued_at, _ = job.fields[:5]
        fields: dict[str, Any] = {
            "state": state,  # first: the scripts recognise a JSON outcome by its start
            "task": task_name,
            "attempt": attempt,
            "instance": job.consumer,
            "message_id": job.message_id,
            "enqueued_at": enqueued_at,
        }
        if job.started_at:
            fields["started_at"] = job.started_at
        if finished:
            fields["finished_at"] = time.time()
        fields["keep"] = keep
        if job.progress is not None:
            fields["progress"] = job.progress
        if job.progress_message is not None:
            fields["progress_message"] = job.progress_message
        return fields

    def _record(
        self,
        job: Job,
        state: str,
        keep: float,
        *,
        finished: bool = True,
        result: bytes | None = None,
        error: BaseException | None = None,
    ) -> Record:
        """The record of ``job``'s task in ``state``, as a hash's field/value pairs, kept
        ``keep`` seconds (:data:`RUNNING_TTL` while not finished)."""
        fields = self._fields(job, state, keep, finished=finished)
        if result is not None:
            fields["result"] = result
        pairs: list[tuple[str, Arg]] = list(fields.items())
        if error is not None:
            pairs += _error_fields(error)
        ttl = keep if finished else max(keep, RUNNING_TTL)
        return self._keys.task(job.fields[4]), ttl_ms(ttl), pairs

    def _outcome(self, job: Job, state: str, keep: float, result: bytes | None) -> AckRecord:
        """The record of a finished task written with its acknowledgement: the fields of
        :meth:`_record`, as one JSON object, which Redis stores as a string with one
        ``SET`` (the hot path of a task that keeps its result: see ``trunner.status``).
        The fields a JSON encoder refuses (a lone surrogate in a progress message) fall
        back to :meth:`_record`."""
        body = self._fields(job, state, keep, finished=True)
        encode, raw, refused = _OUTCOME_CODEC or _outcome_codec()
        if result is not None:
            body["result"] = raw(result)
        try:
            data = encode(body)
        except refused:
            return self._record(job, state, keep, result=result)
        return self._keys.task(job.fields[4]), ttl_ms(keep), data

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
        self._config = config
        self._holdings = holdings
        self._acks = acks
        acks.running_record = self._running_record
        self._add_ack = acks.add
        self._counters = counters
        self._errors = errors
        self._on_retry_scheduled = on_retry_scheduled
        self._quarantine = quarantine

    def succeeded(self, job: Job, task_name: str, duration: float) -> None:
        """The attempt returned: acknowledge it (batched), with its outcome if it keeps its
        result."""
        counters = self._counters
        counters.succeeded += 1
        counters.task(task_name).succeeded += 1
        if job.cancel_requested:  # it swallowed its cancellation: it returned all the same
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

    def _succeeded_though_cancelled(self, job: Job) -> None:
        """A task cancelled while it ran caught the cancellation and returned: its outcome
        is what it returned, and its cancel mark goes."""
        record = None
        if job.keep_result is not None:
            record = self._record(job, "succeeded", job.keep_result, result=job.result)
        elif job.progress is not None:
            record = (self._keys.task(job.fields[4]), 0, ())
        self._add_ack(job, record, cancelled=True)
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

    def _running_record(self, job: Job) -> Record:
        keep = job.keep_result if job.keep_result is not None else RUNNING_TTL
        return self._record(job, "running", keep, finished=False)

    def expired(self, job: Job, task: Task) -> None:
        """Not started before its ``expires`` time: dropped (acknowledged, not run)."""
        self._counters.expired += 1
        keep = _keep(job, task, UNASKED_KEEP)
        self._add_ack(job, self._record(job, "expired", keep))
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
        keep = _keep(job, task, UNASKED_KEEP)
        self._add_ack(job, self._record(job, "cancelled", keep), cancelled=True)
        self._holdings.cancelled.pop(job.fields[4], None)
        logger.info("%s cancelled", job.about(), extra=job.log_fields())

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

    async def _retry(self, job: Job, task: Task, failure: BaseException) -> None:
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
        keep = _keep(job, task)
        record = None
        if keep is not None:
            record = self._record(job, "retrying", keep, finished=False, error=failure)

        async def write() -> bool:
            return await self._broker.retry(
                job.message_id, message.task_id, due_ms, data, record, job.slot, owner=job
            )

        written = await self._transition(job, write, "retry")
        if written is False:
            self._acks.discarded(job, "retry")
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
        record = self._record(job, "cancelled", _keep(job, task, UNASKED_KEEP))
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

    async def _give_up(
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
        keep = _keep(job, task)
        record = None
        if keep is not None:
            record = self._record(job, "failed" if ran else "dead", keep, error=error)

        async def write() -> str | bool:
            dead_id = await self._broker.dead_letter(
                job.message_id, fields, maxlen, lock, message.task_id, record, job.slot, owner=job
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


@overload
def _keep(job: Job, task: Task | None) -> float | None: ...


@overload
def _keep(job: Job, task: Task | None, unasked: float) -> float: ...


def _keep(job: Job, task: Task | None, unasked: float | None = None) -> float | None:
    """How long the outcome of ``job`` is kept: its dispatch's ``keep_result``, else its
    task's, else ``unasked`` (None: not at all)."""
    if job.keep_result is not None:
        return job.keep_result
    options = job.fields[8]
    if options is not None and options.keep_result is not None:
        return options.keep_result
    if task is not None and task.keep_result is not None:
        return task.keep_result
    return unasked


#: What ``Outcomes._outcome`` encodes with: the encoder, ``msgspec.Raw`` (a result's JSON
#: as it is), and the errors that make it fall back to a hash. msgspec is imported when
#: first needed: a runner whose tasks keep no result never loads it (nor what it imports).
_Codec = tuple[Callable[[Any], bytes], Callable[[bytes], Any], tuple[type[Exception], ...]]
_OUTCOME_CODEC: _Codec | None = None


def _outcome_codec() -> _Codec:
    global _OUTCOME_CODEC
    import msgspec  # noqa: PLC0415 - see above

    encode = msgspec.json.Encoder().encode
    _OUTCOME_CODEC = (encode, msgspec.Raw, (msgspec.EncodeError, UnicodeEncodeError))
    return _OUTCOME_CODEC


def _error_fields(error: BaseException) -> list[tuple[str, Arg]]:
    """The record's fields of the exception a task ended with: the task's own error when
    trunner's wraps it (``MaxRetryExceeded`` from the last attempt's error)."""
    if isinstance(error, MaxRetryExceeded) and error.__cause__ is not None:
        error = error.__cause__
    text = "".join(traceback.format_exception(error))
    return [
        ("error_type", type(error).__name__),
        ("error", str(error)),
        ("traceback", text[-MAX_TRACEBACK:]),
    ]


async def _guarded(func: Callable[..., Awaitable[Any]], *args: Any) -> Exception | None:
    """Run user code; return what it raised (cancellation passes, see the pool)."""
    try:
        await func(*args)
    except Exception as exc:  # noqa: BLE001 - user code failures are handled by callers
        return exc
    return None
