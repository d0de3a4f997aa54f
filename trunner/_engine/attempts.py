"""The attempts that leave the pool's plain path: a job refused or skipped before it runs,
an attempt run with its options (expiry, limits, a typed payload, a timeout, a kept
result, middleware), the failure of an attempt handed to its outcome, and an attempt ended
by a cancellation (its task's, or the runner's past the drain timeout).

The pool runs an attempt of an ``async def`` task with no options inline (its hot path);
everything else about running one attempt is here, the bodies that run in a worker thread or
process included (each task's body comes from its executor: :mod:`trunner._executors`).
How the attempt ends in Redis is :mod:`trunner._engine.outcomes`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import trio

from .._executors.base import Body
from .._hooks import AttemptHooks
from .._task import Task
from .._util import ErrorLog, logger, timed
from .._wire.message import NO_OPTIONS
from ..config import RunnerConfig
from ..errors import InvalidPayload, MiddlewareError
from ..middleware import AttemptInfo
from .admission import Admission
from .holdings import Job
from .outcomes import Outcomes

__all__ = ["Attempts"]

#: What a task raises that is never its failure: the end of the process goes on up.
_PASSING = (KeyboardInterrupt, SystemExit, GeneratorExit)


def _holds(
    exc: BaseException, types: type[BaseException] | tuple[type[BaseException], ...]
) -> bool:
    """Whether ``exc`` is one of ``types``, or a group holding one."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(types) is not None
    return isinstance(exc, types)


