"""The exceptions trunner raises. All of them derive from :class:`TrunnerError`."""

from __future__ import annotations

__all__ = [
    "BackendError",
    "BadData",
    "CommandNotAllowed",
    "Crashed",
    "ElectorCrashed",
    "InvalidArgument",
    "InvalidMessage",
    "InvalidPayload",
    "LeadershipLost",
    "MaxRetryExceeded",
    "PayloadTooLarge",
    "RedisCommandError",
    "RedisUnavailable",
    "ReservationLost",
    "RunnerAlreadyStarted",
    "RunnerCrashed",
    "RunnerNotRunning",
    "TaskAlreadyDispatched",
    "TaskFailed",
    "TaskNotFound",
    "TrunnerError",
]


class TrunnerError(Exception):
    """Base class of every exception trunner raises."""


class TaskNotFound(TrunnerError, LookupError):
    """No task of this name is registered."""

    def __init__(self, task_name: str) -> None:
        super().__init__(f"no task named {task_name!r} is registered")
        self.task_name = task_name


class TaskAlreadyDispatched(TrunnerError):
    """A unique task was refused: one of the same key is queued and not finished.

    From ``dispatch_many``: ``refused`` holds the indices of the refused payloads and
    ``ids`` the id of each accepted one (None where refused); the others were enqueued.
    """

    def __init__(
        self,
        task_name: str,
        unique_keys: list[str],
        refused: list[int] | None = None,
        ids: list[str | None] | None = None,
    ) -> None:
        keys = ", ".join(repr(k) for k in unique_keys[:5])
        more = f" and {len(unique_keys) - 5} more" if len(unique_keys) > 5 else ""
        super().__init__(f"unique task {task_name!r} is already queued for key(s) {keys}{more}")
        self.task_name = task_name
        self.unique_keys = unique_keys
        self.refused = refused if refused is not None else [0]
        self.ids = ids if ids is not None else [None]


class InvalidPayload(TrunnerError, ValueError):
    """A payload cannot be encoded (not JSON-serializable, or too large)."""


class PayloadTooLarge(InvalidPayload):
    """An encoded task message is larger than ``RunnerConfig.max_payload_bytes``."""


class InvalidArgument(TrunnerError, ValueError):
    """A value cannot be sent to Redis: a str holding a lone surrogate (UTF-8 cannot encode
    it). Nothing was sent."""


class CommandNotAllowed(TrunnerError, ValueError):
    """The task Redis handle refused a command that would change the state of a connection
    it shares with other tasks and with the runner (``SELECT``, ``CLIENT REPLY``,
    ``SUBSCRIBE``, ``MULTI`` ...). The message says what to use instead. Nothing was sent."""


class InvalidMessage(TrunnerError, ValueError):
    """A stream entry cannot be decoded into a task message."""


class MaxRetryExceeded(TrunnerError):
    """A task used up its ``max_retry + 1`` attempts.

    ``redelivered``: the message came back after its last allowed attempt without a
    recorded outcome (the worker running it stopped, or its outcome could not be written),
    so it was given up on without running again.
    """

    def __init__(self, task_name: str, attempts: int, *, redelivered: bool = False) -> None:
        if redelivered:
            text = (
                f"task {task_name!r} was delivered again after its last allowed attempt "
                f"({attempts}) without a recorded outcome (its worker stopped, or the "
                "outcome could not be written)"
            )
        else:
            text = f"task {task_name!r} failed after {attempts} attempt(s)"
        super().__init__(text)
        self.task_name = task_name
        self.attempts = attempts
        self.redelivered = redelivered


class TaskFailed(TrunnerError):
    """One attempt of a task raised; the original exception is ``__cause__``."""

    def __init__(self, task_name: str, message_id: str, attempt: int, error: BaseException):
        super().__init__(
            f"task {task_name!r} (message {message_id}, attempt {attempt}) raised "
            f"{type(error).__name__}: {error}"
        )
        self.task_name = task_name
        self.message_id = message_id
        self.attempt = attempt
        self.error = error
        self.__cause__ = error


class BadData(TrunnerError):
    """A value trunner read from Redis (or a registered setting) is not what it wrote.

    The item was set aside with the reason (see ``trunner.quarantine``): ``source`` names
    where it was read (``"delayed:unique"``, ``"metrics"``, ``"cron"`` ...), ``item`` which
    one (a task id, a field, a schedule), ``reason`` what is wrong with it.
    """

    def __init__(self, source: str, item: str, reason: str) -> None:
        super().__init__(f"bad data in {source} ({item!r:.120}): {reason}")
        self.source = source
        self.item = item
        self.reason = reason


class ReservationLost(TrunnerError):
    """A running task's message was claimed by another consumer (it may run twice)."""


class LeadershipLost(TrunnerError):
    """A leader-only (fenced) write was refused: this instance no longer holds the lease."""


class RunnerAlreadyStarted(TrunnerError, RuntimeError):
    """``Runner.run`` was called on a runner that has already been started."""


class RunnerNotRunning(TrunnerError, RuntimeError):
    """The runner or client is not open (not started yet, or already stopped)."""


class Crashed(TrunnerError):
    """A background component failed; ``__cause__`` is the exception group of its errors."""


class RunnerCrashed(Crashed):
    """An internal component of the runner failed; the cause is the exception group."""


class ElectorCrashed(Crashed):
    """The elector's background task failed; the cause is the exception group."""


class BackendError(TrunnerError):
    """A Redis operation failed."""


class RedisUnavailable(BackendError, ConnectionError):
    """Redis cannot be reached, or the connection broke during a command."""


class RedisCommandError(BackendError):
    """Redis answered a command with an error."""
