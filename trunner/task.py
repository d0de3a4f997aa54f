"""Tasks and the registry that names them."""

from __future__ import annotations

import inspect
import math
import random
import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar, overload

import attrs

from . import _validate as v
from ._eager import run_eagerly
from .errors import InvalidPayload, TaskNotFound
from .keys import utf8_error
from .message import NO_SIZE_LIMIT, encode_message

__all__ = ["Action", "Backoff", "CronSchedule", "Task", "TaskRegistry"]

Action = Callable[[Any], Awaitable[Any]]
#: Either the base (seconds) of exponential backoff with jitter, or ``attempt -> seconds``.
Backoff = float | Callable[[int], float]

A = TypeVar("A", bound=Action)


def _check_action(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if not v.is_async_callable(value):
        raise TypeError(f"{attr.name} must be an async function taking the payload, got {value!r}")
    try:
        inspect.signature(value).bind(None)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"{attr.name} {value!r} must accept the payload as its one positional argument"
        ) from None
    except ValueError:  # no signature to inspect (some builtins): accept it
        pass


def _check_task_name(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"task {attr.name} must be a str, got {type(value).__name__}")
    if not value or value != value.strip():
        raise ValueError(
            f"task {attr.name} must be non-empty without surrounding spaces: {value!r}"
        )
    if (why := utf8_error(value)) is not None:
        raise ValueError(f"task {attr.name} cannot be sent to Redis: {why}")


def checked_task_name(task_name: object) -> str:
    """A task name given to a call by name: a non-empty str that can be sent to Redis
    (else TypeError, ValueError)."""
    if not isinstance(task_name, str):
        raise TypeError(f"task_name must be a str, got {type(task_name).__name__}")
    if not task_name:
        raise ValueError("task_name must not be empty")
    if (why := utf8_error(task_name)) is not None:
        raise ValueError(f"task_name cannot be sent to Redis: {why}")
    return task_name


def _check_backoff(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if not callable(value):
        v.check_non_negative_number(attr.name, value)


def _finite_non_negative(value: object) -> bool:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value) and value >= 0
    except OverflowError:  # an int too large for a float
        return False


@attrs.frozen
class Task:
    """A named async action with its retry policy.

    ``max_retry`` is how many times a failed attempt is retried (attempts = max_retry + 1);
    a redelivery after a crash counts as an attempt. ``reservation_timeout`` bounds how long
    a running attempt's reservation lasts without a heartbeat: the runner heartbeats it at
    least every ``min(reservation_timeout, reclaim_delay) / 3``.
    """

    name: str = attrs.field(validator=_check_task_name)
    action: Action = attrs.field(validator=_check_action)
    max_retry: int = attrs.field(default=0, validator=v.non_negative_int, kw_only=True)
    retry_backoff: Backoff = attrs.field(default=1.0, validator=_check_backoff, kw_only=True)
    retry_backoff_max: float = attrs.field(
        default=3600.0, validator=v.positive_number, kw_only=True
    )
    reservation_timeout: float | None = attrs.field(
        default=None, validator=v.optional_positive_number, kw_only=True
    )
    unique: bool = attrs.field(default=False, validator=v.boolean, kw_only=True)
    unique_key: Callable[[Any], Any] | None = attrs.field(
        default=None, validator=v.optional_callable, kw_only=True
    )
    unique_for: float | None = attrs.field(
        default=None, validator=v.optional_positive_number, kw_only=True
    )

    def __attrs_post_init__(self) -> None:
        if self.unique and self.unique_for is None:
            raise ValueError(
                f"task {self.name!r}: unique=True needs unique_for (seconds the lock may be "
                "held before it expires by itself)"
            )
        if not self.unique and (self.unique_key is not None or self.unique_for is not None):
            raise ValueError(f"task {self.name!r}: unique_key and unique_for need unique=True")
        if self.unique and self.unique_key is None:
            warnings.warn(
                f"unique task {self.name!r} has no unique_key: the task name is the key, "
                "so at most one instance of the task is queued at a time",
                UserWarning,
                stacklevel=4,
            )

    @property
    def max_attempts(self) -> int:
        return self.max_retry + 1

    def key_for(self, payload: Any) -> str:
        """The lock key of ``payload``: ``<len(name)>:<name>[:<unique_key(payload)>]``.

        The length prefix keeps the keys of different tasks apart whatever their names
        contain; without a unique_key the task itself is the key.
        """
        prefix = f"{len(self.name)}:{self.name}"
        if self.unique_key is None:
            return prefix
        key = self.unique_key(payload)
        if isinstance(key, bytes):
            key = key.decode("utf-8", "replace")
        if isinstance(key, bool) or not isinstance(key, str | int):
            raise TypeError(
                f"unique_key of task {self.name!r} must return a str or int, got {key!r}"
            )
        if isinstance(key, str) and (why := utf8_error(key)) is not None:
            raise InvalidPayload(
                f"the unique key of task {self.name!r} cannot be sent to Redis: {why}"
            )
        return f"{prefix}:{key}"

    @property
    def unique_for_ms(self) -> int:
        return max(1, math.ceil((self.unique_for or 0) * 1000))

    def retry_delay(self, failed_attempt: int) -> float:
        """Seconds to wait before retrying after attempt ``failed_attempt`` (1-based) failed.

        A number ``b`` gives ``min(cap, b * 2**(attempt-1))`` scaled by a random factor in
        [0.5, 1] (jitter, so retries of many tasks spread out).
        """
        backoff = self.retry_backoff
        if callable(backoff):
            delay = backoff(failed_attempt)
            if not _finite_non_negative(delay):
                raise ValueError(
                    f"retry_backoff of task {self.name!r} returned {delay!r} "
                    f"for attempt {failed_attempt}; it must return seconds >= 0"
                )
            return float(delay)
        exponent = min(failed_attempt - 1, 64)
        delay = min(self.retry_backoff_max, float(backoff) * 2.0**exponent)
        return delay * random.uniform(0.5, 1.0)


