"""Every exception trunner raises, as one tree: each class under the class it derives
from, with the built-in classes it also derives from in parentheses. All derive from
``TrunnerError`` but ``RemoteFailure``, never raised: it stands for an exception a task
raised on another instance, as the ``error`` of a ``TaskFailed`` from ``TaskHandle.result()``.

* TrunnerError
  + TaskNotFound (LookupError)
  + TaskAlreadyDispatched
  + InvalidPayload (ValueError)
    - PayloadTooLarge
  + InvalidArgument (ValueError)
  + InvalidHeaders (ValueError)
  + MiddlewareError
  + CommandNotAllowed (ValueError)
  + InvalidMessage (ValueError)
  + MaxRetryExceeded
  + TaskFailed
  + GiveUp
    - InvalidResult
  + TaskTimeout (TimeoutError)
  + WorkerProcessDied
  + TaskCancelled
  + TaskExpired
  + ResultNotFound (LookupError)
    - ResultNotKept
    - ResultExpired
  + ResultTimeout (trio.TooSlowError, TimeoutError)
  + SelfWait (RuntimeError)
  + BadData
  + ReservationLost
  + LeadershipLost
  + RunnerAlreadyStarted (RuntimeError)
  + RunnerNotRunning (RuntimeError)
  + Crashed
    - RunnerCrashed
    - ElectorCrashed
  + BackendError
    - RedisUnavailable (ConnectionError)
    - RedisCommandError
* RemoteFailure
"""

from __future__ import annotations

from collections.abc import Iterable

import trio

from ._wording import closest_names, death, given_up
from .status import TaskState

__all__ = [
    "BackendError", "BadData", "CommandNotAllowed", "Crashed", "ElectorCrashed", "GiveUp",
    "InvalidArgument", "InvalidHeaders", "InvalidMessage", "InvalidPayload", "InvalidResult",
    "LeadershipLost", "MaxRetryExceeded", "MiddlewareError", "PayloadTooLarge",
    "RedisCommandError", "RedisUnavailable", "RemoteFailure", "ReservationLost",
    "ResultExpired", "ResultNotFound", "ResultNotKept", "ResultTimeout", "RunnerAlreadyStarted",
    "RunnerCrashed", "RunnerNotRunning", "SelfWait", "TaskAlreadyDispatched", "TaskCancelled",
    "TaskExpired", "TaskFailed", "TaskNotFound", "TaskTimeout", "TrunnerError",
    "WorkerProcessDied",
]  # fmt: skip


class TrunnerError(Exception):
    """Base class of every exception trunner raises."""


class TaskNotFound(TrunnerError, LookupError):
    """No task of this name is registered (also a ``LookupError``).

    Raised by [``TaskRegistry.get``][trunner.TaskRegistry.get], by dispatching an unknown
    name through a runner or a client with a registry, and by building a runner whose
    registry has a cron schedule of an unregistered task
    ([``TaskRegistry.check``][trunner.TaskRegistry.check]). Given to the failed-task
    handler for a message with an unknown task.
    """

    def __init__(self, task_name: str, known: Iterable[str] = ()) -> None:
        self.suggestions, hint = closest_names(task_name, known)
        """The registered names closest to ``task_name`` (up to 3; may be empty)."""
        super().__init__(f"no task named {task_name!r} is registered{hint}")
        self.task_name = task_name
        """The unknown name."""


class TaskAlreadyDispatched(TrunnerError):
    """A [unique task](unique-tasks.md) was refused: a task of the same key is queued
    and not finished.

    Raised by [``dispatch``][trunner.Runner.dispatch] and
    [``dispatch_many``][trunner.Runner.dispatch_many]; from ``dispatch_many``, the
    payloads not refused were enqueued.
    """

    def __init__(
        self,
        task_name: str,
        unique_keys: list[str],
        refused: list[int] | None = None,
        ids: list[str | None] | None = None,
    ) -> None:
        keys = ", ".join(repr(k) for k in unique_keys[:5])
        more = f" and {len(unique_keys) - 5} more" if len(unique_keys) > 5 else ""
        super().__init__(f"unique task {task_name!r} is already queued for key(s) {keys}{more}")
        self.task_name = task_name
        """The task's name."""
        self.unique_keys = unique_keys
        """The refused keys."""
        self.refused = refused if refused is not None else [0]
        """The indices of the refused payloads; ``[0]`` from ``dispatch``."""
        self.ids = ids if ids is not None else [None]
        """Per payload: the new task id, or ``None`` where refused; ``[None]`` from
        ``dispatch``."""


