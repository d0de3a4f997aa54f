"""Tasks and the registry that names them."""

from __future__ import annotations

import contextlib
import enum
import inspect
import math
import random
import time
import warnings
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union, overload

import attrs

from . import _validate as v
from ._executors.eager import run_eagerly
from ._util import user_stacklevel
from ._wire.codec import TypeCodec, codec_for
from ._wire.envelope import NO_SIZE_LIMIT, encode_message
from ._wire.headers import NO_HEADERS, check_headers
from ._wire.keys import DEFAULT_LANE, check_lane, utf8_error
from ._wire.limits import Limits, parse_rate
from .errors import InvalidPayload, TaskNotFound
from .message import MessageOptions
from .middleware import Middleware

if TYPE_CHECKING:
    import datetime

#: The attribute ``@tasks.task`` sets on the function it registers: its ``Task``, so that
#: ``dispatch(function, payload)`` knows the task's name and types in any producer.
TASK_ATTRIBUTE = "__trunner_task__"

#: When a dispatch expires: seconds from now, a ``timedelta``, or an aware ``datetime``.
Expiry = Union[float, "datetime.timedelta", "datetime.datetime"]

__all__ = ["Action", "Backoff", "CronSchedule", "Task", "TaskDefaults", "TaskRegistry"]

#: The default of ``Task.max_redeliveries``: a crashed worker's tasks run again, and a task
#: that crashes its worker every time ends in the dead letters after 4 deliveries.
DEFAULT_MAX_REDELIVERIES = 3


class _Default(enum.Enum):
    DEFAULT = "DEFAULT"

    def __repr__(self) -> str:
        return "DEFAULT"


#: What an option of ``@tasks.task`` / ``@tasks.cron`` that is not given stands for: the
#: registry's default (see ``TaskDefaults``).
DEFAULT = _Default.DEFAULT
Default = Literal[_Default.DEFAULT]

Action = Callable[[Any], Awaitable[Any]]
#: Either the base (seconds) of exponential backoff with jitter, or ``attempt -> seconds``.
Backoff = float | Callable[[int], float]

A = TypeVar("A", bound=Action)
T = TypeVar("T")
P = TypeVar("P")
R = TypeVar("R")


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


def dispatch_options(
    keep_result: float | None, timeout: float | None, expires: Expiry | None
) -> MessageOptions | None:
    """The options of one dispatch (None when none is set); ``expires`` as seconds since
    the epoch. Raises ``TypeError`` or ``ValueError`` naming a bad one."""
    if keep_result is None and timeout is None and expires is None:
        return None
    v.optional(v.check_positive_number)("keep_result", keep_result)
    v.optional(v.check_positive_number)("timeout", timeout)
    at: float | None = None
    if expires is not None:
        import datetime  # noqa: PLC0415 - only dispatches that expire: workers never need it

        if isinstance(expires, datetime.datetime):
            if expires.tzinfo is None or expires.utcoffset() is None:
                raise ValueError("expires must be an aware datetime (with a time zone)")
            at = expires.timestamp()
        elif isinstance(expires, datetime.timedelta):
            at = time.time() + expires.total_seconds()
        else:
            v.check_non_negative_number("expires", expires)
            at = time.time() + float(expires)
    return MessageOptions(keep_result, timeout, at)


def _exception_types(value: Iterable[type[BaseException]]) -> tuple[type[BaseException], ...]:
    return tuple(value)


