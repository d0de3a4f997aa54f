"""The public face of scheduling, shared by ``Runner`` and ``Client``: each method's
signature and documentation, and a one-line delegation to the producer behind it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .._task import Expiry, Task
from ..handles import TaskHandle
from .build import TaskRef
from .dispatch import Producer

if TYPE_CHECKING:
    import datetime

__all__ = ["ScheduleCalls"]

P = TypeVar("P")
R = TypeVar("R")


class ScheduleCalls:
    """``dispatch_delayed``, ``schedule_for``, ``cancel_delayed`` and ``fire_cron``,
    delegated to ``_dispatcher``: the producer of the runner or client."""

    _dispatcher: Producer

    @overload
    async def dispatch_delayed(
        self,
        task_name: Callable[[P], Awaitable[R]],
        payload: P,
        delay: float | datetime.timedelta,
        *,
        keep_result: float | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the attempt timeout, not the call's
        expires: Expiry | None = None,
        headers: Mapping[str, str] | None = None,
        priority: str | None = None,
    ) -> TaskHandle[R]: ...

    @overload
    async def dispatch_delayed(
        self,
        task_name: Callable[[P], R],
        payload: P,
        delay: float | datetime.timedelta,
        *,
        keep_result: float | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the attempt timeout, not the call's
        expires: Expiry | None = None,
        headers: Mapping[str, str] | None = None,
        priority: str | None = None,
    ) -> TaskHandle[R]: ...

    @overload
    async def dispatch_delayed(
        self,
        task_name: str | Task,
        payload: Any,
        delay: float | datetime.timedelta,
        *,
        keep_result: float | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the attempt timeout, not the call's
        expires: Expiry | None = None,
        headers: Mapping[str, str] | None = None,
        priority: str | None = None,
    ) -> TaskHandle[Any]: ...

    async def dispatch_delayed(
        self,
        task_name: TaskRef,
        payload: Any,
        delay: float | datetime.timedelta,
        *,
        keep_result: float | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the attempt timeout, not the call's
        expires: Expiry | None = None,
        headers: Mapping[str, str] | None = None,
        priority: str | None = None,
    ) -> TaskHandle[Any]:
        """Schedule one task to be added to the stream ``delay`` from now.

        The task is stored in the group's delayed set, in one script; when it is due, the
        group's leader moves it into the stream (see
        [Delayed and periodic tasks](delayed-and-periodic.md)). The task and payload
        are checked like [``dispatch``][trunner.Runner.dispatch] checks them, before
        anything is written. The call is not retried: after a ``RedisUnavailable``, the
        task may or may not be scheduled.

        A [unique task](unique-tasks.md) is never refused here: its lock is taken when
        it is moved into the stream. If the key is locked then, the task is dropped
        (counted in [``RunnerStatistics.unique_dropped``][trunner.RunnerStatistics.unique_dropped]).

        Args:
            task_name: The task, as for [``dispatch``][trunner.Runner.dispatch].
            payload: The payload, as for ``dispatch``.
            delay: Seconds (``int`` or ``float``) or a ``datetime.timedelta``; ``0`` means
                as soon as possible.
            keep_result: As for ``dispatch``.
            timeout: As for ``dispatch``.
            expires: As for ``dispatch`` (counted from now, not from the due time).
            headers: As for ``dispatch``.
            priority: As for ``dispatch``: the lane it enters when it is due.

        Returns:
            A [``TaskHandle``][trunner.TaskHandle]; as a ``str``, the task's id (32 hex
            digits): its ``task_id`` when it runs (and across its retries), and the
            argument of [``cancel_delayed``][trunner.Runner.cancel_delayed].

        Raises:
            TypeError: ``delay`` is neither a number nor a ``timedelta`` (``bool``
                included).
            ValueError: ``delay`` is negative, NaN or infinite.

        It raises the other errors of [``dispatch``][trunner.Runner.dispatch] too, except
        ``TaskAlreadyDispatched``.
        """
        return await self._dispatcher.dispatch_delayed(
            task_name,
            payload,
            delay,
            keep_result=keep_result,
            timeout=timeout,
            expires=expires,
            headers=headers,
            priority=priority,
        )

    @overload
    async def schedule_for(
        self,
        task_name: Callable[[P], Awaitable[R]],
        payload: P,
        when: datetime.datetime,
        *,
        keep_result: float | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the attempt timeout, not the call's
        expires: Expiry | None = None,
        headers: Mapping[str, str] | None = None,
        priority: str | None = None,
    ) -> TaskHandle[R]: ...

    @overload
    async def schedule_for(
        self,
        task_name: Callable[[P], R],
        payload: P,
        when: datetime.datetime,
        *,
        keep_result: float | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the attempt timeout, not the call's
        expires: Expiry | None = None,
        headers: Mapping[str, str] | None = None,
        priority: str | None = None,
    ) -> TaskHandle[R]: ...

    @overload
    async def schedule_for(
        self,
        task_name: str | Task,
        payload: Any,
        when: datetime.datetime,
        *,
        keep_result: float | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the attempt timeout, not the call's
        expires: Expiry | None = None,
        headers: Mapping[str, str] | None = None,
        priority: str | None = None,
    ) -> TaskHandle[Any]: ...

    async def schedule_for(
        self,
        task_name: TaskRef,
        payload: Any,
        when: datetime.datetime,
        *,
        keep_result: float | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the attempt timeout, not the call's
        expires: Expiry | None = None,
        headers: Mapping[str, str] | None = None,
        priority: str | None = None,
    ) -> TaskHandle[Any]:
        """Schedule one task to be added to the stream at ``when``.

        Like [``dispatch_delayed``][trunner.Runner.dispatch_delayed], for a point in time.

        Args:
            task_name: The task, as for [``dispatch``][trunner.Runner.dispatch].
            payload: The payload, as for ``dispatch``.
            when: An aware ``datetime`` (with a time zone). A time in the past means as
                soon as possible.
            keep_result: As for ``dispatch``.
            timeout: As for ``dispatch``.
            expires: As for ``dispatch``.
            headers: As for ``dispatch``.
            priority: As for ``dispatch_delayed``.

        Returns:
            A handle, as ``dispatch_delayed`` returns it.

        Raises:
            TypeError: ``when`` is not a ``datetime``.
            ValueError: ``when`` is naive.

        It raises the other errors of ``dispatch_delayed`` too.
        """
        return await self._dispatcher.schedule_for(
            task_name,
            payload,
            when,
            keep_result=keep_result,
            timeout=timeout,
            expires=expires,
            headers=headers,
            priority=priority,
        )

    async def cancel_delayed(self, delayed_id: str) -> bool:
        """Remove a task that waits in the delayed set.

        A scheduled retry is stored under its task id, so ``cancel_delayed(task_id)``
        removes it too: the task then does not run again and is not dead-lettered.
        Cancelling the scheduled retry of a unique task releases its key's lock.

        Args:
            delayed_id: The id [``dispatch_delayed``][trunner.Runner.dispatch_delayed] or
                [``schedule_for``][trunner.Runner.schedule_for] returned, or the task id of
                a scheduled retry.

        Returns:
            ``True`` if the task was removed; ``False`` if no such task was waiting: it
            was already moved into the stream (it then runs as usual), was cancelled
            before, or never existed.

        Raises:
            TypeError: ``delayed_id`` is not a string.
        """
        return await self._dispatcher.cancel_delayed(delayed_id)

    async def fire_cron(self, name: str) -> TaskHandle[Any]:
        """Run a cron schedule's task now, once, outside its ticks.

        The schedule's task is dispatched with its payload and its headers, as
        ``dispatch`` would (the dispatch hooks see it; a unique task takes its lock, or
        raises ``TaskAlreadyDispatched``). The schedule's
        ticks are not changed: its next tick fires as planned.

        Args:
            name: The schedule's name; this producer's registry must hold it.

        Returns:
            The dispatched task's handle.

        Raises:
            LookupError: The registry (``open_client(tasks=...)``) has no such schedule.
            TaskAlreadyDispatched: Its task is unique and its key is locked.
        """
        return await self._dispatcher.fire_cron(name)
