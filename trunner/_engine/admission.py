"""Admission of the messages of limited tasks: group-wide rate and concurrency limits.

Limits are admission, not failure. Before the attempt of a message of a task with limits
starts, one script (``admit.lua``) decides, atomically for the whole group:

* **run** it: its rate admits it now (the reservation is taken) and it holds a concurrency
  slot (its stream entry id is recorded as a holder; a message that holds one already — a
  redelivery, a reclaim — runs at once);
* **defer it by its rate**: it is acknowledged off the stream and put into the delayed set
  due exactly when the rate admits it (GCRA with reservation), marked as reserved so that
  it runs without being checked again when it comes back;
* **defer it by its concurrency**: it is acknowledged off the stream and appended to the
  limit's waiting list; the script that releases a slot (the acknowledgement, the retry or
  the dead letter of a holder) grants it to the oldest waiter: its message re-enters the
  stream and its new entry id holds the slot.

Either deferral uses no attempt. Tasks without limits never come here: the pool's hot path
tests ``Task.plain``, which is False for a limited task. See [limits](limits.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs
import trio

from .._redis import MAX_ADMITS_PER_CALL, Admit, Broker, Slot
from .._task import Task
from .._util import ErrorLog, LoopBackoff, logger
from .._wire.decode import is_rate_reserved
from .._wire.envelope import reencode_deferred
from .._wire.limits import Limits
from ..errors import BackendError, InvalidPayload
from .counters import Counters
from .holdings import Holdings, Job
from .quarantine import Quarantine

__all__ = ["ADMISSION_TIMEOUT", "Admission"]

#: Bound on one admission, its own retries included; then the message stays pending.
ADMISSION_TIMEOUT = 10.0


@attrs.define(eq=False)
class _Pending:
    """One admission waiting for its batch's script call."""

    request: Admit
    job: Job
    decided: bool = False
    verdict: tuple[str, int] | None = None


