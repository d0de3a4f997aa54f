"""Context of the task being executed, for task code."""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

from .errors import RunnerNotRunning
from .message import TaskMessage

if TYPE_CHECKING:
    from .runner import Runner

__all__ = ["current_message", "current_runner"]

_current_message: contextvars.ContextVar[TaskMessage] = contextvars.ContextVar(
    "trunner_current_message"
)
_current_runner: contextvars.ContextVar[Runner] = contextvars.ContextVar("trunner_current_runner")


def current_runner() -> Runner:
    """The runner executing the current task (to dispatch follow-up tasks, for example).

    Raises :class:`RunnerNotRunning` outside of a task executed by a runner.
    """
    try:
        return _current_runner.get()
    except LookupError:
        raise RunnerNotRunning("current_runner() is only available inside a task") from None


def current_message() -> TaskMessage:
    """The message of the task running in this Trio task (its id, attempt, ...).

    Raises :class:`RunnerNotRunning` outside of a task executed by a runner.
    """
    try:
        return _current_message.get()
    except LookupError:
        raise RunnerNotRunning("current_message() is only available inside a task") from None
