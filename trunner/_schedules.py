"""The registry's cron schedules: the ``cron`` decorator, ``add_cron``, ``crons``, and the
check that every schedule names a registered task."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar, overload

from ._task import DEFAULT, Action, Backoff, Default, Task
from ._wire.names import DEFAULT_LANE
from .errors import TaskNotFound
from .schedule import CronSchedule

__all__ = ["CronSchedules"]

A = TypeVar("A", bound=Action)


class CronSchedules:
    """The cron half of [``TaskRegistry``][trunner.TaskRegistry]: its schedules, by name."""

    _tasks: dict[str, Task]
    _crons: dict[str, CronSchedule]
    #: ``TaskRegistry.task``, which the decorator form of ``cron`` registers its function
    #: with.
    task: Callable[..., Any]

    @overload
    def cron(self, expression: str, /) -> Callable[[A], A]: ...

    @overload
    def cron(
        self,
        expression: str,
        task_name: str,
        payload: Any = None,
        *,
        name: str | None = None,
        timezone: str = "UTC",
        headers: Mapping[str, str] | None = None,
    ) -> CronSchedule: ...

    @overload
    def cron(
        self,
        expression: str,
        *,
        payload: Any = None,
        name: str | None = None,
        timezone: str = "UTC",
        headers: Mapping[str, str] | None = None,
        max_retry: int | Default = DEFAULT,
        max_redeliveries: int | Default = DEFAULT,
        retry_backoff: Backoff | Default = DEFAULT,
        retry_backoff_max: float | Default = DEFAULT,
        reservation_timeout: float | Default | None = DEFAULT,
        priority: str = DEFAULT_LANE,
    ) -> Callable[[A], A]: ...

    def cron(
        self,
        expression: str,
        task_name: str | None = None,
        payload: Any = None,
        *,
        name: str | None = None,
        timezone: str = "UTC",
        headers: Mapping[str, str] | None = None,
        max_retry: int | Default = DEFAULT,
        max_redeliveries: int | Default = DEFAULT,
        retry_backoff: Backoff | Default = DEFAULT,
        retry_backoff_max: float | Default = DEFAULT,
        reservation_timeout: float | Default | None = DEFAULT,
        priority: str = DEFAULT_LANE,
    ) -> CronSchedule | Callable[[A], A]:
        """Run a task at every tick of a cron ``expression``, once per tick group-wide.

        ``tasks.cron("*/5 * * * *", "send_report", {"to": "ops"})`` schedules the task
        ``send_report``; it does not have to be registered yet, and
        [``check``][trunner.TaskRegistry.check] verifies that it is. As a decorator,
        ``@tasks.cron("0 * * * *")`` registers the function as a task (named after its
        ``__name__``, with the given retry options, as [``task``][trunner.TaskRegistry.task]
        does) and schedules it with ``payload``; the expression, time zone and payload are
        checked before the function is registered. See
        [Periodic tasks](delayed-and-periodic.md#periodic-tasks-cron).

        Args:
            expression: The cron expression (see
                [``CronSchedule.expression``][trunner.CronSchedule.expression]).
            task_name: The task to run. Without it, ``cron`` is a decorator.
            payload: The payload of every tick, JSON-serializable.
            name: Identifies the schedule in Redis; default: the task's name. It must be
                unique among the schedules; keep it stable.
            timezone: The IANA time zone the ticks are computed in.
            headers: The headers of every tick's message (see
                [``CronSchedule.headers``][trunner.CronSchedule.headers]).
            max_retry: Decorator form only: see [``Task.max_retry``][trunner.Task.max_retry].
                This and the next options not given are the registry's
                [defaults][trunner.TaskRegistry.defaults], as for ``task``.
            max_redeliveries: Decorator form only: see
                [``Task.max_redeliveries``][trunner.Task.max_redeliveries].
            retry_backoff: Decorator form only.
            retry_backoff_max: Decorator form only.
            reservation_timeout: Decorator form only.
            priority: Decorator form only: the task's lane (see
                [``Task.priority``][trunner.Task.priority]); every tick enters it.

        Returns:
            The new [``CronSchedule``][trunner.CronSchedule]; in the decorator form, the
            decorator, which returns the function unchanged.

        Raises:
            ValueError: An invalid expression, an unknown time zone, or a duplicate
                schedule name.
            TypeError: A time zone that is not a string.
            InvalidPayload: A payload that is not JSON-serializable.
        """
        if task_name is not None:
            return self.add_cron(
                CronSchedule(name or task_name, expression, task_name, payload, timezone, headers)
            )
        # Fail before decorating.
        CronSchedule("check", expression, "check", None, timezone, headers)

        def decorate(func: A) -> A:
            task = getattr(func, "__name__", "")
            schedule = CronSchedule(name or task, expression, task, payload, timezone, headers)
            if schedule.name in self._crons:
                raise ValueError(f"a cron schedule named {schedule.name!r} is already registered")
            self.task(
                max_retry=max_retry,
                max_redeliveries=max_redeliveries,
                retry_backoff=retry_backoff,
                retry_backoff_max=retry_backoff_max,
                reservation_timeout=reservation_timeout,
                priority=priority,
            )(func)
            self.add_cron(schedule)
            return func

        return decorate

    def add_cron(self, schedule: CronSchedule) -> CronSchedule:
        """Add a cron schedule.

        Args:
            schedule: The schedule.

        Returns:
            ``schedule``.

        Raises:
            ValueError: A schedule of the same name exists.
        """
        if schedule.name in self._crons:
            raise ValueError(f"a cron schedule named {schedule.name!r} is already registered")
        task = self._tasks.get(schedule.task_name)
        if task is not None and task.unique:
            task.key_for(schedule.payload)  # a key that cannot be sent fails here
        self._crons[schedule.name] = schedule
        return schedule

    @property
    def crons(self) -> list[CronSchedule]:
        """The cron schedules, in registration order (a copy)."""
        return list(self._crons.values())

    def check(self) -> None:
        """Check that every cron schedule names a registered task, and can be sent.

        [``Runner``][trunner.Runner] and [``open_runner``][trunner.open_runner] call it.

        Raises:
            TaskNotFound: A schedule names a task that is not registered.
            ValueError: A cron schedule of a unique task has a payload whose unique key
                cannot be sent to Redis.
        """
        for schedule in self._crons.values():
            if schedule.task_name not in self._tasks:
                raise TaskNotFound(schedule.task_name, self._tasks)
            task = self._tasks[schedule.task_name]
            if task.unique:
                task.key_for(schedule.payload)
