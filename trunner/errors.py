"""Every exception trunner raises, as one tree: each class under the class it derives
from, with the built-in classes it also derives from in parentheses. All derive from
``TrunnerError`` but ``RemoteFailure``, never raised: it stands for an exception a task
raised on another instance, as the ``error`` of a ``TaskFailed`` from ``TaskHandle.result()``.

* TrunnerError
  + TaskNotFound (LookupError)
  + TaskAlreadyDispatched
  + InvalidPayload (ValueError)
    - PayloadTooLarge
  + InvalidArgument (ValueError)
  + InvalidHeaders (ValueError)
  + MiddlewareError
  + CommandNotAllowed (ValueError)
  + InvalidMessage (ValueError)
  + MaxRetryExceeded
  + TaskFailed
  + GiveUp
    - InvalidResult
  + TaskTimeout (TimeoutError)
  + WorkerProcessDied
  + TaskCancelled
    - WorkflowCancelled
  + TaskExpired
  + ResultNotFound (LookupError)
    - ResultNotKept
    - ResultExpired
  + ResultTimeout (trio.TooSlowError, TimeoutError)
  + SelfWait (RuntimeError)
  + StepFailed
  + WorkflowFailed (ExceptionGroup)
  + BadData
  + ReservationLost
  + LeadershipLost
  + RunnerAlreadyStarted (RuntimeError)
  + RunnerNotRunning (RuntimeError)
  + Crashed
    - RunnerCrashed
    - ElectorCrashed
  + BackendError
    - RedisUnavailable (ConnectionError)
    - RedisCommandError
* RemoteFailure

The classes are defined in four parts of ``trunner._errors``, in the order of this tree
(``calls``: the root and what refuses a call; ``outcomes``: how a task ends, and waiting for
it; ``workflows``: how a workflow ends; ``runtime``: bad data, the runner's life, Redis),
and live here: their ``__module__`` is ``trunner.errors``, in tracebacks, reprs and
pickles, as it always was.
"""

from __future__ import annotations

from ._errors.calls import (
    CommandNotAllowed,
    InvalidArgument,
    InvalidHeaders,
    InvalidMessage,
    InvalidPayload,
    MiddlewareError,
    PayloadTooLarge,
    TaskAlreadyDispatched,
    TaskNotFound,
    TrunnerError,
)
from ._errors.outcomes import (
    GiveUp,
    InvalidResult,
    MaxRetryExceeded,
    RemoteFailure,
    ResultExpired,
    ResultNotFound,
    ResultNotKept,
    ResultTimeout,
    SelfWait,
    TaskCancelled,
    TaskExpired,
    TaskFailed,
    TaskTimeout,
    WorkerProcessDied,
)
from ._errors.runtime import (
    BackendError,
    BadData,
    Crashed,
    ElectorCrashed,
    LeadershipLost,
    RedisCommandError,
    RedisUnavailable,
    ReservationLost,
    RunnerAlreadyStarted,
    RunnerCrashed,
    RunnerNotRunning,
)
from ._errors.workflows import StepFailed, WorkflowCancelled, WorkflowFailed

__all__ = [
    "BackendError", "BadData", "CommandNotAllowed", "Crashed", "ElectorCrashed", "GiveUp",
    "InvalidArgument", "InvalidHeaders", "InvalidMessage", "InvalidPayload", "InvalidResult",
    "LeadershipLost", "MaxRetryExceeded", "MiddlewareError", "PayloadTooLarge",
    "RedisCommandError", "RedisUnavailable", "RemoteFailure", "ReservationLost",
    "ResultExpired", "ResultNotFound", "ResultNotKept", "ResultTimeout", "RunnerAlreadyStarted",
    "RunnerCrashed", "RunnerNotRunning", "SelfWait", "StepFailed", "TaskAlreadyDispatched",
    "TaskCancelled", "TaskExpired", "TaskFailed", "TaskNotFound", "TaskTimeout", "TrunnerError",
    "WorkerProcessDied", "WorkflowCancelled", "WorkflowFailed",
]  # fmt: skip

# Their home is here, not in the private module that defines them. Set directly, not by
# ``fixup_module_metadata``: the top level re-exports some of them and would claim them.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
