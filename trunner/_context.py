"""Context of the task being executed, for task code."""

from __future__ import annotations

import contextvars

from .errors import RunnerNotRunning
from .message import TaskMessage

__all__ = ["current_message"]

_current_message: contextvars.ContextVar[TaskMessage] = contextvars.ContextVar(
    "trunner_current_message"
)


def current_message() -> TaskMessage:
    """The message of the task running in this Trio task (its id, attempt, ...).

    Raises :class:`RunnerNotRunning` outside of a task executed by a runner.
    """
    try:
        return _current_message.get()
    except LookupError:
        raise RunnerNotRunning("current_message() is only available inside a task") from None
