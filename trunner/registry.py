"""The registry that names the tasks a runner can run: ``TaskRegistry``, whose ``call``
runs a task eagerly, without Redis."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar, overload

from ._executors.eager import run_eagerly
from ._schedules import CronSchedules
from ._task import (
    DEFAULT,
    TASK_ATTRIBUTE,
    Action,
    Backoff,
    Default,
    RunIn,
    Task,
    TaskDefaults,
    checked_task_name,
)
from ._wire.names import DEFAULT_LANE
from .errors import TaskNotFound
from .middleware import Middleware
from .schedule import CronSchedule

__all__ = ["TaskRegistry"]

A = TypeVar("A", bound=Action)
T = TypeVar("T")
P = TypeVar("P")
R = TypeVar("R")


def _or_default(value: T | Default, default: T) -> T:
    return default if value is DEFAULT else value


def _found(tasks: TaskRegistry, task: str | Callable[..., Any]) -> Task:
    """The task ``TaskRegistry.call`` is given: by name, or by its registered function."""
    if isinstance(task, str):
        return tasks.get(checked_task_name(task))
    registered = getattr(task, TASK_ATTRIBUTE, None)
    if not isinstance(registered, Task):
        raise TypeError(
            f"call takes a task name or a function registered with @tasks.task; got {task!r}"
        )
    return tasks.get(registered.name)


class TaskRegistry(CronSchedules):
    """The tasks a runner can run, by name, and the cron schedules that run them.

    ``name in registry`` tells whether a task of that name is registered;
    ``iter(registry)`` gives the registered [``Task``][trunner.Task]s in registration
    order (a snapshot), and ``len(registry)`` their number.

    Args:
        defaults: The options of every task the registry builds, unless the task sets
            its own (see [``TaskDefaults``][trunner.TaskDefaults]). Default:
            ``TaskDefaults()``, the defaults of [``Task``][trunner.Task].

    Raises:
        TypeError: ``defaults`` is not a ``TaskDefaults``.
    """

    def __init__(self, *, defaults: TaskDefaults | None = None) -> None:
        if defaults is None:
            defaults = TaskDefaults()
        elif not isinstance(defaults, TaskDefaults):
            raise TypeError(f"defaults must be a TaskDefaults, got {type(defaults).__name__}")
        self._defaults = defaults
        self._tasks: dict[str, Task] = {}
        self._crons: dict[str, CronSchedule] = {}

    @property
    def defaults(self) -> TaskDefaults:
        """The options of every task the registry builds, unless it sets its own."""
        return self._defaults

    def register(self, task: Task) -> Task:
        """Add a task.

        Args:
            task: The task.

        Returns:
            ``task``.

        Raises:
            TypeError: ``task`` is not a [``Task``][trunner.Task].
            ValueError: A task of the same name is registered.
        """
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
        max_retry: int | Default = DEFAULT,
        max_redeliveries: int | Default = DEFAULT,
        retry_backoff: Backoff | Default = DEFAULT,
        retry_backoff_max: float | Default = DEFAULT,
        reservation_timeout: float | Default | None = DEFAULT,
        unique: bool = False,
        unique_key: Callable[[Any], Any] | None = None,
        unique_for: float | None = None,
        timeout: float | Default | None = DEFAULT,
        keep_result: float | Default | None = DEFAULT,
        give_up_on: Iterable[type[BaseException]] = (),
        rate_limit: str | None = None,
        rate_burst: int | None = None,
        rate_limit_key: Callable[[Any], Any] | None = None,
        concurrency: int | None = None,
        concurrency_key: Callable[[Any], Any] | None = None,
        priority: str = DEFAULT_LANE,
        run_in: RunIn | None = None,
    ) -> Callable[[A], A]: ...

    def task(
        self,
        name: str | A | None = None,
        *,
        max_retry: int | Default = DEFAULT,
        max_redeliveries: int | Default = DEFAULT,
        retry_backoff: Backoff | Default = DEFAULT,
        retry_backoff_max: float | Default = DEFAULT,
        reservation_timeout: float | Default | None = DEFAULT,
        unique: bool = False,
        unique_key: Callable[[Any], Any] | None = None,
        unique_for: float | None = None,
        timeout: float | Default | None = DEFAULT,
        keep_result: float | Default | None = DEFAULT,
        give_up_on: Iterable[type[BaseException]] = (),
        rate_limit: str | None = None,
        rate_burst: int | None = None,
        rate_limit_key: Callable[[Any], Any] | None = None,
        concurrency: int | None = None,
        concurrency_key: Callable[[Any], Any] | None = None,
        priority: str = DEFAULT_LANE,
        run_in: RunIn | None = None,
    ) -> A | Callable[[A], A]:
        """Register ``action(payload)`` as a task: a decorator. An ``async def`` runs on
        the event loop, a plain ``def`` in a worker thread (see ``run_in``).

        Use it as ``@tasks.task``, ``@tasks.task()`` or ``@tasks.task("name",
        max_retry=3)``. ``unique=True`` with ``unique_for=seconds`` (and usually
        ``unique_key=lambda payload: ...``) makes a [unique task](unique-tasks.md). The
        options ``max_retry``, ``max_redeliveries``, ``retry_backoff``,
        ``retry_backoff_max``, ``reservation_timeout``, ``timeout`` and ``keep_result``
        not given are the registry's [defaults][trunner.TaskRegistry.defaults].

        Args:
            name: The task's name; default: the function's ``__name__``.
            max_retry: See [``Task.max_retry``][trunner.Task.max_retry].
            max_redeliveries: See
                [``Task.max_redeliveries``][trunner.Task.max_redeliveries].
            retry_backoff: See [``Task.retry_backoff``][trunner.Task.retry_backoff].
            retry_backoff_max: See [``Task.retry_backoff_max``][trunner.Task.retry_backoff_max].
            reservation_timeout: See
                [``Task.reservation_timeout``][trunner.Task.reservation_timeout].
            unique: See [``Task.unique``][trunner.Task.unique].
            unique_key: See [``Task.unique_key``][trunner.Task.unique_key].
            unique_for: See [``Task.unique_for``][trunner.Task.unique_for].
            timeout: See [``Task.timeout``][trunner.Task.timeout].
            keep_result: See [``Task.keep_result``][trunner.Task.keep_result].
            give_up_on: See [``Task.give_up_on``][trunner.Task.give_up_on].
            rate_limit: See [``Task.rate_limit``][trunner.Task.rate_limit].
            rate_burst: See [``Task.rate_burst``][trunner.Task.rate_burst].
            rate_limit_key: See [``Task.rate_limit_key``][trunner.Task.rate_limit_key].
            concurrency: See [``Task.concurrency``][trunner.Task.concurrency].
            concurrency_key: See [``Task.concurrency_key``][trunner.Task.concurrency_key].
            priority: See [``Task.priority``][trunner.Task.priority].
            run_in: See [``Task.run_in``][trunner.Task.run_in].

        Returns:
            The decorator, which returns the function unchanged.

        Raises:
            ValueError: A task of the same name is registered.
            TypeError: The callable has no ``__name__`` and no name was given.

        It also raises what [``Task``][trunner.Task] raises for a bad action or bad
        options.
        """

        defaults = self._defaults

        def decorate(func: A) -> A:
            task_name = name if isinstance(name, str) else getattr(func, "__name__", None)
            if task_name is None:
                raise TypeError(f"{func!r} has no __name__: pass the task's name, @task('name')")
            task = self.register(
                Task(
                    task_name,
                    func,
                    max_retry=_or_default(max_retry, defaults.max_retry),
                    max_redeliveries=_or_default(max_redeliveries, defaults.max_redeliveries),
                    retry_backoff=_or_default(retry_backoff, defaults.retry_backoff),
                    retry_backoff_max=_or_default(retry_backoff_max, defaults.retry_backoff_max),
                    reservation_timeout=_or_default(
                        reservation_timeout, defaults.reservation_timeout
                    ),
                    unique=unique,
                    unique_key=unique_key,
                    unique_for=unique_for,
                    timeout=_or_default(timeout, defaults.timeout),
                    keep_result=_or_default(keep_result, defaults.keep_result),
                    give_up_on=give_up_on,
                    rate_limit=rate_limit,
                    rate_burst=rate_burst,
                    rate_limit_key=rate_limit_key,
                    concurrency=concurrency,
                    concurrency_key=concurrency_key,
                    priority=priority,
                    run_in=run_in,
                )
            )
            with contextlib.suppress(AttributeError, TypeError):  # a builtin: by name only
                setattr(func, TASK_ATTRIBUTE, task)
            return func

        if name is not None and not isinstance(name, str):
            return decorate(name)
        return decorate

    def get(self, name: str) -> Task:
        """The task of that name.

        Args:
            name: A task name.

        Returns:
            The registered [``Task``][trunner.Task].

        Raises:
            TaskNotFound: No task of that name is registered.
        """
        try:
            return self._tasks[name]
        except KeyError:
            raise TaskNotFound(name, self._tasks) from None

    @overload
    async def call(
        self,
        task: Callable[[P], Awaitable[R]],
        payload: P,
        *,
        sleep_backoff: bool = False,
        headers: Mapping[str, str] | None = None,
        middleware: Iterable[Middleware] = (),
    ) -> R: ...

    @overload
    async def call(
        self,
        task: Callable[[P], R],
        payload: P,
        *,
        sleep_backoff: bool = False,
        headers: Mapping[str, str] | None = None,
        middleware: Iterable[Middleware] = (),
    ) -> R: ...

    @overload
    async def call(
        self,
        task: str,
        payload: Any = None,
        *,
        sleep_backoff: bool = False,
        headers: Mapping[str, str] | None = None,
        middleware: Iterable[Middleware] = (),
    ) -> Any: ...

    async def call(
        self,
        task: str | Callable[..., Any],
        payload: Any = None,
        *,
        sleep_backoff: bool = False,
        headers: Mapping[str, str] | None = None,
        middleware: Iterable[Middleware] = (),
    ) -> Any:
        """Run a task now, without Redis, as a runner would: eager mode, for unit tests.

        The same as [``trunner.testing.call_task``][trunner.testing.call_task] with this
        registry: the same payload round trip, attempts and ``current_message()``. A typed
        task's payload is encoded and checked as ``dispatch`` does, and decoded into its
        declared type; its ``timeout`` bounds each attempt; ``GiveUp`` (and
        ``give_up_on``) ends the attempts at once; a task that keeps its result returns it
        as ``TaskHandle.result()`` would (through JSON, decoded into its return type).

        Args:
            task: A registered task name, or a task function of this registry
                (``tasks.call(resize, request)`` is typed as ``resize`` is).
            payload: The payload, JSON-serializable (or of the task's declared type).
            sleep_backoff: Sleep the backoff between attempts (on the Trio clock).
            headers: The message's headers, as ``dispatch`` takes them.
            middleware: [Middleware][trunner.Middleware], as a runner runs them: their
                ``on_dispatch`` hooks once, their ``around_attempt`` hooks around each
                attempt.

        Returns:
            What the action returns.

        Raises:
            MaxRetryExceeded: The last attempt failed, or the task gave up; ``__cause__``
                is its exception (``TaskTimeout`` for an attempt past its timeout).
            MiddlewareError: A dispatch hook raised, or a middleware swallowed an
                attempt's exception or cancellation.
            InvalidHeaders: ``headers`` cannot be sent.
            TaskNotFound: No task of that name is registered.
            TypeError: ``task`` is neither a name nor a registered task function.
            ValueError: ``task`` is an empty name.
            InvalidPayload: The payload is not JSON-serializable, does not fit the task's
                declared type, or its message is larger than 1 MiB.
        """
        return await run_eagerly(
            _found(self, task),
            payload,
            sleep_backoff=sleep_backoff,
            headers=headers,
            middleware=middleware,
        )

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def __iter__(self) -> Iterator[Task]:
        return iter(list(self._tasks.values()))

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def names(self) -> frozenset[str]:
        """The registered task names."""
        return frozenset(self._tasks)
