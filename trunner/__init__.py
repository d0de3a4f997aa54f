"""trunner: a Trio-native distributed task runner on Redis Streams."""

import warnings
from typing import TYPE_CHECKING, Any

from . import election
from ._context import current_message
from ._redis import forget_memory_server, redact_url
from ._task import Task, TaskDefaults
from ._wire.keys import Keys
from ._wire.quarantine import QuarantineRecord
from ._wire.stats import GroupStats, InstanceInfo, TaskTiming
from ._worker.serve import WorkerSettings
from .admin import Admin, CronEntry, DeadLetter, DelayedTask, GroupInfo, ReplayResult, open_admin
from .client import Client, open_client
from .config import FailedTaskHandler, LongQueueHook, RunnerConfig
from .discovery import FoundGroup, GroupsFound, discover_groups
from .errors import (
    BackendError,
    BadData,
    CommandNotAllowed,
    Crashed,
    ElectorCrashed,
    GiveUp,
    InvalidArgument,
    InvalidHeaders,
    InvalidMessage,
    InvalidPayload,
    InvalidResult,
    LeadershipLost,
    MaxRetryExceeded,
    MiddlewareError,
    PayloadTooLarge,
    RedisCommandError,
    RedisUnavailable,
    RemoteFailure,
    ReservationLost,
    ResultExpired,
    ResultNotFound,
    ResultNotKept,
    ResultTimeout,
    RunnerAlreadyStarted,
    RunnerCrashed,
    RunnerNotRunning,
    TaskAlreadyDispatched,
    TaskCancelled,
    TaskExpired,
    TaskFailed,
    TaskNotFound,
    TaskTimeout,
    TrunnerError,
)
from .handles import SelfWait, TaskHandle
from .message import TaskMessage
from .middleware import AttemptInfo, AttemptOutcome, DispatchInfo, Middleware
from .progress import report_progress
from .redis_handle import Pipeline, RedisHandle, open_redis
from .registry import TaskRegistry
from .runner import Runner, current_runner, open_runner
from .schedule import CronSchedule
from .statistics import RunnerState, RunnerStatistics
from .status import CancelOutcome, RemoteError, TaskState, TaskStatus

__version__ = "0.1.0"
"""The package version, a string."""

__all__ = [
    "Admin",
    "AttemptInfo",
    "AttemptOutcome",
    "BackendError",
    "BadData",
    "CancelOutcome",
    "Client",
    "CommandNotAllowed",
    "Crashed",
    "CronEntry",
    "CronSchedule",
    "DeadLetter",
    "DelayedTask",
    "DispatchInfo",
    "ElectorCrashed",
    "FailedTaskHandler",
    "FoundGroup",
    "GiveUp",
    "GroupInfo",
    "GroupStats",
    "GroupsFound",
    "InstanceInfo",
    "InvalidArgument",
    "InvalidHeaders",
    "InvalidMessage",
    "InvalidPayload",
    "InvalidResult",
    "Keys",
    "LeadershipLost",
    "LongQueueHook",
    "MaxRetryExceeded",
    "Middleware",
    "MiddlewareError",
    "PayloadTooLarge",
    "Pipeline",
    "QuarantineRecord",
    "RedisCommandError",
    "RedisHandle",
    "RedisUnavailable",
    "RemoteError",
    "RemoteFailure",
    "ReplayResult",
    "ReservationLost",
    "ResultExpired",
    "ResultNotFound",
    "ResultNotKept",
    "ResultTimeout",
    "Runner",
    "RunnerAlreadyStarted",
    "RunnerConfig",
    "RunnerCrashed",
    "RunnerNotRunning",
    "RunnerState",
    "RunnerStatistics",
    "SelfWait",
    "Task",
    "TaskAlreadyDispatched",
    "TaskCancelled",
    "TaskDefaults",
    "TaskExpired",
    "TaskFailed",
    "TaskHandle",
    "TaskMessage",
    "TaskNotFound",
    "TaskRegistry",
    "TaskState",
    "TaskStatus",
    "TaskTimeout",
    "TaskTiming",
    "TrunnerError",
    "WorkerSettings",
    "__version__",
    "current_message",
    "current_runner",
    "discover_groups",
    "election",
    "forget_memory_server",
    "open_admin",
    "open_client",
    "open_redis",
    "open_runner",
    "redact_url",
    "report_progress",
]

#: Deprecated names (removed in the next release), each with its replacement.
_DEPRECATED = {"Stats": ("GroupStats", GroupStats)}

if TYPE_CHECKING:
    from . import aio as aio  # the clients of asyncio and synchronous code
    from . import sync as sync

    Stats = GroupStats  # deprecated: use GroupStats
else:

    def __getattr__(name: str) -> Any:
        if name in ("aio", "sync"):
            # Loaded on first use: ``import trunner`` loads no asyncio nor redis-py.
            import importlib  # noqa: PLC0415

            return importlib.import_module(f"{__name__}.{name}")
        if name in _DEPRECATED:
            new_name, value = _DEPRECATED[name]
            warnings.warn(
                f"trunner.{name} is deprecated, use trunner.{new_name}",
                DeprecationWarning,
                stacklevel=2,
            )
            return value
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
