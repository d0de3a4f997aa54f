"""Task handles: a dispatched task you can hold, await, look at and cancel.

``dispatch`` returns a :class:`TaskHandle`, which is also the task's id (a ``str``: code
that kept the id keeps working). ``await handle.result()`` waits for the outcome of a task
that keeps its result; ``await handle.status()`` says where the task is; ``await
handle.cancel()`` cancels it wherever it is. ``client.handle(task_id)`` re-attaches to a
task from anywhere.

Waiting never polls: each producer (runner or client) has one set of waiters, woken
through one subscription to the group's channel of finished tasks
(``trunner._waiting.waiters``); what a look at the task says is
``trunner._waiting.protocol``'s.
"""

from __future__ import annotations

import time
from typing import Generic, Protocol, TypeVar

from ._context import _current_message
from ._redis import Broker, TaskLook
from ._util import wall_ms
from ._waiting.calls import Calls, counting
from ._waiting.protocol import (
    NOTHING_KNOWN,
    Known,
    deadline,
    decode_result,
    failure_of,
    learned,
    message_found,
    not_found,
    status_of,
    too_slow,
)
from ._waiting.runtime import Runtime
from ._waiting.waiters import Waiters
from ._wire.codec import TypeCodec, untyped
from ._wire.marks import MARK_LIFETIME
from ._wire.record import UNASKED_KEEP, record_fields, ttl_ms
from .errors import BackendError, ResultTimeout, SelfWait
from .status import CancelOutcome, TaskState, TaskStatus

__all__ = ["HandleSource", "TaskHandle"]

R = TypeVar("R")


class HandleSource(Protocol):
    """What a handle needs of the producer that made it (a runner or a client)."""

    def _open_broker(self) -> Broker: ...

    def _open_waiters(self) -> Waiters: ...

    def _runtime(self) -> Runtime: ...

    def _calls(self) -> Calls: ...

    def _group_name(self) -> str: ...

    def _keep_result_of(self, task_name: str) -> float | None: ...

    def _knows_task(self, task_name: str) -> bool: ...