def _check_exception_types(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    for item in value:  # type: ignore[attr-defined]  # the converter made it a tuple
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise TypeError(f"{attr.name} must hold exception types, got {item!r}")


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

    [``TaskRegistry.task``][trunner.TaskRegistry.task] builds and registers one for you;
    build one yourself for [``TaskRegistry.register``][trunner.TaskRegistry.register]. Every
    field is checked when the task is built: ``TypeError`` or ``ValueError`` naming it.

    Raises:
        TypeError: A field of the wrong type, or an ``action`` that is not async or does
            not accept the payload as its one positional argument.
        ValueError: A field out of range; ``unique=True`` without ``unique_for``; or
            ``unique_key`` or ``unique_for`` without ``unique=True``.

    Warns:
        UserWarning: A unique task without ``unique_key``: the task name is the key, so at
            most one task of it is queued at a time.
    """

    name: str = attrs.field(validator=_check_task_name)
    """The name producers dispatch: a non-empty string without surrounding whitespace."""
    action: Action = attrs.field(validator=_check_action)
    """Called with the payload as its one positional argument; its return value is
    ignored. An ``async def`` function, or an object with an ``async def __call__`` (not a
    class)."""
    max_retry: int = attrs.field(default=0, validator=v.non_negative_int, kw_only=True)
    """How many times a failed attempt (one that raised) is retried (an int >= 0). A run
    lost to a crash is not a failed attempt: see ``max_redeliveries``."""
    max_redeliveries: int = attrs.field(
        default=DEFAULT_MAX_REDELIVERIES, validator=v.non_negative_int, kw_only=True
    )
    """How many times a run lost without an outcome is run again (an int >= 0; default 3).

    A run is lost when its worker crashed or was killed (SIGKILL, out of memory, a lost
    host) or stalled past ``reclaim_delay``: its message is reclaimed and delivered again,
    as the same attempt, using none of ``max_retry``. A task that kills its worker every
    time is given up after ``max_redeliveries + 1`` deliveries of one attempt
    ([``MaxRetryExceeded``][trunner.MaxRetryExceeded] with ``deliveries``; reason
    ``max redeliveries exceeded``). ``0``: a run lost is given up at its redelivery.
    """
    retry_backoff: Backoff = attrs.field(default=1.0, validator=_check_backoff, kw_only=True)
    """The delay before a retry: a number ``b`` >= 0, or a callable ``attempt -> seconds``.

    With a number, the delay after attempt ``n`` failed is
    ``min(retry_backoff_max, b * 2**(n-1))``, times a random factor in [0.5, 1].
    """
    retry_backoff_max: float = attrs.field(
        default=3600.0, validator=v.positive_number, kw_only=True
    )
    """The cap of the exponential backoff (> 0); not applied to a callable."""
    reservation_timeout: float | None = attrs.field(
        default=None, validator=v.optional_positive_number, kw_only=True
    )
    """Makes heartbeats more frequent (> 0 or ``None``).

    A running attempt's heartbeats are sent every ``min(reservation_timeout,
    reclaim_delay) / 3`` instead of every ``reclaim_delay / 3``. It does not limit the
    task's run time, and the reservation itself always lasts ``reclaim_delay`` (see
    [Heartbeats](concepts.md#heartbeats-and-reservation_timeout)).
    """
    unique: bool = attrs.field(default=False, validator=v.boolean, kw_only=True)
    """A [unique task](unique-tasks.md): a dispatch is refused with
    [``TaskAlreadyDispatched``][trunner.TaskAlreadyDispatched] while a task of the same
    key is queued and not finished. Needs ``unique_for``."""
    unique_key: Callable[[Any], Any] | None = attrs.field(
        default=None, validator=v.optional_callable, kw_only=True
    )
    """``payload -> str or int``, the payload's key; needs ``unique=True``. ``None``: the
    task name is the key, and a ``UserWarning`` is issued when the task is built."""
    unique_for: float | None = attrs.field(
        default=None, validator=v.optional_positive_number, kw_only=True
    )
    """Seconds after which the lock of a unique task expires by itself, whether or not
    the task finished (> 0). Required with ``unique=True``, and only allowed with it."""
    timeout: float | None = attrs.field(
        default=None, validator=v.optional_positive_number, kw_only=True
    )
    """Each attempt may run this many seconds (> 0 or ``None``); then it is cancelled and
    fails with [``TaskTimeout``][trunner.TaskTimeout], retried as any failure. A dispatch
    may set its own."""
    keep_result: float | None = attrs.field(
        default=None, validator=v.optional_positive_number, kw_only=True
    )
    """Keep each task's outcome (its result, or its error) this many seconds after it
    finished, for [task handles](task-handles.md) (> 0 or ``None``: not kept). A
    dispatch may set its own."""
    give_up_on: tuple[type[BaseException], ...] = attrs.field(
        default=(), converter=_exception_types, validator=_check_exception_types, kw_only=True
    )
    """Exception types that give the task up at once, without a retry (dead-lettered with
    the error); [``GiveUp``][trunner.GiveUp] always does. An exception group (what a
    nursery in the task raises) gives up when it holds a ``GiveUp``, or only exceptions
    of these types."""
    rate_limit: str | None = attrs.field(default=None, kw_only=True)
    """A group-wide [rate limit](limits.md): ``"<count>/s"``, ``"/m"`` or ``"/h"``
    (``"100/s"``). A message over it is deferred to when the limit admits it (GCRA), and
    uses no attempt. ``None``: no rate limit."""
    rate_burst: int | None = attrs.field(default=None, kw_only=True)
    """How many admissions of the rate limit may come at once (an int >= 1; default 1:
    admissions are spaced evenly). Only with ``rate_limit``."""
    rate_limit_key: Callable[[Any], Any] | None = attrs.field(
        default=None, validator=v.optional_callable, kw_only=True
    )
    """``payload -> str or int``: one rate limit per key (a tenant, say). Only with
    ``rate_limit``."""
    concurrency: int | None = attrs.field(default=None, kw_only=True)
    """At most this many messages of the task (per ``concurrency_key``) run at once in the
    whole group (an int >= 1, or ``None``: no limit). See [limits](limits.md)."""
    concurrency_key: Callable[[Any], Any] | None = attrs.field(
        default=None, validator=v.optional_callable, kw_only=True
    )
    """``payload -> str or int``: one concurrency limit per key. Only with
    ``concurrency``."""
    priority: str = attrs.field(
        default=DEFAULT_LANE,
        validator=lambda task, _attr, value: check_lane(value, f"task {task.name!r}: priority"),
        kw_only=True,
    )
    """The priority lane the task's messages go to when a dispatch names none
    (``"default"``; see [Priority lanes](lanes.md))."""
    limits: Limits | None = attrs.field(init=False, eq=False, repr=False)
    """The task's limits, or None when it has none (the pool's hot path pays nothing)."""
    payload_codec: TypeCodec = attrs.field(init=False, eq=False, repr=False)
    """How the payload is decoded and checked, from the action's first parameter's
    annotation (see [Typed tasks](task-handles.md#typed-tasks))."""
    result_codec: TypeCodec = attrs.field(init=False, eq=False, repr=False)
    """How the result is encoded and decoded, from the action's return annotation."""
    decode_payload: Callable[[Any], Any] | None = attrs.field(init=False, eq=False, repr=False)
    """``payload_codec.decode``, or None when the payload is passed as decoded (the hot
    path of an untyped task pays nothing)."""
    plain: bool = attrs.field(init=False, eq=False, repr=False)
    """No payload to decode, no timeout, no result to keep: the pool's fastest path."""

    def __attrs_post_init__(self) -> None:
        payload_codec, result_codec, problem = codec_for(self.action)
        if problem is not None:
            warnings.warn(
                f"task {self.name!r}: its annotations cannot be resolved ({problem}); its "
                "payload and result go untyped. Define the types they name at module level.",
                UserWarning,
                stacklevel=user_stacklevel(),
            )
        object.__setattr__(self, "payload_codec", payload_codec)
        object.__setattr__(self, "result_codec", result_codec)
        decode = None if payload_codec.passes_through else payload_codec.decode
        object.__setattr__(self, "decode_payload", decode)
        limits = self._limits()
        object.__setattr__(self, "limits", limits)
        plain = (
            decode is None and self.timeout is None and self.keep_result is None and limits is None
        )
        object.__setattr__(self, "plain", plain)
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
                stacklevel=user_stacklevel(),
            )

    def _limits(self) -> Limits | None:
        """The limits the options declare (checked), or None."""
        if self.rate_limit is None and (self.rate_burst is not None or self.rate_limit_key):
            raise ValueError(f"task {self.name!r}: rate_burst and rate_limit_key need rate_limit")
        concurrency = self.concurrency
        if concurrency is None and self.concurrency_key is not None:
            raise ValueError(f"task {self.name!r}: concurrency_key needs concurrency")
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            raise ValueError(
                f"task {self.name!r}: concurrency must be an int >= 1, got {concurrency!r}"
            )
        if self.rate_limit is None and concurrency is None:
            return None
        try:
            rate = None if self.rate_limit is None else parse_rate(self.rate_limit, self.rate_burst)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"task {self.name!r}: {exc}") from None
        return Limits(self.name, rate, self.rate_limit_key, concurrency, self.concurrency_key)

    @property
    def max_attempts(self) -> int:
        """How many attempts the task gets: ``max_retry + 1``."""
        return self.max_retry + 1

    def key_for(self, payload: Any) -> str:
        """The unique key of ``payload``, whose lock a unique task takes.

        The length prefix keeps the keys of different tasks apart whatever their names
        contain; without a ``unique_key`` the task itself is the key.

        Args:
            payload: The payload of a dispatch.

        Returns:
            ``"<len(name)>:<name>:<unique_key(payload)>"``, or ``"<len(name)>:<name>"``
            without ``unique_key``. ``bytes`` keys are decoded as UTF-8.

        Raises:
            TypeError: ``unique_key`` returned something other than a ``str`` or ``int``.

        Whatever ``unique_key`` raises propagates.
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
        """``unique_for`` in whole milliseconds (at least 1)."""
        return max(1, math.ceil((self.unique_for or 0) * 1000))

    def retry_delay(self, failed_attempt: int) -> float:
        """The delay before the next attempt, after attempt ``failed_attempt`` failed.

        A number ``b`` gives ``min(retry_backoff_max, b * 2**(failed_attempt-1))`` scaled
        by a random factor in [0.5, 1] (jitter, so that retries of many tasks spread out);
        a callable gives what it returns.

        Args:
            failed_attempt: The attempt that failed, from 1.

        Returns:
            Seconds to wait.

        Raises:
            ValueError: The ``retry_backoff`` callable returned something other than a
                finite number >= 0.
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


