"""The exceptions of how a task ends, and of waiting for its outcome: retries used up, an
attempt failed, timed out or killed, given up, cancelled, expired, a result missing or late.

``trunner.errors`` is their public home: it re-exports them and draws the whole tree.
"""

from __future__ import annotations

import trio

from .._wording import death, given_up
from ..status import TaskState
from .calls import TrunnerError

__all__ = [
    "GiveUp",
    "InvalidResult",
    "MaxRetryExceeded",
    "RemoteFailure",
    "ResultExpired",
    "ResultNotFound",
    "ResultNotKept",
    "ResultTimeout",
    "SelfWait",
    "TaskCancelled",
    "TaskExpired",
    "TaskFailed",
    "TaskTimeout",
    "WorkerProcessDied",
]


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
