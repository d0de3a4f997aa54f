"""One task's definition: ``Task``, the checks of its options, and the checks and options
of a dispatch by name."""

from __future__ import annotations

import enum
import math
import random
import time
import warnings
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, Union

import attrs

from . import _validate as v
from ._action import Action, RunIn, check_action, place_of
from ._util import user_stacklevel
from ._wire.codec import TypeCodec, codec_for
from ._wire.limits import Limits, parse_rate
from ._wire.message import MessageOptions
from ._wire.names import DEFAULT_LANE, check_lane, check_task_name, utf8_error
from .errors import InvalidPayload

if TYPE_CHECKING:
    import datetime

#: The attribute ``@tasks.task`` sets on the function it registers: its ``Task``, so that
#: ``dispatch(function, payload)`` knows the task's name and types in any producer.
TASK_ATTRIBUTE = "__trunner_task__"

#: When a dispatch expires: seconds from now, a ``timedelta``, or an aware ``datetime``.
Expiry = Union[float, "datetime.timedelta", "datetime.datetime"]

__all__ = ["Action", "Backoff", "RunIn", "Task", "TaskDefaults"]

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

#: Either the base (seconds) of exponential backoff with jitter, or ``attempt -> seconds``.
Backoff = float | Callable[[int], float]


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
    """A named action with its retry policy, and where its body runs.

    [``TaskRegistry.task``][trunner.TaskRegistry.task] builds and registers one for you;
    build one yourself for [``TaskRegistry.register``][trunner.TaskRegistry.register]. Every
    field is checked when the task is built: ``TypeError`` or ``ValueError`` naming it.

    Raises:
        TypeError: A field of the wrong type; an ``action`` that is not callable, is a
            generator, or does not accept the payload as its one positional argument; or
            a ``run_in`` the action cannot run in.
        ValueError: A field out of range; ``unique=True`` without ``unique_for``; or
            ``unique_key`` or ``unique_for`` without ``unique=True``.

    Warns:
        UserWarning: A unique task without ``unique_key``: the task name is the key, so at
            most one task of it is queued at a time.
    """

    name: str = attrs.field(validator=check_task_name)
    """The name producers dispatch: a non-empty string without surrounding whitespace."""
    action: Action = attrs.field(validator=check_action)
    """Called with the payload as its one positional argument. An ``async def`` function
    (or an object with an ``async def __call__``) runs on the event loop; a plain ``def``
    runs in a worker thread, or in a worker process with ``run_in="process"`` (see
    [Blocking and CPU-bound tasks](blocking-and-cpu-bound-tasks.md))."""
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
    run_in: RunIn | None = attrs.field(default=None, kw_only=True)
    """Where the body runs: ``"loop"`` (an ``async def``), ``"thread"`` (a plain ``def``,
    in a worker thread) or ``"process"`` (a plain ``def`` defined at a module's top level,
    in a worker process: killed on timeout or cancel). ``None`` (the default): ``"loop"``
    for an ``async def``, ``"thread"`` for a plain ``def``; the built task holds the place
    chosen. See
    [Blocking and CPU-bound tasks](blocking-and-cpu-bound-tasks.md)."""
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
        object.__setattr__(self, "run_in", place_of(self.name, self.action, self.run_in))
        plain = (
            self.run_in == "loop"
            and decode is None
            and self.timeout is None
            and self.keep_result is None
            and limits is None
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
