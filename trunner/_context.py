"""What the task being executed sees of its run: its message and its runner (for task code,
and for eager mode).

The runner is kept here untyped, as ``object``, and named by
:func:`trunner.runner.current_runner`: this module imports nothing above the message, so
the pool, eager mode and ``report_progress`` can use it.
"""

from __future__ import annotations

import contextvars
from typing import Protocol

from ._wire.message import TaskMessage
from .errors import RunnerNotRunning

__all__ = [
    "NoRunnerInEagerCall",
    "NoRunnerInWorkerProcess",
    "current_message",
    "in_eager_call",
    "running_runner",
]


class MessageSource(Protocol):
    """What the running task's message comes from: the pool's job, which builds it only
    when asked for (most tasks never ask), or :class:`Given`."""

    @property
    def message(self) -> TaskMessage: ...


class Given:
    """A message already built."""

    __slots__ = ("message",)

    def __init__(self, message: TaskMessage) -> None:
        self.message = message


_current_message: contextvars.ContextVar[MessageSource] = contextvars.ContextVar(
    "trunner_current_message"
)
#: The runner executing the current task: set by the runner for every task its nurseries
#: start, and by an eager call given ``runner=``. Only a :class:`trunner.Runner` is ever
#: set; :func:`trunner.runner.current_runner` reads it as one.
_current_runner: contextvars.ContextVar[object] = contextvars.ContextVar("trunner_current_runner")
#: Set while an eager call (``TaskRegistry.call``, ``trunner.testing.call_task``) runs.
_eager_call: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "trunner_eager_call", default=False
)
#: Set in a worker process while it runs a ``run_in="process"`` task's body.
_in_worker_process: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "trunner_in_worker_process", default=False
)


class NoRunnerInWorkerProcess(RunnerNotRunning):
    """``current_runner()`` (or ``report_progress``) was called by a task body running in
    a worker process (``run_in="process"``): the runner, its Redis handle and its event
    loop live in the worker, not in the process."""

    def __init__(self) -> None:
        super().__init__(
            "current_runner() in a task running in a worker process (run_in='process'): "
            "the runner, its Redis handle, report_progress and dispatch live in the worker, "
            "not in the process. current_message() works; return what the worker should "
            "do with the result, or run the task in a thread (run_in='thread')"
        )


class NoRunnerInEagerCall(RunnerNotRunning):
    """``current_runner()`` was called by a task run eagerly without a runner: a mistake
    in the test, not a failure of the attempt (eager mode raises it at once)."""

    def __init__(self) -> None:
        super().__init__(
            "current_runner() in a task run eagerly (tasks.call, call_task): there is no "
            "runner, so no runner.redis and no dispatch. Give it one: "
            "await trunner.testing.call_task(tasks, name, payload, runner=runner), with a "
            "started runner (on memory://, e.g. from the trunner_runner fixture); see "
            "'Tasks that use current_runner()' in the testing docs"
        )


def in_eager_call() -> bool:
    """Whether the current Trio task is running a task eagerly."""
    return _eager_call.get()


def running_runner() -> object:
    """The runner executing the current task (what :func:`trunner.runner.current_runner`
    returns, typed there).

    Raises:
        RunnerNotRunning: Outside of a task run by a runner; ``NoRunnerInEagerCall`` in a
            task run eagerly without ``runner=``; ``NoRunnerInWorkerProcess`` in a task
            body running in a worker process.
    """
    try:
        return _current_runner.get()
    except LookupError:
        if _in_worker_process.get():
            raise NoRunnerInWorkerProcess from None
        if in_eager_call():
            raise NoRunnerInEagerCall from None
        raise RunnerNotRunning("current_runner() is only available inside a task") from None


def current_message() -> TaskMessage:
    """The message of the task being processed in this Trio task.

    Inside a task run by a runner or by an eager call
    ([``TaskRegistry.call``][trunner.TaskRegistry.call],
    [``trunner.testing.call_task``][trunner.testing.call_task]): its id, attempt, task id
    and so on. It also works inside a failed-task handler run by a runner, where it is
    the message the handler is given.

    Returns:
        The [``TaskMessage``][trunner.TaskMessage] of the delivery being processed.

    Raises:
        RunnerNotRunning: Outside of a task.
    """
    try:
        source = _current_message.get()
    except LookupError:
        raise RunnerNotRunning("current_message() is only available inside a task") from None
    return source.message
