"""The public path of a task's definition: ``Task`` and the values its options take.

The definition lives in :mod:`trunner._task`, the registry in :mod:`trunner.registry` and
the cron schedule in :mod:`trunner.schedule`; all of them are ``trunner.X`` too, as the
docs spell them. ``trunner.task.TaskRegistry`` still resolves, with a warning, for one
release.
"""

from typing import TYPE_CHECKING

from . import registry as _registry
from ._deprecate import Deprecated, deprecate_attributes
from ._task import Action, Backoff, Task, TaskDefaults
from .schedule import CronSchedule

if TYPE_CHECKING:
    TaskRegistry = _registry.TaskRegistry  # deprecated here: use trunner.TaskRegistry

__all__ = ["Action", "Backoff", "CronSchedule", "Task", "TaskDefaults"]

deprecate_attributes(
    __name__, {"TaskRegistry": Deprecated(_registry.TaskRegistry, "trunner.TaskRegistry")}
)