class InvalidPayload(TrunnerError, ValueError):
    """A payload cannot be encoded: it is not JSON-serializable, or too large (also a
    ``ValueError``).

    Its message says where the value that cannot be sent is, and what to send instead
    (``payload["items"][3] is a Decimal: send str(value) ...``). Only JSON values are
    sent: ``datetime``, ``date``, ``UUID``, ``Decimal``, ``Enum`` members (of ``IntEnum``
    and ``StrEnum`` too), sets, bytes, NaN and other objects are refused, never converted.

    Raised by [``dispatch``][trunner.Runner.dispatch], ``dispatch_many``,
    ``dispatch_delayed`` and ``schedule_for``, and by building a cron schedule
    ([``TaskRegistry.cron``][trunner.TaskRegistry.cron],
    [``CronSchedule``][trunner.CronSchedule]) with such a payload.
    """


class PayloadTooLarge(InvalidPayload):
    """An encoded task message is larger than ``max_payload_bytes``.

    Also reported through [``Runner.errors``][trunner.Runner.errors] when the leader skips
    a cron tick for that reason.
    """


class InvalidArgument(TrunnerError, ValueError):
    """A value cannot be sent to Redis: a str holding a lone surrogate (UTF-8 cannot encode
    it). Nothing was sent."""


class InvalidHeaders(TrunnerError, ValueError):
    """A dispatch's message headers cannot be sent (also a ``ValueError``): not a mapping
    of ``str`` to ``str``, an empty name, more than 64 headers, more than 8 KiB once
    encoded, or a string UTF-8 cannot encode (a lone surrogate). Raised before anything
    is written, whether the headers came from the call or from a dispatch hook (see
    [Middleware and headers](middleware.md#headers))."""


class MiddlewareError(TrunnerError):
    """A middleware broke its contract; ``__cause__`` is what it raised, if anything.

    Raised by a dispatch when a dispatch hook raised (nothing is written). Reported
    through [``Runner.errors``][trunner.Runner.errors], never raised, when a middleware
    around an attempt swallowed the attempt's exception or its cancellation: the runner
    goes on with the exception, as if the middleware had not swallowed it (see
    [Middleware and headers](middleware.md#errors))."""


class CommandNotAllowed(TrunnerError, ValueError):
    """The task Redis handle refused a command that would change the state of a connection
    it shares with other tasks and with the runner (``SELECT``, ``CLIENT REPLY``,
    ``SUBSCRIBE``, ``MULTI`` ...). The message says what to use instead. Nothing was sent."""


class InvalidMessage(TrunnerError, ValueError):
    """A stream entry cannot be decoded into a task message (also a ``ValueError``).

    Given to the failed-task handler for an undecodable entry; the actual class is an
    internal subclass (``MessageDecodeError``).
    """


class MaxRetryExceeded(TrunnerError):
    """A task used up its ``max_retry + 1`` attempts, or its ``max_redeliveries``.

    Given to the failed-task handler. ``__cause__`` is the last attempt's exception, unless
    the last attempt ended without a result. Also raised by an eager call
    ([``TaskRegistry.call``][trunner.TaskRegistry.call]) whose last attempt failed.
    """

    def __init__(
        self, task_name: str, attempts: int, *, redelivered: bool = False, deliveries: int = 0
    ) -> None:
        redelivered = redelivered or bool(deliveries)
        super().__init__(given_up(task_name, attempts, redelivered, deliveries))
        self.task_name = task_name
        """The task's name."""
        self.attempts = attempts
        """How many attempts it had."""
        self.redelivered = redelivered
        """``True`` when it was given up on a delivery that did not run it: the message
        came back after it had been given up (its failed-task handler raised, or was cut
        off by a shutdown), or it came back more often than ``max_redeliveries`` allows
        (see ``deliveries``)."""
        self.deliveries = deliveries
        """When it was given up because its runs kept being lost (its worker crashed, was
        killed, or stalled past ``reclaim_delay``, more than the task's
        ``max_redeliveries`` allow): how many times its message was delivered. ``0``
        otherwise."""


