"""Task handles: a dispatched task you can hold, await, look at and cancel.

``dispatch`` returns a :class:`TaskHandle`, which is also the task's id (a ``str``: code
that kept the id keeps working). ``await handle.result()`` waits for the outcome of a task
that keeps its result; ``await handle.status()`` says where the task is; ``await
handle.cancel()`` cancels it wherever it is. ``client.handle(task_id)`` re-attaches to a
task from anywhere.

Waiting never polls. Each producer (runner or client) has one :class:`Waiters`: one
subscription to the group's channel of finished tasks, shared by all its waiters. A waiter
registers, makes sure the subscription is up, then looks at the stored outcome: an outcome
written before the subscription is seen by the look, one written after it is announced on
the channel (no lost wake-up). When the subscription breaks and comes back, every waiter
looks again.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from typing import Any, Generic, Protocol, TypeVar

import attrs
import trio

from ._context import _current_message
from ._engine.cancellation import MARK_LIFETIME
from ._engine.holdings import split_deliveries
from ._redis import Broker, Subscriber, TaskLook
from ._util import LoopBackoff, logger, wall_ms
from ._wire.codec import TypeCodec, untyped
from ._wire.decode import MessageDecodeError, decode_message
from .errors import (
    BackendError,
    BadData,
    InvalidPayload,
    ResultExpired,
    ResultNotFound,
    ResultNotKept,
    ResultTimeout,
    RunnerNotRunning,
    TaskCancelled,
    TaskExpired,
    TaskFailed,
    TrunnerError,
)
from .errors import RemoteFailure as _RemoteFailure
from .status import (
    UNASKED_KEEP,
    CancelOutcome,
    TaskState,
    TaskStatus,
    as_time,
    read_record,
    record_fields,
    ttl_ms,
)

__all__ = ["HandleSource", "Known", "SelfWait", "TaskHandle", "Waiters", "status_of"]

R = TypeVar("R")


class SelfWait(TrunnerError, RuntimeError):
    """A task awaited its own result: it would wait for ever (also a ``RuntimeError``)."""


class Waiters:
    """The waiters of one producer, woken through one subscription to the group's channel
    of finished tasks (see the module docs). The standard lifecycle: ``run`` until
    :meth:`stop`; it subscribes only once somebody waits."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._waiting: dict[str, set[trio.Event]] = {}
        #: Waited-for ids that hold whitespace: the channel joins ids with spaces, so these
        #: are woken by every announcement (and look again).
        self._spaced: set[str] = set()
        self._wanted = trio.Event()
        self._subscribed = trio.Event()
        self._closed = False
        self._scope = trio.CancelScope()
        self.stopped = trio.Event()

    @contextlib.contextmanager
    def register(self, task_id: str) -> Iterator[trio.Event]:
        """An event set when ``task_id`` is announced finished, or when the subscription
        came back after a break (look again either way)."""
        event = trio.Event()
        self._waiting.setdefault(task_id, set()).add(event)
        spaced = task_id != "".join(task_id.split())
        if spaced:
            self._spaced.add(task_id)
        self._wanted.set()
        try:
            yield event
        finally:
            events = self._waiting.get(task_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiting[task_id]
                    self._spaced.discard(task_id)

    async def subscribed(self) -> None:
        """Return once the subscription is up (starting it if nobody waited before).

        Raises:
            RunnerNotRunning: The waiters stopped (their runner or client closed), before
                or while this waited.
        """
        self.check_open()
        self._wanted.set()
        await self._subscribed.wait()
        self.check_open()

    def check_open(self) -> None:
        """Raise ``RunnerNotRunning`` once the waiters stopped."""
        if self._closed:
            raise RunnerNotRunning(
                "the runner or client was closed: nothing hears of finished tasks any more"
            )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the waiters until :meth:`stop`."""
        try:
            with self._scope:
                task_status.started()
                await self._wanted.wait()
                backoff = LoopBackoff()
                while True:
                    subscriber = self._broker.open_done_subscriber()
                    try:
                        await self._listen(subscriber, backoff)
                    except BackendError as exc:
                        logger.debug("listening for finished tasks failed: %s", exc)
                    finally:
                        if self._subscribed.is_set():  # waiters wait for the next one
                            self._subscribed = trio.Event()
                        self._wake_all()  # they look again: nothing is missed meanwhile
                        with trio.CancelScope(shield=True):
                            await subscriber.aclose()
                    await trio.sleep(backoff.next_delay())
        finally:
            self._closed = True
            self._subscribed.set()  # whoever waits for a subscription learns it is closed
            self._wake_all()
            self.stopped.set()

    def stop(self) -> None:
        """Stop serving: waiters still waiting raise ``RunnerNotRunning``."""
        self._scope.cancel()

    async def _listen(self, subscriber: Subscriber, backoff: LoopBackoff) -> None:
        await subscriber.subscribe()
        backoff.reset()
        self._subscribed.set()
        while True:
            data = await subscriber.next_message()
            for task_id in data.decode("utf-8", "surrogateescape").split():
                for event in self._waiting.get(task_id, ()):
                    event.set()
            for task_id in self._spaced:
                for event in self._waiting.get(task_id, ()):
                    event.set()

    def _wake_all(self) -> None:
        for events in self._waiting.values():
            for event in events:
                event.set()


class HandleSource(Protocol):
    """What a handle needs of the producer that made it (a runner or a client)."""

    def _open_broker(self) -> Broker: ...

    def _open_waiters(self) -> Waiters: ...

    def _group_name(self) -> str: ...

    def _keep_result_of(self, task_name: str) -> float | None: ...

    def _knows_task(self, task_name: str) -> bool: ...


@attrs.frozen
class Known:
    """What a handle knows of its task beyond its id: what its producer knew when it made
    the handle, and what its waits saw since. It tells, when no outcome is stored, whether
    the task ended without keeping one, or its outcome expired, or nothing is known of it
    (nothing is stored for a task that keeps no result: the acknowledgement stays cheap)."""

    task_name: str | None = None
    """The task's name."""
    keep: float | None = None
    """Its ``keep_result`` (None: none), when ``keep_from`` says where it comes from."""
    keep_from: str | None = None
    """``"dispatch"`` (the message says), ``"task"`` (the task's declaration, as the
    producer or the caller gave it), or None: not known."""
    dispatched: bool = False
    """Whether the task certainly was dispatched to the group (the handle was made by a
    dispatch, or a look saw the task's message)."""


#: A handle made by ``handle(task_id)``: nothing is known of its task.
NOTHING_KNOWN = Known()


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
        message = _message_found(self.id, look)
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
        deadline = _deadline(timeout)
        known = self._known
        if deadline <= trio.current_time():  # timeout=0: one look, no waiting
            status, look = await self._look(None)
            if status.state.finished:
                return self._outcome(status, look, known)
            known = self._known = self._learn(known, look)
            if status.state is TaskState.UNKNOWN:
                return self._outcome(status, look, known)
            raise self._too_slow(timeout, status, known)
        producer = self._producer
        last: TaskStatus | None = None
        with trio.move_on_at(deadline):
            while True:
                waiters = producer._open_waiters()
                with waiters.register(self.id) as announced:
                    await waiters.subscribed()
                    status, look = await self._look(waiters)
                    if status.state.finished:
                        return self._outcome(status, look, known)
                    known = self._known = self._learn(known, look)
                    if status.state is TaskState.UNKNOWN:
                        return self._outcome(status, look, known)
                    last = status
                    await announced.wait()
        raise self._too_slow(timeout, last, known)

    def _learn(self, known: Known, look: TaskLook) -> Known:
        """What ``known`` becomes with the task's message, when ``look`` holds it (delayed,
        queued, running, or acknowledged and left in the stream): it was dispatched, under
        its name, with the ``keep_result`` its dispatch or its task sets. The handle keeps
        what it learnt: one that saw its task queued knows, once it is gone, that it ended."""
        message = _message_found(self.id, look)
        if message is None:
            return known
        name: str = message.task_name
        keep: float | None = message.options.keep_result
        if keep is not None:
            return Known(name, keep, "dispatch", dispatched=True)
        if known.keep_from is not None and known.task_name == name:
            return attrs.evolve(known, dispatched=True)
        if self._producer._knows_task(name):
            return Known(name, self._producer._keep_result_of(name), "task", dispatched=True)
        return Known(name, dispatched=True)

    def _too_slow(
        self, timeout: float | None, status: TaskStatus | None, known: Known
    ) -> ResultTimeout:
        """The error of a wait that ran out of time, naming the task and where it was."""
        name = (status.task if status is not None else None) or known.task_name
        if status is None:
            where = "no look at it ended in time"
        else:
            where = f"at the last look it was {status.state.value}"
            if status.attempt is not None and status.attempt > 1:
                where += f" (attempt {status.attempt})"
            if status.instance is not None:
                where += f" on {status.instance}"
            if status.due_at is not None:
                where += f", due in {max(status.due_at - time.time(), 0.0):.3g} s"
        return ResultTimeout(
            f"no outcome of task {self.id}{_named(name)} within {timeout:g} s: {where} "
            "(the task goes on; only the wait ended)",
            self.id,
            name,
            timeout or 0.0,
            status.state if status is not None else None,
        )

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
            raise self._not_found(known)
        if status.state is TaskState.SUCCEEDED:
            return self._decode_result(look.record.get(b"result"))  # type: ignore[no-any-return]
        if status.state is TaskState.CANCELLED:
            raise TaskCancelled(f"task {self.id} ({status.task}) was cancelled")
        if status.state is TaskState.EXPIRED:
            raise TaskExpired(f"task {self.id} ({status.task}) expired before it started")
        error = status.error
        failure = _RemoteFailure(
            error.type if error else "Error",
            error.message if error else "",
            error.traceback if error else "",
        )
        message_id = look.record.get(b"message_id", b"").decode("utf-8", "replace")
        raise TaskFailed(status.task or "", message_id, status.attempt or 0, failure)

    def _not_found(self, known: Known) -> ResultNotFound:
        """Why no outcome is stored, as far as ``known`` tells (see :class:`Known`)."""
        group = self._producer._group_name()
        name = known.task_name
        task = _named(name)
        keep_it = (
            "to await its result, keep it: @tasks.task(keep_result=SECONDS) on the task, or "
            "dispatch(..., keep_result=SECONDS)"
        )
        if not known.dispatched:
            return ResultNotFound(
                f"nothing is known of task {self.id}{task} in group {group!r}: no task of "
                "that id was dispatched to this group (look at the id, and the group), or "
                "it ended without keeping its result (keep_result), or its result expired",
                self.id,
                name,
            )
        if known.keep_from is None:
            return ResultNotFound(
                f"task {self.id}{task} was dispatched to group {group!r}, and no outcome "
                f"of it is stored: it keeps no result (keep_result: this producer's "
                f"registry does not know the task {name!r}, so cannot tell), its result "
                "expired, or the runners do not know the task either and dead-lettered it "
                f"(look at its dead letters); {keep_it}",
                self.id,
                name,
            )
        if known.keep is None:
            return ResultNotKept(
                f"task {self.id}{task} ended, and keeps no result: keep_result is set "
                "neither on the task nor on its dispatch, so its outcome was not stored "
                f"(that of a cancelled or expired one is kept {UNASKED_KEEP:g} s); {keep_it}",
                self.id,
                name,
            )
        said, unless = "its dispatch", ""
        if known.keep_from == "task":
            said = "the task as declared here"
            unless = " (or the runners declare the task without keep_result)"
        return ResultExpired(
            f"task {self.id}{task} kept its outcome {known.keep:g} s (keep_result, set by "
            f"{said}) and it is gone: it expired, or was deleted{unless}; await the result "
            "sooner, or keep it longer",
            self.id,
            name,
            known.keep,
        )

    def _decode_result(self, raw: bytes | None) -> Any:
        """The stored result, decoded into the declared type; ``BadData`` when it is not
        JSON, or does not fit the type (the task changed since it ran, or something else
        wrote the record)."""
        import msgspec  # noqa: PLC0415 - loaded by waiters of results only

        source = f"task:{self.id}"
        try:
            value: Any = msgspec.json.decode(raw) if raw is not None else None
        except msgspec.DecodeError as exc:
            raise BadData(source, "result", f"the stored result is not JSON: {exc}") from None
        try:
            return self._result_codec.decode(value)
        except InvalidPayload as exc:
            raise BadData(
                source,
                "result",
                f"the stored result {exc} (handle(task_id) without the task reads it as JSON)",
            ) from None

    def _check_not_self(self) -> None:
        source = _current_message.get(None)
        if source is not None and source.message.task_id == self.id:
            raise SelfWait(
                f"task {self.id} awaits its own result: it would wait for ever "
                "(a task awaiting other tasks of its group can also wait for ever when "
                "they cannot start: every worker slot is taken by such waiters)"
            )


def _named(task_name: str | None) -> str:
    """`` ('name')`` after a task id, when the name is known."""
    return f" ({task_name!r})" if task_name is not None else ""


def _deadline(timeout: float | None) -> float:
    """The Trio deadline of a wait of ``timeout`` seconds (None: for ever)."""
    if timeout is None:
        return math.inf
    if (
        not isinstance(timeout, int | float)
        or isinstance(timeout, bool)
        or math.isnan(timeout)
        or timeout < 0
    ):
        raise ValueError(f"timeout must be None or a number of seconds >= 0, got {timeout!r}")
    return trio.current_time() + timeout


def status_of(task_id: str, look: TaskLook) -> TaskStatus:
    """The status of a task from one look at where it is: the live structures say where
    it is now, its record (for a task that keeps its result) what happened to it."""
    recorded = read_record(task_id, look.record)
    if recorded is not None and recorded.state.finished:
        return recorded
    if look.due_ms is not None:
        message = _message(task_id, look.delayed)
        retrying = message is not None and message.attempt > 1
        state = TaskState.RETRYING if retrying else TaskState.SCHEDULED
        return _merge(recorded, task_id, state, message, due_at=as_time(look.due_ms / 1000))
    if look.waiting is not None:  # deferred by its concurrency limit: it runs once granted
        return _merge(recorded, task_id, TaskState.QUEUED, _message(task_id, look.waiting))
    if look.entry_id is not None:
        deliveries = split_deliveries(look.deliveries or 1)[0]  # the given-up mark off
        message = _message(look.entry_id, look.entry, deliveries)
        if not _belongs(task_id, look.entry_id, message):  # a where-map entry gone stale
            return TaskStatus(id=task_id, state=TaskState.UNKNOWN)
        if look.consumer is not None:
            return _merge(recorded, task_id, TaskState.RUNNING, message, instance=look.consumer)
        if not look.delivered:
            return _merge(recorded, task_id, TaskState.QUEUED, message)
    # Nowhere now, with no outcome: it finished without keeping its result (a record
    # left by its progress reports says nothing more), or it never existed.
    return TaskStatus(id=task_id, state=TaskState.UNKNOWN)


def _belongs(task_id: str, entry_id: str, message: Any) -> bool:
    """Whether the stream entry ``entry_id`` (its ``message``, None when it does not
    decode) is the task ``task_id``'s: an entry found through the where-map, or by an id
    shaped like an entry id, may be another task's."""
    return bool(message.task_id == task_id) if message is not None else entry_id == task_id


def _message_found(task_id: str, look: TaskLook) -> Any:
    """The message of task ``task_id`` that ``look`` found (delayed, waiting for a slot, or
    its stream entry), decoded; None when it found none, or none that decodes."""
    message = _message(task_id, look.delayed) if look.due_ms is not None else None
    if message is None and look.waiting is not None:
        message = _message(task_id, look.waiting)
    if message is None and look.entry_id is not None:
        entry = _message(look.entry_id, look.entry)
        message = entry if _belongs(task_id, look.entry_id, entry) else None
    return message


def _message(message_id: str, fields: Any, deliveries: int = 1) -> Any:
    if fields is None:
        return None
    entry = [b"payload", fields] if isinstance(fields, bytes) else fields
    try:
        return decode_message(message_id, entry, deliveries=deliveries)
    except MessageDecodeError:
        return None


def _merge(
    recorded: TaskStatus | None,
    task_id: str,
    state: TaskState,
    message: Any,
    *,
    due_at: float | None = None,
    instance: str | None = None,
) -> TaskStatus:
    """The live state, with what the record and the message know besides."""
    base = recorded or TaskStatus(id=task_id, state=state)
    return TaskStatus(
        id=task_id,
        state=state,
        task=message.task_name if message is not None else base.task,
        attempt=message.attempt if message is not None else base.attempt,
        instance=instance or (base.instance if state is TaskState.RUNNING else None),
        progress=base.progress if state is TaskState.RUNNING else None,
        progress_message=base.progress_message if state is TaskState.RUNNING else None,
        enqueued_at=message.enqueued_at if message is not None else base.enqueued_at,
        started_at=base.started_at if state is TaskState.RUNNING else None,
        due_at=due_at,
        error=base.error if state is TaskState.RETRYING else None,
    )
