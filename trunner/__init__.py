"""trunner: a Trio-native distributed task runner on Redis Streams."""

from . import election
from ._context import current_message, current_runner
from ._redis import forget_memory_server, redact_url
from .admin import DeadLetter, GroupInfo
from .client import Client, open_client
from .config import FailedTaskHandler, LongQueueHook, RunnerConfig
from .errors import (
    BackendError,
    Crashed,
    ElectorCrashed,
    InvalidMessage,
    InvalidPayload,
    LeadershipLost,
    MaxRetryExceeded,
    PayloadTooLarge,
    RedisCommandError,
    RedisUnavailable,
    ReservationLost,
    RunnerAlreadyStarted,
    RunnerCrashed,
    RunnerNotRunning,
    TaskAlreadyDispatched,
    TaskFailed,
    TaskNotFound,
    TrunnerError,
)
from .keys import Keys
from .message import TaskMessage
from .metrics import InstanceInfo, Stats, TaskTiming
from .redis_handle import Pipeline, RedisHandle, open_redis
from .runner import Runner, open_runner
from .stats import RunnerState, RunnerStatistics
from .task import CronSchedule, Task, TaskRegistry
from .worker import WorkerSettings

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "Client",
    "Crashed",
    "CronSchedule",
    "DeadLetter",
    "ElectorCrashed",
    "FailedTaskHandler",
    "GroupInfo",
    "InstanceInfo",
    "InvalidMessage",
    "InvalidPayload",
    "Keys",
    "LeadershipLost",
    "LongQueueHook",
    "MaxRetryExceeded",
    "PayloadTooLarge",
    "Pipeline",
    "RedisCommandError",
    "RedisHandle",
    "RedisUnavailable",
    "ReservationLost",
    "Runner",
    "RunnerAlreadyStarted",
    "RunnerConfig",
    "RunnerCrashed",
    "RunnerNotRunning",
    "RunnerState",
    "RunnerStatistics",
    "Stats",
    "Task",
    "TaskAlreadyDispatched",
    "TaskFailed",
    "TaskMessage",
    "TaskNotFound",
    "TaskRegistry",
    "TaskTiming",
    "TrunnerError",
    "WorkerSettings",
    "__version__",
    "current_message",
    "current_runner",
    "election",
    "forget_memory_server",
    "open_client",
    "open_redis",
    "open_runner",
    "redact_url",
]