def _check_cron_expression(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    from croniter import croniter  # noqa: PLC0415 - loaded only by users of cron

    if not isinstance(value, str) or not croniter.is_valid(value):
        raise ValueError(f"{attr.name} is not a valid cron expression: {value!r}")


def _check_timezone(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{attr.name} must be a time zone name, got {type(value).__name__}")
    import zoneinfo  # noqa: PLC0415 - loaded only by users of cron

    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown {attr.name}: {value!r}") from None


@attrs.frozen
class CronSchedule:
    """A periodic task: ``task_name`` with ``payload`` at every tick of ``expression``.

    ``expression`` has five fields (minute hour day month weekday) or six (seconds last);
    ticks are computed in ``timezone``. The leader fires each tick once group-wide.
    """

    name: str = attrs.field(validator=_check_task_name)
    expression: str = attrs.field(validator=_check_cron_expression)
    task_name: str = attrs.field(validator=_check_task_name)
    payload: Any = None
    timezone: str = attrs.field(default="UTC", validator=_check_timezone)

    def __attrs_post_init__(self) -> None:
        # A payload that cannot be sent fails here, not at a tick on the leader.
        encode_message(self.task_name, self.payload, enqueued_at=0.0, max_bytes=NO_SIZE_LIMIT)

    def _iter(self, at: float) -> Any:
        import datetime  # noqa: PLC0415 - loaded only by users of cron
        import zoneinfo  # noqa: PLC0415 - idem

        from croniter import croniter  # noqa: PLC0415 - idem

        start = datetime.datetime.fromtimestamp(at, zoneinfo.ZoneInfo(self.timezone))

        return croniter(self.expression, start)

    def next_tick(self, after: float) -> float:
        """The first tick strictly after ``after`` (seconds since the epoch)."""
        tick: float = self._iter(after).get_next(float)
        return tick

    def prev_tick(self, at: float) -> float:
        """The latest tick at or before ``at``."""
        tick: float = self._iter(at + 0.001).get_prev(float)
        return tick


class TaskRegistry:
    """The tasks a runner can execute, by name."""

    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}
        self._crons: dict[str, CronSchedule] = {}

    def register(self, task: Task) -> Task:
        """Add ``task``; a second task of the same name is an error."""
        if not isinstance(task, Task):
            raise TypeError(f"register() takes a Task, got {type(task).__name__}")
        if task.name in self._tasks:
            raise ValueError(f"a task named {task.name!r} is already registered")
        self._tasks[task.name] = task
        return task

    @overload
    def task(self, func: A, /) -> A: ...

    @overload
    def task(
        self,
        name: str | None = None,
        *,
        max_retry: int = 0,
        retry_backoff: Backoff = 1.0,
        retry_backoff_max: float = 3600.0,
        reservation_timeout: float | None = None,
        unique: bool = False,
        unique_key: Callable[[Any], Any] | None = None,
        unique_for: float | None = None,
    ) -> Callable[[A], A]: ...

    def task(
        self,
        name: str | A | None = None,
        *,
        max_retry: int = 0,
        retry_backoff: Backoff = 1.0,
        retry_backoff_max: float = 3600.0,
        reservation_timeout: float | None = None,
        unique: bool = False,
        unique_key: Callable[[Any], Any] | None = None,
        unique_for: float | None = None,
    ) -> A | Callable[[A], A]:
        """Register an ``async def action(payload)`` as a task (decorator).

        Use as ``@tasks.task``, ``@tasks.task()`` or ``@tasks.task("name", max_retry=3)``;
        the name defaults to the function's ``__name__``. The function is returned as is.

        ``unique=True`` (with ``unique_for`` seconds, and ``unique_key=lambda payload: ...``)
        refuses a dispatch while a task of the same key is queued and not finished.
        """

        def decorate(func: A) -> A:
            task_name = name if isinstance(name, str) else getattr(func, "__name__", None)
            if task_name is None:
                raise TypeError(f"{func!r} has no __name__: pass the task's name, @task('name')")
            self.register(
                Task(
                    task_name,
                    func,
                    max_retry=max_retry,
                    retry_backoff=retry_backoff,
                    retry_backoff_max=retry_backoff_max,
                    reservation_timeout=reservation_timeout,
                    unique=unique,
                    unique_key=unique_key,
                    unique_for=unique_for,
                )
            )
            return func

        if name is not None and not isinstance(name, str):
            return decorate(name)
        return decorate

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
    ) -> CronSchedule: ...

    @overload
    def cron(
        self,
        expression: str,
        *,
        payload: Any = None,
        name: str | None = None,
        timezone: str = "UTC",
        max_retry: int = 0,
        retry_backoff: Backoff = 1.0,
        retry_backoff_max: float = 3600.0,
        reservation_timeout: float | None = None,
    ) -> Callable[[A], A]: ...

    def cron(
        self,
        expression: str,
        task_name: str | None = None,
        payload: Any = None,
        *,
        name: str | None = None,
        timezone: str = "UTC",
        max_retry: int = 0,
        retry_backoff: Backoff = 1.0,
        retry_backoff_max: float = 3600.0,
        reservation_timeout: float | None = None,
    ) -> CronSchedule | Callable[[A], A]:
        """Run a task periodically, once per tick of a cron ``expression``, group-wide.

        ``tasks.cron("*/5 * * * *", "send_report", {"to": "ops"})`` schedules a registered
        task; as a decorator, ``@tasks.cron("0 * * * *")`` registers the function as a task
        (with the given retry options) and schedules it with ``payload``. ``name``
        identifies the schedule in Redis (default: the task's name); keep it stable.
        """
        if task_name is not None:
            return self.add_cron(
                CronSchedule(name or task_name, expression, task_name, payload, timezone)
            )
        CronSchedule("check", expression, "check", None, timezone)  # fail before decorating

        def decorate(func: A) -> A:
            task = getattr(func, "__name__", "")
            schedule = CronSchedule(name or task, expression, task, payload, timezone)
            if schedule.name in self._crons:
                raise ValueError(f"a cron schedule named {schedule.name!r} is already registered")
            self.task(
                max_retry=max_retry,
                retry_backoff=retry_backoff,
                retry_backoff_max=retry_backoff_max,
                reservation_timeout=reservation_timeout,
            )(func)
            self.add_cron(schedule)
            return func

        return decorate

    def add_cron(self, schedule: CronSchedule) -> CronSchedule:
        """Add a cron schedule; a second schedule of the same name is an error."""
        if schedule.name in self._crons:
            raise ValueError(f"a cron schedule named {schedule.name!r} is already registered")
        task = self._tasks.get(schedule.task_name)
        if task is not None and task.unique:
            task.key_for(schedule.payload)  # a key that cannot be sent fails here
        self._crons[schedule.name] = schedule
        return schedule

    @property
    def crons(self) -> list[CronSchedule]:
        return list(self._crons.values())

    def check(self) -> None:
        """Raise :class:`TaskNotFound` if a cron schedule names a task that is not registered,
        and the error of ``key_for`` if a cron schedule of a unique task has a payload whose
        unique key cannot be sent to Redis."""
        for schedule in self._crons.values():
            if schedule.task_name not in self._tasks:
                raise TaskNotFound(schedule.task_name)
            task = self._tasks[schedule.task_name]
            if task.unique:
                task.key_for(schedule.payload)

    def get(self, name: str) -> Task:
        """The task called ``name``; :class:`TaskNotFound` if there is none."""
        try:
            return self._tasks[name]
        except KeyError:
            raise TaskNotFound(name) from None

    async def call(
        self, task_name: str, payload: Any = None, *, sleep_backoff: bool = False
    ) -> Any:
        """Run a task now, without Redis, as a runner would (eager mode, for unit tests).

        Same payload round trip, attempts and ``current_message()``; returns the action's
        result or raises :class:`~trunner.MaxRetryExceeded`. See
        :func:`trunner.testing.call_task`.
        """
        task = self.get(checked_task_name(task_name))
        return await run_eagerly(task, payload, sleep_backoff=sleep_backoff)

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def __iter__(self) -> Iterator[Task]:
        return iter(list(self._tasks.values()))

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._tasks)