@attrs.frozen
class TaskDefaults:
    """Registry-wide defaults of task options: ``TaskRegistry(defaults=TaskDefaults(...))``.

    Every task the registry builds (``@tasks.task``, and ``@tasks.cron`` as a decorator)
    takes these options from here unless it sets its own: a task's own option wins, even
    ``None`` (``timeout=None``: no timeout, whatever the default). A [``Task``][trunner.Task]
    you build yourself and [``register``][trunner.TaskRegistry.register] keeps its own
    values. Each field means what the ``Task`` field of the same name means, and is checked
    the same way (``TypeError`` or ``ValueError`` naming it).
    """

    max_retry: int = attrs.field(default=0, validator=v.non_negative_int, kw_only=True)
    """See [``Task.max_retry``][trunner.Task.max_retry]."""
    max_redeliveries: int = attrs.field(
        default=DEFAULT_MAX_REDELIVERIES, validator=v.non_negative_int, kw_only=True
    )
    """See [``Task.max_redeliveries``][trunner.Task.max_redeliveries]."""
    retry_backoff: Backoff = attrs.field(default=1.0, validator=_check_backoff, kw_only=True)
    """See [``Task.retry_backoff``][trunner.Task.retry_backoff]."""
    retry_backoff_max: float = attrs.field(
        default=3600.0, validator=v.positive_number, kw_only=True
    )
    """See [``Task.retry_backoff_max``][trunner.Task.retry_backoff_max]."""
    reservation_timeout: float | None = attrs.field(
        default=None, validator=v.optional_positive_number, kw_only=True
    )
    """See [``Task.reservation_timeout``][trunner.Task.reservation_timeout]."""
    timeout: float | None = attrs.field(
        default=None, validator=v.optional_positive_number, kw_only=True
    )
    """See [``Task.timeout``][trunner.Task.timeout]."""
    keep_result: float | None = attrs.field(
        default=None, validator=v.optional_positive_number, kw_only=True
    )
    """See [``Task.keep_result``][trunner.Task.keep_result]."""


