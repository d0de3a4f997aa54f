"""Middleware: code of yours around each attempt a runner runs, and at each dispatch.

A middleware is an instance of a subclass of :class:`Middleware` that overrides either
hook, or both:

* :meth:`Middleware.around_attempt` returns an async context manager that wraps one
  attempt of a task (from just before the task's action is called to just after it
  returned or raised, its timeout included). It sees the attempt's message
  (:class:`AttemptInfo`) and, as it exits, the attempt's outcome.
* :meth:`Middleware.on_dispatch` is called once per message a producer dispatches, before
  the message is encoded: it may add, change or remove headers (:class:`DispatchInfo`).
  A workflow's dispatch calls it once for the workflow, then once per step
  (:class:`WorkflowInfo`): what it leaves in the workflow's headers, every step carries.

Order: the list's order. The first middleware is the outermost: its ``around_attempt``
is entered first and exited last, and its ``on_dispatch`` runs first (like ASGI
middleware in Starlette).

The rules the runner holds middleware to (see ``docs/middleware.md``):

* a middleware *observes* an attempt; it does not decide its outcome by swallowing. If
  its ``__aexit__`` returns true for the attempt's exception, the exception stands (as if
  it had not been swallowed) and a :class:`~trunner.errors.MiddlewareError` is reported.
  To change the outcome, raise: the exception a middleware raises becomes the attempt's
  (``GiveUp`` gives the task up, any other is retried like a task error);
* a cancellation (``trio.Cancelled``, alone or in a group) always goes on: swallowing it,
  or raising something else in its place, is reported as a ``MiddlewareError`` and
  changes nothing — unless the cancellation is a middleware's own (its cancel scope around
  the ``yield``, nothing around the attempt being cancelled): the attempt then fails, with
  what that middleware raised, or a ``MiddlewareError`` if its scope swallowed it;
* an error a middleware raises around an attempt is contained like a task error: the
  attempt fails and follows its task's retry rules; the runner goes on;
* an error raised by ``on_dispatch`` fails that dispatch with ``MiddlewareError`` (its
  ``__cause__`` is the error), and nothing is written.

With no middleware configured, nothing here runs: the runner's path for a task is the
same as without this module.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import attrs
import trio

from ._context import MessageSource
from ._util import gives_up
from ._wire.message import TaskMessage
from .errors import TaskTimeout

__all__ = [
    "AttemptInfo",
    "AttemptOutcome",
    "DispatchInfo",
    "Middleware",
    "WorkflowInfo",
]


class AttemptOutcome(enum.Enum):
    """How an attempt ended, as [``AttemptInfo.outcome``][trunner.middleware.AttemptInfo.outcome]
    tells a middleware when it exits."""

    SUCCEEDED = "succeeded"
    """The action returned: [``result``][trunner.middleware.AttemptInfo.result] is its value."""
    FAILED = "failed"
    """The action (or a middleware inside this one) raised:
    [``error``][trunner.middleware.AttemptInfo.error] is the exception."""
    TIMED_OUT = "timed_out"
    """The attempt ran past its timeout and was cancelled: ``error`` is a
    [``TaskTimeout``][trunner.TaskTimeout]."""
    CANCELLED = "cancelled"
    """The attempt was cancelled: its task was cancelled
    ([``TaskHandle.cancel``][trunner.TaskHandle.cancel]), or the runner stopped past its
    drain timeout. ``error`` is the ``trio.Cancelled`` (or a group holding it), which goes
    on whatever the middleware does. (Inside a middleware whose own cancel scope cancelled
    the attempt, the middleware within that scope see ``CANCELLED`` too; the attempt then
    fails, and the ones outside it see ``FAILED``.)"""


class RetryRule(Protocol):
    """What an attempt needs of its task to tell whether a failure is retried."""

    @property
    def max_attempts(self) -> int: ...
    @property
    def give_up_on(self) -> tuple[type[BaseException], ...]: ...


class AttemptInfo:
    """One attempt of a task, as a middleware's
    [``around_attempt``][trunner.Middleware.around_attempt] sees it.

    The message's fields are read-only. ``outcome``, ``result`` and ``error`` are
    ``None`` while the attempt runs; trunner sets them before it exits each middleware,
    to what that middleware's ``__aexit__`` is given (an inner middleware that raised
    changes them for the outer ones).
    """

    __slots__ = ("_error", "_outcome", "_result", "_rule", "_source", "group")

    def __init__(self, source: MessageSource, group: str, rule: RetryRule | None = None) -> None:
        self._source = source
        self._rule = rule
        self._outcome: AttemptOutcome | None = None
        self._result: Any = None
        self._error: BaseException | None = None
        self.group = group
        """The consumer group the runner runs tasks of (``""`` in eager mode)."""

    def __repr__(self) -> str:
        message = self.message
        return (
            f"<AttemptInfo task={message.task_name!r} message_id={message.message_id!r} "
            f"attempt={message.attempt} outcome={self._outcome}>"
        )

    @property
    def message(self) -> TaskMessage:
        """The whole [``TaskMessage``][trunner.TaskMessage] of the delivery (what
        [``current_message()``][trunner.current_message] returns in the task)."""
        return self._source.message

    @property
    def task_name(self) -> str:
        """The task's name."""
        return self._source.message.task_name

    @property
    def message_id(self) -> str:
        """The stream entry id of this delivery (different for each retry)."""
        return self._source.message.message_id

    @property
    def task_id(self) -> str:
        """The task's id, the same across its retries and replays."""
        return self._source.message.task_id

    @property
    def attempt(self) -> int:
        """Which attempt this is, from 1."""
        return self._source.message.attempt

    @property
    def headers(self) -> Mapping[str, str]:
        """The message's headers (read-only)."""
        return self._source.message.headers

    @property
    def outcome(self) -> AttemptOutcome | None:
        """How the attempt ended; ``None`` while it runs."""
        return self._outcome

    @property
    def result(self) -> Any:
        """What the action returned, once the outcome is ``SUCCEEDED``; else ``None``."""
        return self._result

    @property
    def error(self) -> BaseException | None:
        """The exception the attempt ended with, once it ended with one; else ``None``."""
        return self._error

    @property
    def will_retry(self) -> bool:
        """Whether the task runs again after this attempt, as far as this middleware can
        tell when it exits: ``True`` when the attempt failed or timed out, was not its
        task's last attempt, and the error does not give the task up
        ([``GiveUp``][trunner.GiveUp], ``give_up_on``). ``False`` while the attempt runs,
        and after a success or a cancellation. (A task cancelled while its failure is
        being handled is not retried all the same.)"""
        error, rule = self._error, self._rule
        if error is None or rule is None or self._outcome is AttemptOutcome.CANCELLED:
            return False
        if gives_up(error, rule.give_up_on):
            return False
        return self.attempt < rule.max_attempts

    def _ended(self, result: Any, error: BaseException | None) -> None:
        self._result = result if error is None else None
        self._error = error
        self._outcome = _outcome_of(error)


