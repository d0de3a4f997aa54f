"""trunner: a Trio-native distributed task runner on Redis Streams.

The top level holds what daily code types: opening a runner or a client, defining tasks,
dispatching them and awaiting their handles, code inside a task, the exceptions that code
catches. The rest lives in namespaces: every exception in ``trunner.errors``, inspection
and administration in ``trunner.admin``, a middleware's values in ``trunner.middleware``,
Redis key names in ``trunner.keys``, test helpers in ``trunner.testing``.
"""

from typing import TYPE_CHECKING, Any

from . import admin, election, errors, keys, middleware, workflows
from ._context import current_message
from ._deprecate import Deprecated, deprecate_attributes, moved_to
from ._public import fixup_module_metadata
from ._redis import forget_memory_server as _forget_memory_server
from ._redis import redact_url
from ._task import Task, TaskDefaults
from ._worker.serve import WorkerSettings
from ._workflow_handle import WorkflowHandle
from .client import Client, open_client
from .config import FailedTaskHandler, LongQueueHook, RunnerConfig
from .errors import (
    BackendError,
    GiveUp,
    InvalidPayload,
    MaxRetryExceeded,
    PayloadTooLarge,
    RedisUnavailable,
    ResultNotFound,
    ResultTimeout,
    TaskAlreadyDispatched,
    TaskCancelled,
    TaskExpired,
    TaskFailed,
    TaskNotFound,
    TaskTimeout,
    TrunnerError,
    WorkflowCancelled,
    WorkflowFailed,
)
from .handles import TaskHandle
from .message import TaskMessage
from .middleware import Middleware
from .progress import report_progress
from .redis_handle import Pipeline, RedisHandle, open_redis
from .registry import TaskRegistry
from .runner import Runner, current_runner, open_runner
from .schedule import CronSchedule
from .statistics import RunnerState, RunnerStatistics
from .status import CancelOutcome, RemoteError, TaskState, TaskStatus
from .workflows import Graph, Node, chain, chord, graph, group, step

__version__ = "0.1.0"
"""The package version, a string."""

__all__ = [
    "BackendError",
    "CancelOutcome",
    "Client",
    "CronSchedule",
    "FailedTaskHandler",
    "GiveUp",
    "Graph",
    "InvalidPayload",
    "LongQueueHook",
    "MaxRetryExceeded",
    "Middleware",
    "Node",
    "PayloadTooLarge",
    "Pipeline",
    "RedisHandle",
    "RedisUnavailable",
    "RemoteError",
    "ResultNotFound",
    "ResultTimeout",
    "Runner",
    "RunnerConfig",
    "RunnerState",
    "RunnerStatistics",
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
    "TrunnerError",
    "WorkerSettings",
    "WorkflowCancelled",
    "WorkflowFailed",
    "WorkflowHandle",
    "__version__",
    "admin",
    "chain",
    "chord",
    "current_message",
    "current_runner",
    "election",
    "errors",
    "graph",
    "group",
    "keys",
    "middleware",
    "open_client",
    "open_redis",
    "open_runner",
    "redact_url",
    "report_progress",
    "step",
    "workflows",
]

#: Names that left the top level for a namespace. Each still resolves from ``trunner``
#: until the next release, with a DeprecationWarning that names its new home.
_TO_ERRORS = (
    "BadData",
    "CommandNotAllowed",
    "Crashed",
    "ElectorCrashed",
    "InvalidArgument",
    "InvalidHeaders",
    "InvalidMessage",
    "InvalidResult",
    "LeadershipLost",
    "MiddlewareError",
    "RedisCommandError",
    "RemoteFailure",
    "ReservationLost",
    "ResultExpired",
    "ResultNotKept",
    "RunnerAlreadyStarted",
    "RunnerCrashed",
    "RunnerNotRunning",
    "SelfWait",
)
_TO_ADMIN = (
    "CronEntry",
    "DeadLetter",
    "DelayedTask",
    "FoundGroup",
    "GroupInfo",
    "GroupStats",
    "GroupsFound",
    "InstanceInfo",
    "QuarantineRecord",
    "ReplayResult",
    "TaskTiming",
    "discover_groups",
)
_TO_MIDDLEWARE = ("AttemptInfo", "AttemptOutcome", "DispatchInfo")

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        """``trunner.aio`` and ``trunner.sync``, the clients of asyncio and synchronous code."""
        if name in ("aio", "sync"):
            # Loaded on first use: ``import trunner`` loads no asyncio nor redis-py.
            import importlib  # noqa: PLC0415

            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


deprecate_attributes(
    __name__,
    {
        **moved_to(errors, _TO_ERRORS),
        **moved_to(admin, _TO_ADMIN),
        **moved_to(middleware, _TO_MIDDLEWARE),
        **moved_to(keys, ["Keys"]),
        "forget_memory_server": Deprecated(
            _forget_memory_server, "trunner.testing.forget_memory_server"
        ),
        "Stats": Deprecated(admin.GroupStats, "trunner.admin.GroupStats"),
    },
)

fixup_module_metadata(__name__, globals())

if TYPE_CHECKING:
    from . import aio as aio  # the clients of asyncio and synchronous code
    from . import sync as sync

    # The moved names, for type checkers, until their removal.
    from ._redis import forget_memory_server as forget_memory_server
    from .admin import CronEntry as CronEntry
    from .admin import DeadLetter as DeadLetter
    from .admin import DelayedTask as DelayedTask
    from .admin import FoundGroup as FoundGroup
    from .admin import GroupInfo as GroupInfo
    from .admin import GroupsFound as GroupsFound
    from .admin import GroupStats as GroupStats
    from .admin import InstanceInfo as InstanceInfo
    from .admin import QuarantineRecord as QuarantineRecord
    from .admin import ReplayResult as ReplayResult
    from .admin import TaskTiming as TaskTiming
    from .admin import discover_groups as discover_groups
    from .errors import BadData as BadData
    from .errors import CommandNotAllowed as CommandNotAllowed
    from .errors import Crashed as Crashed
    from .errors import ElectorCrashed as ElectorCrashed
    from .errors import InvalidArgument as InvalidArgument
    from .errors import InvalidHeaders as InvalidHeaders
    from .errors import InvalidMessage as InvalidMessage
    from .errors import InvalidResult as InvalidResult
    from .errors import LeadershipLost as LeadershipLost
    from .errors import MiddlewareError as MiddlewareError
    from .errors import RedisCommandError as RedisCommandError
    from .errors import RemoteFailure as RemoteFailure
    from .errors import ReservationLost as ReservationLost
    from .errors import ResultExpired as ResultExpired
    from .errors import ResultNotKept as ResultNotKept
    from .errors import RunnerAlreadyStarted as RunnerAlreadyStarted
    from .errors import RunnerCrashed as RunnerCrashed
    from .errors import RunnerNotRunning as RunnerNotRunning
    from .errors import SelfWait as SelfWait
    from .keys import Keys as Keys
    from .middleware import AttemptInfo as AttemptInfo
    from .middleware import AttemptOutcome as AttemptOutcome
    from .middleware import DispatchInfo as DispatchInfo

    Stats = GroupStats  # renamed, then moved: trunner.admin.GroupStats
