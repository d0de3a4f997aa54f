"""Context of the task being executed, for task code."""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Protocol

from .errors import RunnerNotRunning
from .message import TaskMessage

if TYPE_CHECKING:
    from .runner import Runner

__all__ = ["current_message", "current_runner"]


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
        source = _current_message.get()
    except LookupError:
        raise RunnerNotRunning("current_message() is only available inside a task") from None
    return source.message
