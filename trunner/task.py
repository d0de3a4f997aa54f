"""The public path of a task's definition: ``Task`` and the values its options take.

The definition lives in :mod:`trunner._task`, the registry in :mod:`trunner.registry` and
the cron schedule in :mod:`trunner.schedule`; all of them are ``trunner.X`` too, as the
docs spell them. ``trunner.task.TaskRegistry`` still resolves, with a warning, for one
release.
"""

import warnings
from typing import TYPE_CHECKING, Any

from . import registry as _registry
from ._task import Action, Backoff, Task, TaskDefaults
from .schedule import CronSchedule

if TYPE_CHECKING:
    TaskRegistry = _registry.TaskRegistry  # deprecated here: use trunner.TaskRegistry

__all__ = ["Action", "Backoff", "CronSchedule", "Task", "TaskDefaults"]

#: Names that moved out, each with its public path; they resolve with a warning.
_MOVED = {"TaskRegistry": ("trunner.TaskRegistry", _registry.TaskRegistry)}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        new_path, value = _MOVED[name]
        warnings.warn(
            f"trunner.task.{name} is deprecated, use {new_path}", DeprecationWarning, stacklevel=2
        )
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