class TaskFailed(TrunnerError):
    """One attempt of a task raised.

    Reported through [``Runner.errors``][trunner.Runner.errors] for every failed
    attempt. ``__cause__`` is the task's exception.
    """

    def __init__(self, task_name: str, message_id: str, attempt: int, error: BaseException):
        super().__init__(
            f"task {task_name!r} (message {message_id}, attempt {attempt}) raised "
            f"{type(error).__name__}: {error}"
        )
        self.task_name = task_name
        """The task's name."""
        self.message_id = message_id
        """The stream entry id of the delivery."""
        self.attempt = attempt
        """The attempt that failed, from 1."""
        self.error = error
        """The task's exception."""
        self.__cause__ = error


class RemoteFailure(Exception):
    """An exception a task raised on some instance, as awaiting its result sees it: the
    [``TaskFailed``][trunner.TaskFailed] that ``TaskHandle.result()`` raises carries one as
    its ``error`` (the original exception lives in another process)."""

    def __init__(self, type_name: str, message: str, traceback: str = "") -> None:
        super().__init__(f"{type_name}: {message}" if message else type_name)
        self.type_name = type_name
        """The exception's class name, e.g. ``"ValueError"``."""
        self.message = message
        """Its message."""
        self.traceback = traceback
        """Its traceback as the instance formatted it (the end of it, at most 8000
        characters)."""


class GiveUp(TrunnerError):
    """Raise it in a task to give the task up at once: it is not retried; the failed-task
    handler runs, and the message is dead-lettered with this reason.

    For errors that a retry cannot fix: a payload that makes no sense, a resource that is
    gone. [``Task.give_up_on``][trunner.Task.give_up_on] does the same for exception types
    of your choice.
    """


class InvalidResult(GiveUp):
    """A task that keeps its result returned a value that has no JSON form (an object of
    a type the codec does not know): given up at once, as its result cannot be kept."""


class TaskTimeout(TrunnerError, TimeoutError):
    """An attempt ran longer than its timeout and was cancelled (also a ``TimeoutError``).

    A failed attempt: retried as any failure, per ``max_retry``.
    """

    def __init__(self, task_name: str, timeout: float) -> None:
        super().__init__(f"task {task_name!r} ran longer than its timeout, {timeout:g} s")
        self.task_name = task_name
        """The task's name."""
        self.timeout = timeout
        """The timeout, in seconds."""


class WorkerProcessDied(TrunnerError):
    """The worker process running a ``run_in="process"`` task's body died before it
    returned: it crashed (a segfault, ``os.abort()``), exited (``os._exit``), or was killed
    (SIGKILL, the out-of-memory killer). A failed attempt: retried as any failure.
    """

    def __init__(self, task_name: str, exitcode: int | None) -> None:
        super().__init__(f"task {task_name!r}: its worker process died {death(exitcode)}")
        self.task_name = task_name
        """The task's name."""
        self.exitcode = exitcode
        """The process's exit code; ``-N`` when signal ``N`` ended it."""


class TaskCancelled(TrunnerError):
    """The task was cancelled (``TaskHandle.cancel``): what awaiting its result raises."""


class TaskExpired(TrunnerError):
    """The task was not started before its ``expires`` time and was dropped: what awaiting
    its result raises."""


class ResultNotFound(TrunnerError, LookupError):
    """No outcome is stored for the task, and it is nowhere in its group (also a
    ``LookupError``).

    Its subclasses say why, when the handle can tell:
    [``ResultNotKept``][trunner.errors.ResultNotKept] (the task ended, and keeps no result) and
    [``ResultExpired``][trunner.errors.ResultExpired] (its result was kept, and is gone). Raised as
    itself when it cannot: an id never dispatched to the group or long gone, or a task
    dispatched by name through a client that does not know it (see
    [No outcome stored](task-handles.md#no-outcome-stored)).
    """

    def __init__(self, message: str, task_id: str = "", task_name: str | None = None) -> None:
        super().__init__(message)
        self.task_id = task_id
        """The task's id."""
        self.task_name = task_name
        """The task's name, when known."""


class ResultNotKept(ResultNotFound):
    """The task ended (it succeeded, failed, or was given up on) and keeps no result:
    neither its dispatch nor its task sets ``keep_result``, so nothing of its outcome was
    stored. Set ``keep_result=seconds`` on the task (``@tasks.task(keep_result=60)``) or on
    the dispatch to await its result."""