class Admission:
    """Admits or defers the messages of limited tasks (see the module docs)."""

    def __init__(
        self,
        broker: Broker,
        holdings: Holdings,
        counters: Counters,
        errors: ErrorLog,
        quarantine: Quarantine | None,
        on_deferred: Callable[[int], None],
    ) -> None:
        self._broker = broker
        self._keys = broker.keys
        self._holdings = holdings
        self._counters = counters
        self._errors = errors
        self._quarantine = quarantine
        self._on_deferred = on_deferred
        #: Admissions waiting to be sent, in the order their jobs asked.
        self._queued: list[_Pending] = []
        #: A job is sending a batch (the others wait for ``_flushed``).
        self._flushing = False
        self._flushed = trio.Event()

    def _plan(
        self, job: Job, limits: Limits
    ) -> tuple[tuple[str, float, float] | None, Slot | None, str]:
        """What to check for ``job``: (its rate, or None; its slot, or None; the slot's
        limit key, or ''). Whatever the key functions raise propagates."""
        payload, keys = job.fields[1], self._keys
        rate = None
        if limits.rate is not None and not is_rate_reserved(job.fields[5]):
            key = keys.rate_limit(limits.rate_key_for(payload))
            rate = (key, limits.rate.emission_ms, limits.rate.tolerance_ms)
        slot, slot_key = None, ""
        if limits.concurrency is not None:
            slot_key = limits.concurrency_key_for(payload)
            holders = keys.concurrency_holders(slot_key)
            slot = (holders, keys.concurrency_waiting(slot_key), limits.concurrency)
        return rate, slot, slot_key

    def slot_of(self, job: Job, limits: Limits) -> Slot | None:
        """The concurrency slot ``job``'s message would hold (None: its task has no
        concurrency limit, or its key function refuses the payload)."""
        if limits.concurrency is None:
            return None
        try:
            _, slot, _ = self._plan(job, limits)
        except Exception:  # noqa: BLE001 - the user's key function: no slot to release
            return None
        return slot

    async def admit(self, job: Job, task: Task, limits: Limits) -> bool | InvalidPayload:
        """Whether ``job`` may run now (True); False when it was deferred (or it is not
        pending any more, or admission failed: it stays pending for a later delivery); an
        ``InvalidPayload`` when a key function refused its payload (it is given up)."""
        try:
            rate, slot, slot_key = self._plan(job, limits)
        except Exception as exc:  # noqa: BLE001 - the user's key function: the payload's fault
            if isinstance(exc, InvalidPayload):
                return exc
            error = InvalidPayload(
                f"has no limit key (its rate_limit_key or concurrency_key raised "
                f"{type(exc).__name__}: {exc})"
            )
            error.__cause__ = exc
            return error
        if rate is None and slot is None:
            return True  # its rate reserved already, and no concurrency limit
        message = job.message
        deferred = reencode_deferred(
            message, rate_reserved=limits.rate is not None, group=self._broker.keys.group
        )
        pending = _Pending(
            Admit(job.message_id, message.task_id, deferred, rate, slot, slot_key), job
        )
        self._queued.append(pending)
        with trio.move_on_after(ADMISSION_TIMEOUT, shield=True):
            while not pending.decided:
                if self._flushing:
                    await self._flushed.wait()
                    continue
                self._flushing = True
                try:
                    await self._flush()
                finally:
                    self._flushing = False
                    self._flushed.set()
                    self._flushed = trio.Event()
        if not pending.decided and pending in self._queued:
            self._queued.remove(pending)  # timed out before it was sent
        verdict = pending.verdict
        if verdict is None:
            self._holdings.keep(job)
            logger.error(
                "admission of %s could not be written; it stays pending for a later delivery",
                job.about(),
                extra=job.log_fields(),
            )
            return False
        return self._decided(job, task, slot, *verdict)

    async def _flush(self) -> None:
        """Send the admissions queued now (those of the jobs started in this scheduling
        round join first), at most :data:`MAX_ADMITS_PER_CALL`, in one script call; retry
        on a Redis error. A batch whose call was cancelled (its flusher's time ran out) is
        decided as not admitted: its messages stay pending for a later delivery."""
        await trio.lowlevel.checkpoint()  # the other jobs of this round queue theirs
        batch = self._queued[:MAX_ADMITS_PER_CALL]
        del self._queued[: len(batch)]
        if not batch:
            return
        backoff = LoopBackoff()
        try:
            while True:
                try:
                    verdicts = await self._broker.admit_many(
                        [p.request for p in batch], round(time.time() * 1000, 3)
                    )
                    break
                except BackendError as exc:
                    self._errors.capture(exc)
                    logger.warning(
                        "admission of %d messages failed, will retry: %s", len(batch), exc
                    )
                    if self._quarantine is not None:  # a key of a wrong type: set aside
                        await self._quarantine.after_error(exc)
                    await trio.sleep(backoff.next_delay())
        finally:
            for p in batch:
                p.decided = True
        for p, verdict in zip(batch, verdicts, strict=True):
            p.verdict = verdict

    def _decided(self, job: Job, task: Task, slot: Slot | None, verdict: str, value: int) -> bool:
        counters = self._counters
        if verdict == "run":
            job.slot = slot
            return True
        if verdict == "rate":
            counters.deferred_rate += 1
            counters.task(task.name).deferred_rate += 1
            self._on_deferred(value)
            logger.debug(
                "%s deferred by its rate limit for %.3f s",
                job.about(),
                max(0.0, value / 1000 - time.time()),
                extra=job.log_fields(),
            )
        elif verdict == "wait":
            counters.deferred_concurrency += 1
            counters.task(task.name).deferred_concurrency += 1
            logger.debug(
                "%s deferred by its concurrency limit (waiting: %d)",
                job.about(),
                value,
                extra=job.log_fields(),
            )
        else:  # lost: another consumer claimed it, and ended it
            logger.info(
                "%s: not pending any more when admitted; not run here",
                job.about(),
                extra=job.log_fields(),
            )
        return False