class Attempts:
    """Runs and ends the attempts the pool does not run inline (see the module docs)."""

    def __init__(
        self,
        config: RunnerConfig,
        outcomes: Outcomes,
        errors: ErrorLog | None,
        admission: Admission | None,
        bodies: Mapping[str, Body],
    ) -> None:
        self._config = config
        #: Each task's body, by name (see :mod:`trunner._executors.base`).
        self._bodies = bodies
        self._outcomes = outcomes
        self._errors = errors
        #: Admits the messages of tasks with limits (None when no task has any).
        self._admission = admission
        hooks = AttemptHooks(config.middleware, self._middleware_broke)
        #: The middleware around each attempt; None without any (the hot path checks it).
        self.hooks = hooks if hooks else None

    async def not_run(self, job: Job, task: Task | None) -> None:
        """A job that may not run: another group's (skipped), cancelled before it
        started, or refused (undecodable, unknown task, given up on an earlier delivery,
        delivered more often than ``max_redeliveries`` allows, or past its last
        attempt)."""
        job.ended = True
        if job.foreign:
            self._outcomes.skipped(job)
            return
        self.release_slot_with(job, task)
        if job.cancel_requested and job.decode_error is None:
            self._outcomes.cancelled(job, task)
        else:
            await self._outcomes.refuse(job, task)

    async def failed(self, job: Job, task: Task, failure: BaseException) -> None:
        """The attempt raised: it is retried or given up on, unless its task was cancelled
        (its clean-up raised: it is cancelled all the same, never retried)."""
        job.ended = True
        if job.cancel_requested:
            self._outcomes.clean_up_raised(job, failure)
            self._outcomes.cancelled(job, task)
        else:
            await self._outcomes.failed(job, task, failure)

    async def run_with_options(self, job: Job, task: Task) -> tuple[Exception | None, float]:
        """The attempt of a task that has options
        (its own or its dispatch's): it may have expired, it may have limits (admitted or
        deferred, see :mod:`trunner._engine.admission`), its payload is decoded and
        checked, it may have a timeout, its result may be kept. Returns (the failure or
        None, the duration); ``job.ended`` when it did not run (its outcome is written)."""
        options = job.fields[8] or NO_OPTIONS
        if options.expires is not None and time.time() > options.expires:
            job.ended = True
            self.release_slot_with(job, task)
            self._outcomes.expired(job, task)
            return None, 0.0
        if task.limits is not None and not await self._admitted(job, task):
            return None, 0.0
        payload = job.fields[1]
        if task.decode_payload is not None:
            try:
                payload = task.decode_payload(payload)
            except InvalidPayload as exc:
                job.ended = True
                await self._outcomes.invalid_payload(job, task, exc)
                return None, 0.0
        timeout = options.timeout if options.timeout is not None else task.timeout
        keep = options.keep_result if options.keep_result is not None else task.keep_result
        if keep is not None:
            job.keep_result, job.started_at = keep, time.time()
            self._outcomes.started(job)
        # Its result is encoded when kept, or when a workflow's next steps read it.
        encode = keep is not None or (options.workflow is not None and options.workflow.keep)
        if self.hooks is not None:
            return await self._run_with_middleware(job, task, payload, timeout, encode)
        body = self._bodies[task.name]
        begin = job.began = time.perf_counter()
        try:
            if timeout is None:
                result = await body(payload)
            else:
                result = await timed(body, payload, task.name, timeout)
            if encode:
                # InvalidResult (no JSON form, or too large): gives up
                job.result = task.result_codec.encode_json(result, self._config.max_payload_bytes)
        except Exception as exc:  # noqa: BLE001 - the task failed: retried or given up
            return exc, time.perf_counter() - begin
        return None, time.perf_counter() - begin

    def release_slot_with(self, job: Job, task: Task | None) -> None:
        """A message of a task with a concurrency limit that ends without being admitted
        (cancelled before it started, expired, refused) may hold a slot all the same (a
        granted waiter, a redelivered or reclaimed holder): its end releases it, as an
        admitted one's does (releasing a slot it does not hold changes nothing)."""
        if self._admission is not None and task is not None and task.limits is not None:
            job.slot = self._admission.slot_of(job, task.limits)

    async def _admitted(self, job: Job, task: Task) -> bool:
        """Whether ``job`` of a task with limits may run now; else it was deferred (or
        refused: its payload has no limit key), and ``job.ended``."""
        if self._admission is None or task.limits is None:
            return True
        admitted = await self._admission.admit(job, task, task.limits)
        if admitted is True:
            return True
        job.ended = True
        if admitted is not False:  # a key function refused the payload: given up
            await self._outcomes.invalid_payload(job, task, admitted)
        return False

    async def _run_with_middleware(
        self, job: Job, task: Task, payload: object, limit: float | None, encode: bool
    ) -> tuple[Exception | None, float]:
        """The attempt of :meth:`run_with_options` inside the middleware's
        ``around_attempt`` hooks, its timeout (``limit``) and result encoding included:
        they see what the attempt ends with."""
        assert self.hooks is not None
        duration = 0.0
        body = self._bodies[task.name]

        async def attempt() -> object:
            nonlocal duration
            begin = job.began = time.perf_counter()
            try:
                if limit is None:
                    result = await body(payload)
                else:
                    result = await timed(body, payload, task.name, limit)
                if encode:
                    size = self._config.max_payload_bytes
                    job.result = task.result_codec.encode_json(result, size)
            finally:
                duration = time.perf_counter() - begin
            return result

        info = AttemptInfo(job, self._config.consumer_group, task)
        try:
            await self.hooks.run(info, attempt)
        except Exception as exc:  # noqa: BLE001 - the attempt failed: retried or given up
            return exc, duration
        return None, duration

    def _middleware_broke(self, error: MiddlewareError) -> None:
        """A middleware swallowed what it may not: reported, and it changes nothing."""
        if self._errors is not None:
            self._errors.capture(error)
        logger.error("%s", error)

    async def ended_by(
        self, job: Job, exc: BaseException, *, cancelling: bool
    ) -> BaseException | None:
        """``job`` ended with an exception that is not an ``Exception``: what goes on up
        (a cancellation, see :meth:`_cancelled_with_loop`; or the end of the process:
        ``KeyboardInterrupt``, ``SystemExit``), or None when it was the task's own failure
        (some libraries raise ``BaseException`` subclasses): retried or given up on, as
        any failure — it never ends the runner."""
        if _holds(exc, _PASSING):
            return exc
        if _holds(exc, trio.Cancelled):
            return self._cancelled_with_loop(job, exc, cancelling)
        if job.ended or job.task is None:  # not the attempt's own: a failed-task handler's
            self._outcomes.internal_error(job, exc)
        else:
            await self.failed(job, job.task, exc)
        return None

    def _cancelled_with_loop(self, job: Job, exc: BaseException, cancelling: bool) -> BaseException:
        """``job`` was cancelled with its job loop (``exc`` is the ``Cancelled``, or a group
        of them from the task's own nurseries): its task was cancelled (see
        ``WorkerPool.cancel_task``), or, past the drain timeout (``cancelling``), it is an
        interruption (the message is released; an attempt that ended keeps counting, so
        that it is not run again for nothing). Returns what goes on up: the cancellation
        alone — what the task's clean-up raised besides is logged, and changes nothing."""
        if isinstance(exc, BaseExceptionGroup):
            cancelled, also = exc.split(trio.Cancelled)
            if cancelled is None:
                return exc
            if also is not None:
                self._outcomes.clean_up_raised(job, also)
            exc = cancelled
        elif not isinstance(exc, trio.Cancelled):
            return exc
        if job.cancel_requested:
            job.ended = True
            self._outcomes.cancelled(job, job.task)
        elif cancelling:
            self._outcomes.interrupted(job, attempt_ended=job.ended)
        return exc