@attrs.frozen
class WorkflowInfo:
    """The workflow a dispatch belongs to, as
    [``DispatchInfo.workflow``][trunner.middleware.DispatchInfo.workflow] tells it.

    A workflow's dispatch calls the ``on_dispatch`` hooks once for the workflow itself
    (``node`` is ``None``), then once for each of its steps: the headers the hooks leave
    in the workflow's call are every step's, under the step's own (a step's header of the
    same name wins), and each step's call may change its own. The workflow's call comes
    after every step's task, lane and payload were checked (a workflow refused for those
    runs no hook) and before anything is written. See
    [Workflows: middleware](workflows.md#middleware-and-opentelemetry).
    """

    id: str
    """The workflow's id (a step's task id is ``<id>.<node>``)."""
    name: str
    """The ``name`` the workflow was dispatched with (``""`` when none)."""
    steps: int
    """How many steps the workflow has."""
    node: int | None = None
    """The step's index in the workflow (from 0); ``None`` for the call of the workflow
    itself."""
    waits_for: tuple[int, ...] = ()
    """The steps this one waits for (their indices, ascending): its message is written
    when they ended. Empty for a step that starts with the workflow, and for the
    workflow itself."""


class DispatchInfo:
    """One message being dispatched, as a middleware's
    [``on_dispatch``][trunner.Middleware.on_dispatch] sees it.

    Only ``headers`` may be changed: it is the dict the message will carry (add, change
    or remove entries; the bounds are checked after the last hook, see
    [``InvalidHeaders``][trunner.errors.InvalidHeaders]).
    """

    __slots__ = (
        "delayed_until",
        "group",
        "headers",
        "payload",
        "task_id",
        "task_name",
        "workflow",
    )

    def __init__(
        self,
        task_name: str,
        payload: Any,
        headers: dict[str, str],
        group: str,
        task_id: str | None = None,
        delayed_until: float | None = None,
        workflow: WorkflowInfo | None = None,
    ) -> None:
        self.task_name = task_name
        """The task's name; ``workflow:<name>`` for the call of a workflow itself."""
        self.payload = payload
        """The payload as it is sent (JSON values: a typed task's is encoded already).
        Do not change it."""
        self.headers = headers
        """The headers the message will carry: change this dict in place."""
        self.group = group
        """The consumer group dispatched to (``""`` in eager mode)."""
        self.task_id = task_id
        """The task's id when it is known before the write (a delayed task's); ``None``
        for ``dispatch`` and ``dispatch_many`` (the stream entry's id, known after)."""
        self.delayed_until = delayed_until
        """For ``dispatch_delayed`` and ``schedule_for``: when the task is due (seconds
        since the epoch); else ``None``."""
        self.workflow = workflow
        """For a workflow's dispatch, which workflow, and which of its steps (``node``;
        ``None`` in the call for the workflow itself, whose ``payload`` is ``None`` and
        whose ``task_id`` is the workflow's id); ``None`` for any other dispatch."""

    def __repr__(self) -> str:
        return f"<DispatchInfo task={self.task_name!r} group={self.group!r}>"