def _or_default(value: T | Default, default: T) -> T:
    return default if value is DEFAULT else value


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


def _cron_headers(headers: Mapping[str, str] | None) -> Mapping[str, str]:
    checked = check_headers(headers)
    return MappingProxyType(checked) if checked else NO_HEADERS


@attrs.frozen
class CronSchedule:
    """A periodic task: ``task_name`` with ``payload`` at every tick of ``expression``.

    [``TaskRegistry.cron``][trunner.TaskRegistry.cron] builds one; build one yourself for
    [``TaskRegistry.add_cron``][trunner.TaskRegistry.add_cron]. The group's leader fires
    each tick once group-wide (see [Periodic tasks](delayed-and-periodic.md#periodic-tasks-cron)).

    Raises:
        TypeError: ``name`` or ``task_name`` is not a string, or ``timezone`` is not a
            string.
        ValueError: An empty name or one with surrounding whitespace, an invalid
            expression, or an unknown time zone.
        InvalidPayload: ``payload`` is not JSON-serializable.
    """

    name: str = attrs.field(validator=_check_task_name)
    """The schedule's name: a non-empty string without surrounding whitespace. The group
    keeps the last tick fired per name, so keep it stable."""
    expression: str = attrs.field(validator=_check_cron_expression)
    """A cron expression: five fields (minute hour day-of-month month day-of-week), or six
    with seconds as the last field."""
    task_name: str = attrs.field(validator=_check_task_name)
    """The task to run: a non-empty string without surrounding whitespace."""
    payload: Any = None
    """The payload of every tick, JSON-serializable.

    It is encoded once when the schedule is built, to check it, and again at every tick.
    At a tick, a message larger than the leading runner's ``max_payload_bytes`` skips the
    tick: the leader logs an error and reports
    [``PayloadTooLarge``][trunner.PayloadTooLarge] through ``runner.errors()``, and fires
    the next tick as usual.
    """
    timezone: str = attrs.field(default="UTC", validator=_check_timezone)
    """The IANA time zone the ticks are computed in."""
    headers: Mapping[str, str] = attrs.field(default=NO_HEADERS, converter=_cron_headers)
    """The headers of every tick's message (read-only; none by default). A cron tick is
    not a dispatch: no dispatch hook sees it, so these are all the headers it carries.
    ``InvalidHeaders`` when they cannot be sent (see
    [Middleware and headers](middleware.md#headers))."""

    def __attrs_post_init__(self) -> None:
        # A payload that cannot be sent fails here, not at a tick on the leader.
        encode_message(
            self.task_name,
            self.payload,
            enqueued_at=0.0,
            headers=self.headers,
            max_bytes=NO_SIZE_LIMIT,
        )
        # croniter accepts expressions that never match (30 February): finding the next
        # tick now makes them fail here, not on the leader at run time.
        try:
            self.next_tick(time.time())
        except ValueError as exc:
            raise ValueError(
                f"cron schedule {self.name!r}: {self.expression!r} never fires ({exc})"
            ) from None

    def _iter(self, at: float) -> Any:
        import datetime  # noqa: PLC0415 - loaded only by users of cron
        import zoneinfo  # noqa: PLC0415 - idem

        from croniter import croniter  # noqa: PLC0415 - idem

        start = datetime.datetime.fromtimestamp(at, zoneinfo.ZoneInfo(self.timezone))

        return croniter(self.expression, start)

    def next_tick(self, after: float) -> float:
        """The first tick strictly after ``after``.

        Args:
            after: Seconds since the epoch.

        Returns:
            The tick, in seconds since the epoch.
        """
        tick: float = self._iter(after).get_next(float)
        return tick

    def prev_tick(self, at: float) -> float:
        """The latest tick at or before ``at``.

        Args:
            at: Seconds since the epoch.

        Returns:
            The tick, in seconds since the epoch.
        """
        tick: float = self._iter(at + 0.001).get_prev(float)
        return tick


class TaskRegistry:
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
    ) -> A | Callable[[A], A]:
        """Register an ``async def action(payload)`` as a task: a decorator.

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
                )
            )
            with contextlib.suppress(AttributeError, TypeError):  # a builtin: by name only
                setattr(func, TASK_ATTRIBUTE, task)
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
        task: str,
        payload: Any = None,
        *,
        sleep_backoff: bool = False,
        headers: Mapping[str, str] | None = None,
        middleware: Iterable[Middleware] = (),
    ) -> Any: ...

    async def call(
        self,
        task: str | Callable[..., Awaitable[Any]],
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
        if isinstance(task, str):
            found = self.get(checked_task_name(task))
        else:
            registered = getattr(task, TASK_ATTRIBUTE, None)
            if not isinstance(registered, Task):
                raise TypeError(
                    f"call takes a task name or a function registered with @tasks.task; "
                    f"got {task!r}"
                )
            found = self.get(registered.name)
        return await run_eagerly(
            found, payload, sleep_backoff=sleep_backoff, headers=headers, middleware=middleware
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