class ResultExpired(ResultNotFound):
    """The task kept its outcome for ``keep_result`` seconds, and it is gone: it expired
    (or something deleted it)."""

    def __init__(
        self,
        message: str,
        task_id: str = "",
        task_name: str | None = None,
        keep_result: float | None = None,
    ) -> None:
        super().__init__(message, task_id, task_name)
        self.keep_result = keep_result
        """How long the outcome was to be kept, in seconds."""


class ResultTimeout(TrunnerError, trio.TooSlowError, TimeoutError):
    """``TaskHandle.result(timeout=...)`` waited ``timeout`` seconds and the task had no
    outcome yet (also a ``trio.TooSlowError``, and a built-in ``TimeoutError``, as
    asyncio's timeouts are). The task goes on: only the wait ended."""

    def __init__(
        self,
        message: str,
        task_id: str = "",
        task_name: str | None = None,
        timeout: float = 0.0,
        state: TaskState | None = None,
    ) -> None:
        super().__init__(message)
        self.task_id = task_id
        """The task's id."""
        self.task_name = task_name
        """The task's name, when known."""
        self.timeout = timeout
        """The timeout, in seconds."""
        self.state = state
        """Where the task was at the last look (queued, running, retrying ...); None when
        no look ended before the timeout."""


class SelfWait(TrunnerError, RuntimeError):
    """A task awaited its own result: it would wait for ever (also a ``RuntimeError``)."""


class BadData(TrunnerError):
    """A value trunner read from Redis (or a registered setting) is not what it wrote.

    The item was set aside with the reason (see
    [Bad data in Redis](reliability.md#bad-data-in-redis)): ``source`` names
    where it was read (``"delayed:unique"``, ``"metrics"``, ``"cron"`` ...), ``item`` which
    one (a task id, a field, a schedule), ``reason`` what is wrong with it.
    """

    def __init__(self, source: str, item: str, reason: str) -> None:
        super().__init__(f"bad data in {source} ({item!r:.120}): {reason}")
        self.source = source
        self.item = item
        self.reason = reason


class ReservationLost(TrunnerError):
    """A running task's message was claimed by another consumer: it may run twice.

    Reported through [``Runner.errors``][trunner.Runner.errors].
    """


class LeadershipLost(TrunnerError):
    """A leader-only (fenced) write was refused: the lease is not held; nothing was
    written.

    Raised by [``Elector.eval_fenced``][trunner.election.Elector.eval_fenced]. Inside a
    runner, a leader chore whose fenced write is refused gets it, and the runner steps
    down.
    """


class RunnerAlreadyStarted(TrunnerError, RuntimeError):
    """[``Runner.run``][trunner.Runner.run] was called on a runner that was started before
    (also a ``RuntimeError``)."""


class RunnerNotRunning(TrunnerError, RuntimeError):
    """The runner or client is not open (also a ``RuntimeError``).

    Raised by dispatching or inspecting through a runner before it started or after it
    stopped, or through a client after its block; by a Redis handle that is closed; and
    by [``current_message``][trunner.current_message] or
    [``current_runner``][trunner.current_runner] outside of a task.
    """


class Crashed(TrunnerError):
    """A background component failed; ``__cause__`` is the exception group of its errors.

    The base class of [``RunnerCrashed``][trunner.errors.RunnerCrashed] and
    [``ElectorCrashed``][trunner.errors.ElectorCrashed]. Raised as itself on leaving
    [``open_client``][trunner.open_client] or [``open_redis``][trunner.open_redis] when
    their Redis handle failed.
    """


class RunnerCrashed(Crashed):
    """A component of the runner failed: raised on leaving
    [``open_runner``][trunner.open_runner]. ``__cause__`` is the exception group."""


class ElectorCrashed(Crashed):
    """The elector's background task failed: raised on leaving
    [``open_elector``][trunner.election.open_elector]. ``__cause__`` is the exception
    group."""


class BackendError(TrunnerError):
    """A Redis operation failed: the base class of the two below."""


class RedisUnavailable(BackendError, ConnectionError):
    """Redis cannot be reached, the connection broke during a command, or no reply came
    within ``command_timeout`` / ``connect_timeout`` (also a ``ConnectionError``)."""


class RedisCommandError(BackendError):
    """Redis answered a command with an error (ACL, OOM, wrong type ...)."""