class Middleware:
    """The base class of middleware: subclass it and override
    [``around_attempt``][trunner.Middleware.around_attempt],
    [``on_dispatch``][trunner.Middleware.on_dispatch], or both.

    Give instances to a runner in
    [``RunnerConfig.middleware``][trunner.RunnerConfig.middleware] (both hooks: its
    attempts, and its own dispatches), to [``open_client``][trunner.open_client]
    (``on_dispatch``), or to eager calls (``tasks.call``, ``call_task``). A hook left as
    it is costs nothing. See [Middleware and headers](middleware.md).
    """

    def around_attempt(self, attempt: AttemptInfo) -> AbstractAsyncContextManager[object]:
        """An async context manager wrapping one attempt.

        Write it as an ``@contextlib.asynccontextmanager`` method that yields once.
        Entered just before the task's action is called (after its payload was decoded),
        exited once the attempt ended: normally if it succeeded (then ``attempt.result``
        holds what the action returned), with the exception otherwise
        (``TaskTimeout`` past its timeout, ``trio.Cancelled`` when cancelled). Its
        ``__aexit__`` may not swallow the exception (see the module rules); an exception
        it raises becomes the attempt's.

        Args:
            attempt: The attempt: its message, and its outcome once it ended.

        Returns:
            The async context manager (the base class's is never called).
        """
        raise NotImplementedError  # pragma: no cover - only overrides are ever called

    def on_dispatch(self, dispatch: DispatchInfo) -> Awaitable[None] | None:
        """Called for each message dispatched, before it is encoded; may be ``async``.

        Called once per message (``dispatch_many`` calls it for each payload), after the
        task and the payload were checked, and before anything is written; a workflow's
        dispatch calls it once for the workflow, then once per step
        ([``dispatch.workflow``][trunner.middleware.DispatchInfo.workflow]). Change
        ``dispatch.headers`` in place to set the message's headers. If it raises,
        the dispatch fails with [``MiddlewareError``][trunner.errors.MiddlewareError] and
        nothing is written.

        Args:
            dispatch: The message being dispatched.

        Returns:
            ``None``, or an awaitable (an ``async def`` override).
        """
        raise NotImplementedError  # pragma: no cover - only overrides are ever called


def check_middleware(middleware: Iterable[Middleware]) -> tuple[Middleware, ...]:
    """``middleware`` (an iterable of :class:`Middleware`) as a tuple; ``TypeError``
    saying what is wrong otherwise."""
    value: object = middleware
    if isinstance(value, Middleware):
        raise TypeError("middleware must be a list of Middleware, got one Middleware: wrap it")
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise TypeError(f"middleware must be a list of Middleware, got {type(value).__name__}")
    items = tuple(middleware)
    for item in items:
        if not isinstance(item, Middleware):
            raise TypeError(
                f"middleware must be instances of trunner.Middleware (subclass it and "
                f"override around_attempt and/or on_dispatch), got {item!r:.100}"
            )
    return items


def _outcome_of(error: BaseException | None) -> AttemptOutcome:
    if error is None:
        return AttemptOutcome.SUCCEEDED
    if isinstance(error, TaskTimeout):
        return AttemptOutcome.TIMED_OUT
    cancelled = (
        error.subgroup(trio.Cancelled) is not None
        if isinstance(error, BaseExceptionGroup)
        else isinstance(error, trio.Cancelled)
    )
    return AttemptOutcome.CANCELLED if cancelled else AttemptOutcome.FAILED
