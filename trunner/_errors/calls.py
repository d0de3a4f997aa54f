"""The root of trunner's exceptions, and what refuses a call or a message: an unknown task, a
unique task queued already, a payload, headers, a command or a stored entry that cannot go.

``trunner.errors`` is their public home: it re-exports them and draws the whole tree.
"""

from __future__ import annotations

from collections.abc import Iterable

from .._wording import closest_names

__all__ = [
    "CommandNotAllowed",
    "InvalidArgument",
    "InvalidHeaders",
    "InvalidMessage",
    "InvalidPayload",
    "MiddlewareError",
    "PayloadTooLarge",
    "TaskAlreadyDispatched",
    "TaskNotFound",
    "TrunnerError",
]


class TrunnerError(Exception):
    """Base class of every exception trunner raises."""


class TaskNotFound(TrunnerError, LookupError):
    """No task of this name is registered (also a ``LookupError``).

    Raised by [``TaskRegistry.get``][trunner.TaskRegistry.get], by dispatching an unknown
    name through a runner or a client with a registry, and by building a runner whose
    registry has a cron schedule of an unregistered task
    ([``TaskRegistry.check``][trunner.TaskRegistry.check]). Given to the failed-task
    handler for a message with an unknown task.
    """

    def __init__(self, task_name: str, known: Iterable[str] = ()) -> None:
        self.suggestions, hint = closest_names(task_name, known)
        """The registered names closest to ``task_name`` (up to 3; may be empty)."""
        super().__init__(f"no task named {task_name!r} is registered{hint}")
        self.task_name = task_name
        """The unknown name."""


class TaskAlreadyDispatched(TrunnerError):
    """A [unique task](unique-tasks.md) was refused: a task of the same key is queued
    and not finished.

    Raised by [``dispatch``][trunner.Runner.dispatch] and
    [``dispatch_many``][trunner.Runner.dispatch_many]; from ``dispatch_many``, the
    payloads not refused were enqueued.
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
        """The task's name."""
        self.unique_keys = unique_keys
        """The refused keys."""
        self.refused = refused if refused is not None else [0]
        """The indices of the refused payloads; ``[0]`` from ``dispatch``."""
        self.ids = ids if ids is not None else [None]
        """Per payload: the new task id, or ``None`` where refused; ``[None]`` from
        ``dispatch``."""


class InvalidPayload(TrunnerError, ValueError):
    """A payload cannot be encoded: it is not JSON-serializable, or too large (also a
    ``ValueError``).

    Its message says where the value that cannot be sent is, and what to send instead
    (``payload["items"][3] is a Decimal: send str(value) ...``). Only JSON values are
    sent: ``datetime``, ``date``, ``UUID``, ``Decimal``, ``Enum`` members (of ``IntEnum``
    and ``StrEnum`` too), sets, bytes, NaN and other objects are refused, never converted.

    Raised by [``dispatch``][trunner.Runner.dispatch], ``dispatch_many``,
    ``dispatch_delayed`` and ``schedule_for``, and by building a cron schedule
    ([``TaskRegistry.cron``][trunner.TaskRegistry.cron],
    [``CronSchedule``][trunner.CronSchedule]) with such a payload.
    """


class PayloadTooLarge(InvalidPayload):
    """An encoded task message is larger than ``max_payload_bytes``.

    Also reported through [``Runner.errors``][trunner.Runner.errors] when the leader skips
    a cron tick for that reason.
    """


class InvalidArgument(TrunnerError, ValueError):
    """A value cannot be sent to Redis: a str holding a lone surrogate (UTF-8 cannot encode
    it). Nothing was sent."""


class InvalidHeaders(TrunnerError, ValueError):
    """A dispatch's message headers cannot be sent (also a ``ValueError``): not a mapping
    of ``str`` to ``str``, an empty name, more than 64 headers, more than 8 KiB once
    encoded, or a string UTF-8 cannot encode (a lone surrogate). Raised before anything
    is written, whether the headers came from the call or from a dispatch hook (see
    [Middleware and headers](middleware.md#headers))."""


class MiddlewareError(TrunnerError):
    """A middleware broke its contract; ``__cause__`` is what it raised, if anything.

    Raised by a dispatch when a dispatch hook raised (nothing is written). Reported
    through [``Runner.errors``][trunner.Runner.errors], never raised, when a middleware
    around an attempt swallowed the attempt's exception or its cancellation: the runner
    goes on with the exception, as if the middleware had not swallowed it (see
    [Middleware and headers](middleware.md#errors))."""


class CommandNotAllowed(TrunnerError, ValueError):
    """The task Redis handle refused a command that would change the state of a connection
    it shares with other tasks and with the runner (``SELECT``, ``CLIENT REPLY``,
    ``SUBSCRIBE``, ``MULTI`` ...). The message says what to use instead. Nothing was sent."""


class InvalidMessage(TrunnerError, ValueError):
    """A stream entry cannot be decoded into a task message (also a ``ValueError``).

    Given to the failed-task handler for an undecodable entry; the actual class is an
    internal subclass (``MessageDecodeError``).
    """
