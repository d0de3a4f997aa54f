"""The runner executing the current task, for task code.

Apart from :mod:`trunner._context` (the message) because it names :class:`~trunner.Runner`,
which sets it: only the runner and the public face import this module.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

from .errors import RunnerNotRunning

if TYPE_CHECKING:
    from .runner import Runner

__all__ = ["current_runner"]

_current_runner: contextvars.ContextVar[Runner] = contextvars.ContextVar("trunner_current_runner")


def current_runner() -> Runner:
    """The runner executing the current task (to dispatch follow-up tasks, for example).

    Raises :class:`RunnerNotRunning` outside of a task executed by a runner.
    """
    try:
        return _current_runner.get()
    except LookupError:
        raise RunnerNotRunning("current_runner() is only available inside a task") from None
