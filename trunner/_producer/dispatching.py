"""The public face of dispatching, shared by ``Runner`` and ``Client``: each method's
signature and documentation, and a one-line delegation to the producer behind it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar, overload

from .._redis import Broker
from .._task import Expiry, Task
from .._waiting.waiters import Waiters
from .._workflow_handle import WorkflowHandle
from .._workflows import Step
from ..handles import TaskHandle
from ..status import CancelOutcome
from .build import TaskRef
from .dispatch import Producer
from .workflows import dispatch_workflow

__all__ = ["DispatchCalls"]

P = TypeVar("P")
R = TypeVar("R")


class DispatchCalls:
    """``dispatch``, ``dispatch_many``, ``handle`` and ``cancel``, delegated to
    ``_dispatcher``: the producer of the runner or client."""

    _dispatcher: Producer

    def _open_broker(self) -> Broker:
        return self._dispatcher._open_broker()

    def _open_waiters(self) -> Waiters:
        return self._dispatcher._open_waiters()

    @overload
    async def dispatch(
        self,
        task_name: Callable[[P], Awaitable[R]],
        payload: P,
        *,
        keep_result: float | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the attempt timeout, not the call's
        expires: Expiry | None = None,
        headers: Mapping[str, str] | None = None,
        priority: str | None = None,
    ) -> TaskHandle[R]: ...

    @overload
    async def dispatch(
        self,
        task_name: Callable[[P], R],
        payload: P,
        *,
        keep_result: float | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the attempt timeout, not the call's
        expires: Expiry | None = None,
        headers: Mapping[str, str] | None = None,
        priority: str | None = None,
    ) -> TaskHandle[R]: ...

    @overload
    async def dispatch(
        self,
        task_name: str | Task,
        payload: Any = None,
        *,
        keep_result: float | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the attempt timeout, not the call's
        expires: Expiry | None = None,
        headers: Mapping[str, str] | None = None,
        priority: str | None = None,
    ) -> TaskHandle[Any]: ...

    @overload
    async def dispatch(
        self,
        task_name: Step[object, R],
        *,
        keep_result: float | None = None,
        fail_fast: bool = True,
        workflow_id: str | None = None,
        name: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> WorkflowHandle[R]: ...

    async def dispatch(
        self,
        task_name: TaskRef | Step[object, Any],
        payload: Any = None,
        *,
        keep_result: float | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the attempt timeout, not the call's
        expires: Expiry | None = None,
        headers: Mapping[str, str] | None = None,
        priority: str | None = None,
        fail_fast: bool = True,
        workflow_id: str | None = None,
        name: str = "",
    ) -> TaskHandle[Any] | WorkflowHandle[Any]:
        """Add one task to the group's stream.

        The task and the payload are checked, and the payload encoded, before anything is
        written to Redis. A typed task's payload (an attrs class, a dataclass, a
        TypedDict, datetimes ... see [Typed tasks](task-handles.md#typed-tasks)) is turned
        into JSON values by its declared type; any other payload goes as it is, and the
        task receives it after a JSON round trip: tuples arrive as lists, and dict keys
        as strings (``{1: "x"}`` arrives as ``{"1": "x"}``).

        For a [unique task](unique-tasks.md), the ``unique_key`` of the payload is
        computed first (whatever it raises propagates). If its key is locked (a task of
        the same key is queued and not finished), nothing is written; otherwise the lock
        is taken and the task added in one script.

        The call is not retried: after a ``RedisUnavailable``, or a cancellation while
        the command was on its way, the task may or may not have been added.

        Args:
            task_name: The task: a function registered with ``@tasks.task``, ``async
                def`` or ``def`` (then the payload's type is checked by mypy, and the
                handle's result is typed), a [``Task``][trunner.Task], or a name. A
                runner, or a client with ``tasks=``, only accepts a task its registry
                knows.
            payload: The payload.
            keep_result: Keep the outcome this many seconds, for ``handle.result()``
                (default: the task's ``keep_result``; without either, none is kept).
            timeout: Each attempt may run this many seconds (default: the task's).
            expires: Drop the task if it has not started by then: seconds from now, a
                ``timedelta``, or an aware ``datetime``.
            headers: The message's headers, ``str`` to ``str`` (at most 64, 8 KiB
                encoded), which task code reads in ``current_message().headers`` and
                middleware sees; the dispatch hooks of the runner's or client's
                [middleware](middleware.md) may add to them.
            priority: The [priority lane](lanes.md) (a lane name) the task goes to
                (default: the task's ``priority``, else ``"default"``); the runners
                reading the queue serve it if their ``lanes`` name it. A lane nobody
                declared is refused (see
                [A lane must be declared](lanes.md#a-lane-must-be-declared)).

        A [workflow](workflows.md) (``chain``, ``group``, ``chord``, ``Graph`` of
        ``step``s) is
        dispatched with ``dispatch(workflow, keep_result=, fail_fast=True,
        workflow_id=None, name="", headers=None)`` and gives a
        [``WorkflowHandle``][trunner.WorkflowHandle]: every step is checked as a dispatch
        of its task would be before anything is written; ``headers`` go to every step (a
        step's own ``headers`` win).

        Returns:
            A [``TaskHandle``][trunner.TaskHandle]; as a ``str``, the task's id (the new
            stream entry's id; ``<id>@<lane>`` in a lane other than the default).

        Raises:
            TypeError: ``task_name`` is not a task, or the ``unique_key`` of a unique
                task returned something other than a ``str`` or ``int``.
            ValueError: ``task_name`` is empty, an option is out of range, or
                ``priority`` is not a lane name, or names a lane nobody declared: not
                ``"default"``, not in a runner's ``RunnerConfig.lanes``, no registered
                task's ``priority``, and (but for a runner that declares lanes) not in the
                queue's registry of lanes.
            TaskNotFound: The registry does not know the task.
            InvalidPayload: The payload has no JSON form (sets, bytes, NaN, infinities,
                arbitrary objects), or does not fit a typed task's declared type.
            PayloadTooLarge: The encoded message exceeds ``max_payload_bytes``.
            InvalidHeaders: ``headers`` (or what the dispatch hooks made of them) are not
                ``str`` to ``str``, or too many, or too large.
            MiddlewareError: A dispatch hook raised (``__cause__``).
            TaskAlreadyDispatched: A unique task whose key is locked.
            RunnerNotRunning: The runner or client is not open.
            RedisUnavailable: No connection, or no reply within ``command_timeout``.
            RedisCommandError: Redis answered with an error.
        """
        if isinstance(task_name, Step):
            if payload is not None or timeout is not None or expires is not None or priority:
                raise TypeError(
                    "a workflow takes no payload, timeout, expires or priority: its steps "
                    "do (step(task, payload, timeout=..., priority=...))"
                )
            return await dispatch_workflow(
                self._dispatcher,
                task_name,
                keep_result=keep_result,
                fail_fast=fail_fast,
                workflow_id=workflow_id,
                name=name,
                headers=headers,
            )
        return await self._dispatcher.dispatch(
            task_name,
            payload,
            keep_result=keep_result,
            timeout=timeout,
            expires=expires,
            headers=headers,
            priority=priority,
        )

    @overload
    async def dispatch_many(
        self,
        task_name: Callable[[P], Awaitable[R]],
        payloads: Iterable[P],
        *,
        keep_result: float | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the attempt timeout, not the call's
        expires: Expiry | None = None,
        headers: Mapping[str, str] | None = None,
        priority: str | None = None,
    ) -> list[TaskHandle[R]]: ...

    @overload
    async def dispatch_many(
        self,
        task_name: Callable[[P], R],
        payloads: Iterable[P],
        *,
        keep_result: float | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the attempt timeout, not the call's
        expires: Expiry | None = None,
        headers: Mapping[str, str] | None = None,
        priority: str | None = None,
    ) -> list[TaskHandle[R]]: ...

    @overload
    async def dispatch_many(
        self,
        task_name: str | Task,
        payloads: Iterable[Any],
        *,
        keep_result: float | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the attempt timeout, not the call's
        expires: Expiry | None = None,
        headers: Mapping[str, str] | None = None,
        priority: str | None = None,
    ) -> list[TaskHandle[Any]]: ...

    async def dispatch_many(
        self,
        task_name: TaskRef,
        payloads: Iterable[Any],
        *,
        keep_result: float | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the attempt timeout, not the call's
        expires: Expiry | None = None,
        headers: Mapping[str, str] | None = None,
        priority: str | None = None,
    ) -> list[TaskHandle[Any]]:
        """Add one task per payload, in order.

        Every payload is checked and encoded first; if one fails, nothing is written. The
        tasks are then sent in chunks of 1000, each written atomically by one script (one
        round trip per chunk). If Redis fails after the first chunk, the chunks already
        sent stay written. An empty iterable returns ``[]`` without contacting Redis.

        For a [unique task](unique-tasks.md), the chunks hold 500 tasks. Payloads whose
        key is locked, or repeats the key of an earlier payload of the same call (the
        first one wins), are refused; the others are enqueued. If any was refused, the
        call raises [``TaskAlreadyDispatched``][trunner.TaskAlreadyDispatched] after
        enqueuing the others: its ``refused`` holds the indices of the refused payloads,
        and its ``ids`` the id of each payload (``None`` where refused).

        Args:
            task_name: The task, as for [``dispatch``][trunner.Runner.dispatch].
            payloads: The payloads.
            keep_result: As for ``dispatch``, for every task of the call.
            timeout: As for ``dispatch``.
            expires: As for ``dispatch``.
            headers: As for ``dispatch``, for every task of the call (the dispatch hooks
                run once per task, each on a copy).
            priority: As for ``dispatch``, for every task of the call.

        Returns:
            The handles of the new tasks, in the order of ``payloads``.

        Raises:
            TaskAlreadyDispatched: Some payloads of a unique task were refused; the others
                were enqueued.

        It raises the other errors of [``dispatch``][trunner.Runner.dispatch] too.
        """
        return await self._dispatcher.dispatch_many(
            task_name,
            payloads,
            keep_result=keep_result,
            timeout=timeout,
            expires=expires,
            headers=headers,
            priority=priority,
        )

    @overload
    def handle(self, task_id: str) -> TaskHandle[Any]: ...

    @overload
    def handle(self, task_id: str, task: Callable[..., Awaitable[R]]) -> TaskHandle[R]: ...

    @overload
    def handle(self, task_id: str, task: str | Task) -> TaskHandle[Any]: ...

    @overload
    def handle(self, task_id: str, task: Callable[..., R]) -> TaskHandle[R]: ...

    def handle(self, task_id: str, task: TaskRef | None = None) -> TaskHandle[Any]:
        """A handle on the task ``task_id``, dispatched from anywhere.

        Args:
            task_id: A task's id, as ``dispatch`` (or ``str(handle)``) gave it.
            task: The task (its function, ``Task`` or name), to decode the result into
                its declared return type; without it, the result is what JSON gives.

        Returns:
            A [``TaskHandle``][trunner.TaskHandle].
        """
        return self._dispatcher.handle(task_id, task)

    def workflow(self, workflow_id: str) -> WorkflowHandle[Any]:
        """A handle on the [workflow](workflows.md) ``workflow_id``, from anywhere."""
        return WorkflowHandle(workflow_id, self._dispatcher)

    async def cancel(self, task_id: str) -> CancelOutcome:
        """Cancel the task ``task_id`` wherever it is: ``handle(task_id).cancel()``; what
        was done (see [``TaskHandle.cancel``][trunner.TaskHandle.cancel])."""
        return await self._dispatcher.handle(task_id).cancel()