@counting
class TaskHandle(str, Generic[R]):
    """A dispatched task: its id (this ``str``), its status, its result, its cancellation.

    ``dispatch`` returns one; ``Client.handle(task_id)`` and ``Runner.handle(task_id)``
    make one for a task dispatched elsewhere. Typed by the task's return annotation when
    dispatched as a task function (``dispatch(resize, request)`` is a
    ``TaskHandle[Thumbnail]``).
    """

    _producer: HandleSource
    _result_codec: TypeCodec
    _known: Known

    def __new__(
        cls,
        task_id: str,
        producer: HandleSource,
        result_codec: TypeCodec = untyped,
        known: Known = NOTHING_KNOWN,
    ) -> TaskHandle[R]:
        handle = super().__new__(cls, task_id)
        handle._producer = producer
        handle._result_codec = result_codec
        handle._known = known
        return handle

    def __repr__(self) -> str:
        return f"<TaskHandle {str(self)!r}>"

    def _calls(self) -> Calls:
        return self._producer._calls()

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        return str, (str(self),)  # copies and pickles are the plain id

    @property
    def id(self) -> str:
        """The task's id."""
        return str(self)

    async def status(self) -> TaskStatus:
        """Where the task is now, and what is known of it (one round trip).

        Returns:
            A [``TaskStatus``][trunner.TaskStatus]: its state (scheduled, queued,
            running, retrying, succeeded, failed, dead, cancelled, expired, unknown),
            attempt, instance, progress and times, as far as Redis knows them.

        Raises:
            RunnerNotRunning: The runner or client is not open.
            RedisUnavailable, RedisCommandError: Redis failed.
        """
        look = await self._producer._open_broker().task_look(self.id)
        return status_of(self.id, look)

    async def cancel(self, *, wait: bool = False) -> CancelOutcome:
        """Cancel the task, wherever it is (see [Task handles](task-handles.md#cancelling)).

        A delayed or queued task is removed: once this returns, it never starts. A running
        task gets a cancel mark and an announcement: the instance running it cancels its
        attempt at once. A cancelled task is acknowledged, never retried, its unique lock
        released, its failed-task handler not called; its outcome is ``cancelled``
        (``result()`` raises [``TaskCancelled``][trunner.TaskCancelled] when it keeps its
        result).

        Args:
            wait: For a running task, wait until it is no longer running; then the
                outcome is ``FINISHED`` if it ended otherwise than cancelled (it finished
                before the cancel reached it, or caught the cancellation and returned).

        Returns:
            A [``CancelOutcome``][trunner.CancelOutcome]: ``REMOVED``, ``CANCELLING``,
            ``FINISHED`` (nothing to do) or ``UNKNOWN``.

        Raises:
            RunnerNotRunning: The runner or client is not open.
            RedisUnavailable, RedisCommandError: Redis failed (the task may or may not be
                cancelled: look at its status).
        """
        producer = self._producer
        broker = producer._open_broker()
        look = await broker.task_look(self.id)
        status = status_of(self.id, look)
        if status.state.finished:
            return CancelOutcome.FINISHED
        message = message_found(self.id, look)
        lock = record = None
        if message is not None:
            if message.unique_key is not None and message.unique_token is not None:
                lock = (broker.keys.unique(message.unique_key), message.unique_token)
            keep = message.options.keep_result or producer._keep_result_of(message.task_name)
            if keep is None:
                keep = UNASKED_KEEP
            fields = record_fields(
                state="cancelled",
                task=message.task_name,
                attempt=message.attempt,
                enqueued_at=message.enqueued_at,
                finished_at=time.time(),
                keep=keep,
            )
            record = (broker.keys.task(self.id), ttl_ms(keep), fields)
        until = wall_ms() + int(MARK_LIFETIME * 1000)
        where = await broker.cancel_task(self.id, until, lock, record)
        if where in ("delayed", "waiting", "queued"):
            return CancelOutcome.REMOVED
        if where == "running":
            if wait:
                ended = await self._wait_not_running()
                if ended is TaskState.UNKNOWN or (
                    ended.finished and ended is not TaskState.CANCELLED
                ):  # it finished first (its acknowledgement was on its way)
                    return CancelOutcome.FINISHED
            return CancelOutcome.CANCELLING
        state = (await self.status()).state
        return CancelOutcome.FINISHED if state.finished else CancelOutcome.UNKNOWN

    async def _wait_not_running(self) -> TaskState:
        """Wait until the task is no longer running (woken by the channel of finished
        tasks: a cancelled task is announced there too); return its state then."""
        producer = self._producer
        while True:
            waiters = producer._open_waiters()
            with waiters.register(self.id) as announced:
                await waiters.subscribed()
                state = (await self.status()).state
                if state is not TaskState.RUNNING:
                    return state
                await announced.wait()

    async def result(self, timeout: float | None = None) -> R:  # noqa: ASYNC109 - the API
        """Wait for the task's outcome and return its result.

        Waiting never polls (see [Task handles](task-handles.md)); the result is decoded
        into the task's declared return type when the handle knows it.

        Args:
            timeout: Seconds to wait at most (``None``: for ever). ``0`` looks once and
                does not wait: it returns (or raises) an outcome stored already.

        Returns:
            What the task returned.

        Raises:
            TaskFailed: The task failed (its last attempt raised, or it was given up on);
                its ``error`` is a ``RemoteFailure`` (class name, message, traceback).
            TaskCancelled: The task was cancelled.
            TaskExpired: The task was not started before its ``expires`` time.
            ResultNotKept: The task ended and keeps no result (``keep_result`` is set
                neither on the task nor on its dispatch): nothing of its outcome was
                stored. A ``ResultNotFound``.
            ResultExpired: The task kept its outcome ``keep_result`` seconds, and it is
                gone. A ``ResultNotFound``.
            ResultNotFound: No outcome is stored and the handle cannot tell why (see
                [``ResultNotFound``][trunner.ResultNotFound]): nothing is known of the
                id in the group, or the task was dispatched by name through a client
                whose registry does not know it.
            ResultTimeout: ``timeout`` passed first (a ``trio.TooSlowError``); its message
                names the task and where it was at the last look.
            BadData: The stored result is not JSON, or does not fit the task's declared
                return type (the task changed since it ran).
            SelfWait: Called by the task itself (it would wait for ever).
            RunnerNotRunning: The runner or client is not open, or closed while this
                waited.
            ValueError: ``timeout`` is negative, or not a number.
        """
        self._check_not_self()
        runtime = self._producer._runtime()
        until = deadline(timeout, runtime.now())
        if until <= runtime.now():  # timeout=0: one look, no waiting
            status, look = await self._look(None)
            if self._settled(status, look):
                return self._outcome(status, look, self._known)
            raise self._too_slow(timeout, status, self._known)
        last: list[TaskStatus] = []
        ended, result = await runtime.until(until, lambda: self._wait(last))
        if ended:
            return result  # type: ignore[return-value]
        raise self._too_slow(timeout, last[-1] if last else None, self._known)

    async def _wait(self, last: list[TaskStatus]) -> R:
        """Wait for the outcome, looking again at each announcement (``last``: the
        statuses seen, for the error of a wait that runs out of time)."""
        producer = self._producer
        while True:
            waiters = producer._open_waiters()
            with waiters.register(self.id) as announced:
                await waiters.subscribed()
                status, look = await self._look(waiters)
                if self._settled(status, look):
                    return self._outcome(status, look, self._known)
                last[:] = [status]
                await announced.wait()

    def _settled(self, status: TaskStatus, look: TaskLook) -> bool:
        """Whether a look ends the wait (an outcome stored, or nothing left to wait for);
        what it found is learnt first, unless the task finished."""
        if status.state.finished:
            return True
        self._known = self._learn(self._known, look)
        return status.state is TaskState.UNKNOWN

    def _learn(self, known: Known, look: TaskLook) -> Known:
        """What ``known`` becomes with what ``look`` found (see ``waiting.learned``)."""
        producer = self._producer

        def declared(name: str) -> Known | None:
            if not producer._knows_task(name):
                return None
            return Known(name, producer._keep_result_of(name), "task", dispatched=True)

        return learned(known, message_found(self.id, look), declared)

    def _too_slow(
        self, timeout: float | None, status: TaskStatus | None, known: Known
    ) -> ResultTimeout:
        return too_slow(self.id, timeout, status, known, time.time())

    async def _look(self, waiters: Waiters | None) -> tuple[TaskStatus, TaskLook]:
        """The task's status, and the look it was read from; a Redis error that comes of
        the producer closing meanwhile is ``RunnerNotRunning``."""
        try:
            look = await self._producer._open_broker().task_look(self.id)
        except BackendError:
            if waiters is not None:
                waiters.check_open()
            raise
        return status_of(self.id, look), look

    def _outcome(self, status: TaskStatus, look: TaskLook, known: Known) -> R:
        if status.state is TaskState.UNKNOWN:
            raise not_found(self.id, self._producer._group_name(), known)
        if status.state is TaskState.SUCCEEDED:
            raw = look.record.get(b"result")
            return decode_result(self.id, raw, self._result_codec)  # type: ignore[no-any-return]
        raise failure_of(self.id, status, look)

    def _check_not_self(self) -> None:
        source = _current_message.get(None)
        if source is not None and source.message.task_id == self.id:
            raise SelfWait(
                f"task {self.id} awaits its own result: it would wait for ever "
                "(a task awaiting other tasks of its group can also wait for ever when "
                "they cannot start: every worker slot is taken by such waiters)"
            )
