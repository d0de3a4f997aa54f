"""Dispatching: shared by the runner and the producer-only client."""

from __future__ import annotations

import difflib
import math
import secrets
import time
import warnings
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

import attrs

from ._redis import Broker
from ._util import wall_ms
from ._wire.codec import untyped
from ._wire.decode import MessageDecodeError, decode_message
from ._wire.envelope import encode_message
from ._wire.headers import check_headers
from ._wire.keys import DEFAULT_LANE, UniqueLock, check_lane
from ._wire.stats import GroupStats, InstanceInfo
from .admin import (
    CronEntry,
    DeadLetter,
    DelayedTask,
    GroupInfo,
    ReplayResult,
    cron_entries,
    dead_ids_of_task,
    delete_dead,
    inspect_group,
    list_dead,
    list_dead_newest,
    list_delayed,
    list_quarantined,
    read_instances,
    read_stats,
    replay_dead,
    waiting_age,
)
from .errors import InvalidHeaders, InvalidPayload, RunnerNotRunning, TaskAlreadyDispatched
from .handles import Known, TaskHandle, Waiters
from .message import MessageOptions
from .middleware import DispatchHooks, DispatchInfo, Middleware
from .pausing import notices_for
from .quarantine import QuarantineRecord
from .status import CancelOutcome
from .task import TASK_ATTRIBUTE, Expiry, Task, TaskRegistry, checked_task_name, dispatch_options

if TYPE_CHECKING:
    import datetime

__all__ = ["Producer", "TaskRef"]

P = TypeVar("P")
R = TypeVar("R")

#: What ``dispatch`` takes as the task: a registered task function, a ``Task``, or a name.
TaskRef = str | Task | Callable[..., Awaitable[Any]]


@attrs.frozen
class _Unique:
    """The lock a unique task takes: its key, a token of this dispatch, and its ttl."""

    key: str
    token: str
    ttl_ms: int
    seconds: float
    """``unique_for``, as the message carries it."""


class Producer:
    """Dispatch and inspection methods, for the runner and the producer-only client.

    ``registry``: the tasks to check names (and unique keys) against, or None to accept
    any name; ``instance_ttl``: how long an instance that has not reported counts as live
    (the group's ``RunnerConfig.instance_ttl``); ``middleware``: whose ``on_dispatch``
    hooks see each message. The broker is set while open.
    """

    def __init__(
        self,
        *,
        registry: TaskRegistry | None,
        max_payload_bytes: int,
        instance_ttl: float,
        middleware: Sequence[Middleware] = (),
        lanes: Sequence[str] | None = None,
    ) -> None:
        self._broker: Broker | None = None
        hooks = DispatchHooks(middleware)
        self._dispatch_hooks = hooks if hooks else None
        self._waiters: Waiters | None = None
        self._registry = registry
        self._max_payload_bytes = max_payload_bytes
        self._instance_ttl = instance_ttl
        #: The lanes other than the default this producer knows are in the queue's
        #: registry of lanes: it named them there, or read them there (see :meth:`_declare`).
        self._declared: set[str] = set()
        #: The lanes a runner's ``RunnerConfig.lanes`` declares, when it declares any:
        #: with its tasks' lanes, the only lanes it dispatches to. None: a client, or a
        #: runner of the default lane alone (it also accepts the queue's registered lanes).
        self._config_lanes = frozenset(lanes) if lanes is not None else None

    def _open_broker(self) -> Broker:
        if self._broker is None:
            raise RunnerNotRunning(f"{type(self).__name__} is not open")
        return self._broker

    def _open_waiters(self) -> Waiters:
        if self._broker is None or self._waiters is None:
            raise RunnerNotRunning(f"{type(self).__name__} is not open")
        return self._waiters

    def _group_name(self) -> str:
        return self._broker.group if self._broker is not None else "?"

    def _keep_result_of(self, task_name: str) -> float | None:
        """The ``keep_result`` of a task this producer's registry knows, or None."""
        if self._registry is None or task_name not in self._registry:
            return None
        return self._registry.get(task_name).keep_result

    def _knows_task(self, task_name: str) -> bool:
        """Whether this producer's registry knows the task ``task_name``."""
        return self._registry is not None and task_name in self._registry

    async def cancel(self, task_id: str) -> CancelOutcome:
        """Cancel the task ``task_id`` wherever it is: ``handle(task_id).cancel()``.

        Args:
            task_id: The task's id.

        Returns:
            What was done (see [``TaskHandle.cancel``][trunner.TaskHandle.cancel]).
        """
        return await self.handle(task_id).cancel()

    def _resolve(self, task: TaskRef) -> tuple[str, Task | None]:
        """The name of the task to dispatch, and the registered task when known (checked
        against the registry if there is one)."""
        if isinstance(task, str):
            checked_task_name(task)
            return task, self._registry.get(task) if self._registry is not None else None
        found = task if isinstance(task, Task) else getattr(task, TASK_ATTRIBUTE, None)
        if not isinstance(found, Task):
            raise TypeError(
                f"dispatch takes a task name, a Task, or a function registered with "
                f"@tasks.task; got {task!r}"
            )
        if self._registry is not None:
            return found.name, self._registry.get(found.name)
        return found.name, found

    def _encode(
        self,
        task_name: str,
        payload: Any,
        now: float,
        task_id: str | None = None,
        unique: _Unique | None = None,
        options: MessageOptions | None = None,
        headers: Mapping[str, str] | None = None,
        lane: str = DEFAULT_LANE,
    ) -> bytes:
        return encode_message(
            task_name,
            payload,
            enqueued_at=now,
            task_id=task_id,
            unique_key=unique.key if unique else None,
            unique_token=unique.token if unique else None,
            unique_for=unique.seconds if unique else None,
            options=options,
            headers=headers,
            max_bytes=self._max_payload_bytes,
            lane=lane,
        )

    async def _headers(
        self,
        task_name: str,
        payload: Any,
        headers: Mapping[str, str] | None,
        task_id: str | None = None,
        due: float | None = None,
    ) -> Mapping[str, str] | None:
        """The headers of one message: the dispatch's, as the dispatch hooks leave them
        (checked here, so that a bad one is blamed on its author: the call or a hook)."""
        hooks = self._dispatch_hooks
        if hooks is None:
            return headers
        given = check_headers(headers, task_name) or {}
        info = DispatchInfo(task_name, payload, given, self._group_name(), task_id, due)
        after = await hooks.run(info)
        try:
            return check_headers(after, task_name)
        except InvalidHeaders as exc:
            raise InvalidHeaders(f"{exc} (as the on_dispatch hooks left them)") from None

    @staticmethod
    def _payload(task: Task | None, payload: Any) -> Any:
        """The payload as JSON values: a typed task's (see ``trunner._wire.codec``) is encoded,
        and checked against its type as a runner will check it (so a payload that would
        be given up on is refused here, before anything is sent)."""
        if task is None or task.decode_payload is None:
            return payload
        codec = task.payload_codec
        encoded = codec.encode(payload) if codec.typed else payload
        try:
            task.decode_payload(encoded)
        except InvalidPayload as exc:
            raise InvalidPayload(f"payload of task {task.name!r} {exc}") from None
        return encoded

    @staticmethod
    def _lane_of(task: Task | None, priority: str | None) -> str:
        """The lane of a dispatch: its ``priority``, else the task's, else the default."""
        if priority is not None:
            return check_lane(priority)
        return task.priority if task is not None else DEFAULT_LANE

    def _own_lanes(self, task: Task | None = None) -> set[str]:
        """The lanes this producer declares itself: a runner's ``RunnerConfig.lanes``, and
        the ``priority`` of each task of its registry (cron ticks go there too), and of
        ``task`` (a ``Task`` dispatched by a client without a registry)."""
        own = set(self._config_lanes or ())
        own.update(known.priority for known in self._registry or ())
        if task is not None:
            own.add(task.priority)
        return own

    async def _check_lane(self, broker: Broker, lane: str, task: Task | None) -> None:
        """Refuse ``lane`` unless it is declared (see [Priority lanes](lanes.md)): before
        the dispatch hooks run or anything is written.

        Declared: ``default``; a runner's ``RunnerConfig.lanes``; the ``priority`` of a
        task of this producer's registry, or of ``task`` (the task dispatched); and,
        unless this producer is a runner that declares lanes, a lane the queue's registry
        names (what the runners reading it registered when they started). That registry
        is read only for a lane not known yet (the lanes found there are kept), so a
        dispatch to a known lane costs no round trip."""
        if lane == DEFAULT_LANE or lane in self._declared:
            return
        own = self._own_lanes(task)
        if lane in own:
            return  # named in the registry by _declare, just before the task is written
        registered: list[str] = []
        if self._config_lanes is None:
            registered = [name for name in await broker.known_lanes() if name != DEFAULT_LANE]
            self._declared.update(registered)
            if lane in registered:
                return
        raise ValueError(self._undeclared(broker, lane, own, registered))

    async def _declare(self, broker: Broker, lane: str) -> None:
        """Name ``lane`` (checked by :meth:`_check_lane`) in the queue's registry of lanes
        the first time this producer writes to it (just before: a failure writes no task),
        so that ``inspect`` and the queue length count it even before a runner reads it."""
        if lane != DEFAULT_LANE and lane not in self._declared:
            await broker.declare_lanes([lane])
            self._declared.add(lane)

    def _undeclared(self, broker: Broker, lane: str, own: set[str], registered: list[str]) -> str:
        """Why ``lane`` is refused, what is known, and how to declare it."""
        known = [DEFAULT_LANE, *sorted((own | set(registered)) - {DEFAULT_LANE})]
        if self._config_lanes is not None:
            why = "neither this runner's RunnerConfig.lanes nor its tasks' priorities name it"
        elif self._registry is not None:
            why = "no task of this client's registry and no runner of the queue declares it"
        else:
            why = "no runner of the queue registered it (a client without tasks= knows no more)"
        close = difflib.get_close_matches(lane, known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return (
            f"priority {lane!r} is not a declared lane of queue {broker.keys.queue!r}{hint}: "
            f"{why}; the known lanes are {', '.join(map(repr, known))}. A task dispatched "
            f"there would wait for ever. Check the spelling, or declare the lane: in "
            f"RunnerConfig.lanes of the runners that are to read it (they register it when "
            f"they start), or as a task's priority (@tasks.task(priority={lane!r}), in the "
            f"registry of the runner or of open_client(tasks=...); on the command line, "
            f"--tasks MODULE:settings)"
        )

    def _unique(self, task: Task | None, payload: Any) -> _Unique | None:
        if task is None or not task.unique:
            return None
        key = task.key_for(payload)
        return _Unique(key, secrets.token_hex(16), task.unique_for_ms, task.unique_for or 0.0)

    @staticmethod
    def _known(name: str, task: Task | None, options: MessageOptions | None) -> Known:
        """What the handles of a dispatch know: the task's name, and the ``keep_result``
        its dispatch or its task (when known here) sets."""
        if options is not None and options.keep_result is not None:
            return Known(name, options.keep_result, "dispatch", dispatched=True)
        if task is not None:
            return Known(name, task.keep_result, "task", dispatched=True)
        return Known(name, dispatched=True)

    def _handle(self, task_id: str, task: Task | None, known: Known) -> TaskHandle[Any]:
        return TaskHandle(task_id, self, task.result_codec if task is not None else untyped, known)

    @overload
    def handle(self, task_id: str) -> TaskHandle[Any]: ...

    @overload
    def handle(self, task_id: str, task: Callable[..., Awaitable[R]]) -> TaskHandle[R]: ...

    @overload
    def handle(self, task_id: str, task: str | Task) -> TaskHandle[Any]: ...

    def handle(self, task_id: str, task: TaskRef | None = None) -> TaskHandle[Any]:
        """A handle on the task ``task_id``, dispatched from anywhere.

        Args:
            task_id: A task's id, as ``dispatch`` (or ``str(handle)``) gave it.
            task: The task (its function, ``Task`` or name), to decode the result into
                its declared return type; without it, the result is what JSON gives.

        Returns:
            A [``TaskHandle``][trunner.TaskHandle].
        """
        if not isinstance(task_id, str) or not task_id:
            raise TypeError(f"task_id must be a non-empty str, got {task_id!r}")
        found = self._resolve(task)[1] if task is not None else None
        if found is None:
            return TaskHandle(str(task_id), self)
        known = Known(found.name, found.keep_result, "task")  # its dispatch may say otherwise
        return TaskHandle(str(task_id), self, found.result_codec, known)

    @overload
    async def dispatch(
        self,
        task_name: Callable[[P], Awaitable[R]],
        payload: P,
        *,
        keep_result: float | None = None,
        timeout: float | None = None,
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
        timeout: float | None = None,
        expires: Expiry | None = None,
        headers: Mapping[str, str] | None = None,
        priority: str | None = None,
    ) -> TaskHandle[Any]: ...

    async def dispatch(
        self,
        task_name: TaskRef,
        payload: Any = None,
        *,
        keep_result: float | None = None,
        timeout: float | None = None,
        expires: Expiry | None = None,
        headers: Mapping[str, str] | None = None,
        priority: str | None = None,
    ) -> TaskHandle[Any]:
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
            task_name: The task: a function registered with ``@tasks.task`` (then the
                payload's type is checked by mypy, and the handle's result is typed), a
                [``Task``][trunner.Task], or a name. A runner, or a client with
                ``tasks=``, only accepts a task its registry knows.
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
        broker = self._open_broker()
        name, task = self._resolve(task_name)
        options = dispatch_options(keep_result, timeout, expires)
        lane = self._lane_of(task, priority)
        await self._check_lane(broker, lane, task)
        unique = self._unique(task, payload)
        sent = self._payload(task, payload)
        headers = await self._headers(name, sent, headers)
        data = self._encode(
            name, sent, time.time(), unique=unique, options=options, headers=headers, lane=lane
        )
        await self._declare(broker, lane)
        if unique is None:
            return self._handle(
                await broker.enqueue(data, lane), task, self._known(name, task, options)
            )
        (message_id,) = await broker.enqueue_unique(
            [(broker.keys.unique(unique.key), unique.token, data)], unique.ttl_ms, lane
        )
        if message_id is None:
            raise TaskAlreadyDispatched(name, [unique.key])
        return self._handle(message_id, task, self._known(name, task, options))

    @overload
    async def dispatch_many(
        self,
        task_name: Callable[[P], Awaitable[R]],
        payloads: Iterable[P],
        *,
        keep_result: float | None = None,
        timeout: float | None = None,
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
        timeout: float | None = None,
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
        timeout: float | None = None,
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
        broker = self._open_broker()
        name, task = self._resolve(task_name)
        options = dispatch_options(keep_result, timeout, expires)
        lane = self._lane_of(task, priority)
        given = list(payloads)
        if not given:
            return []
        await self._check_lane(broker, lane, task)
        now = time.time()
        items = []
        hooks = self._dispatch_hooks
        for payload in given:
            unique = self._unique(task, payload)
            sent = self._payload(task, payload)
            own = headers if hooks is None else await self._headers(name, sent, headers)
            data = self._encode(name, sent, now, None, unique, options, own, lane)
            items.append((unique, data))
        await self._declare(broker, lane)
        known = self._known(name, task, options)
        if task is None or not task.unique:
            ids = await broker.enqueue_many([data for _, data in items], lane)
            return [self._handle(i, task, known) for i in ids]
        locked = [(broker.keys.unique(u.key), u.token, data) for u, data in items if u is not None]
        maybe = await broker.enqueue_unique(locked, task.unique_for_ms, lane)
        refused = [i for i, message_id in enumerate(maybe) if message_id is None]
        if refused:
            keys = [u.key for i in refused if (u := items[i][0]) is not None]
            raise TaskAlreadyDispatched(name, keys, refused, maybe)
        return [self._handle(i, task, known) for i in maybe if i is not None]

    @overload
    async def dispatch_delayed(
        self,
        task_name: Callable[[P], Awaitable[R]],
        payload: P,
        delay: float | datetime.timedelta,
        *,
        keep_result: float | None = None,
        timeout: float | None = None,
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
        timeout: float | None = None,
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
        timeout: float | None = None,
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
        seconds: Any = delay
        if not isinstance(delay, int | float):
            import datetime  # noqa: PLC0415 - only for a timedelta; workers never need it

            if isinstance(delay, datetime.timedelta):
                seconds = delay.total_seconds()
        if not isinstance(seconds, int | float) or isinstance(seconds, bool):
            raise TypeError(f"delay must be seconds or a timedelta, got {type(delay).__name__}")
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"delay must be a finite number of seconds >= 0, got {delay!r}")
        options = dispatch_options(keep_result, timeout, expires)
        due = time.time() + seconds
        return await self._schedule(task_name, payload, due, options, headers, priority)

    @overload
    async def schedule_for(
        self,
        task_name: Callable[[P], Awaitable[R]],
        payload: P,
        when: datetime.datetime,
        *,
        keep_result: float | None = None,
        timeout: float | None = None,
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
        timeout: float | None = None,
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
        timeout: float | None = None,
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
        import datetime  # noqa: PLC0415 - not loaded by workers that never need it

        if not isinstance(when, datetime.datetime):
            raise TypeError(f"when must be a datetime, got {type(when).__name__}")
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError("when must be an aware datetime (with a time zone), got a naive one")
        options = dispatch_options(keep_result, timeout, expires)
        return await self._schedule(
            task_name, payload, when.timestamp(), options, headers, priority
        )

    async def _schedule(
        self,
        task_name: TaskRef,
        payload: Any,
        due: float,
        options: MessageOptions | None,
        headers: Mapping[str, str] | None,
        priority: str | None,
    ) -> TaskHandle[Any]:
        broker = self._open_broker()
        name, task = self._resolve(task_name)
        lane = self._lane_of(task, priority)
        await self._check_lane(broker, lane, task)
        unique = self._unique(task, payload)
        task_id = secrets.token_hex(16)
        sent = self._payload(task, payload)
        headers = await self._headers(name, sent, headers, task_id, due)
        data = self._encode(name, sent, time.time(), task_id, unique, options, headers, lane)
        due_ms = math.ceil(max(due, 0.0) * 1000)
        lock = None
        if unique is not None:
            lock = UniqueLock(broker.keys.unique(unique.key), unique.token, unique.ttl_ms)
        await self._declare(broker, lane)
        await broker.schedule(task_id, due_ms, data, lock)
        self._scheduled(due_ms)
        return self._handle(task_id, task, self._known(name, task, options))

    def _scheduled(self, due_ms: int) -> None:
        """A delayed task was added (the runner wakes its scheduler if it leads)."""

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
        if not isinstance(delayed_id, str):
            raise TypeError(f"delayed_id must be a str, got {type(delayed_id).__name__}")
        broker = self._open_broker()
        lock = None
        data = await broker.delayed_message(delayed_id)
        if data is not None:
            try:
                message = decode_message(delayed_id, [b"payload", data])
            except MessageDecodeError:
                message = None
            if message is not None and message.unique_key and message.unique_token:
                lock = (broker.keys.unique(message.unique_key), message.unique_token)
        return await broker.cancel_delayed(delayed_id, lock)

    async def delayed_tasks(self, count: int = 50, offset: int = 0) -> list[DelayedTask]:
        """The tasks waiting in the delayed set, soonest due first (one page).

        Args:
            count: The most tasks to return.
            offset: How many of the soonest to skip.

        Returns:
            Up to ``count`` [``DelayedTask``][trunner.DelayedTask]s; one whose message
            cannot be read is listed with its ``problem``. Cancel one with
            ``handle(task.id).cancel()``.
        """
        return await list_delayed(self._open_broker(), count, offset)

    async def cron_entries(self) -> list[CronEntry]:
        """The group's cron schedules, with when each last fired and fires next.

        The schedules come from this producer's registry (``open_client(tasks=...)``);
        the last tick fired of each, from Redis. Names Redis holds a last tick of that the
        registry does not know are listed after, without expression or next tick.

        Returns:
            One [``CronEntry``][trunner.CronEntry] per schedule.
        """
        return await cron_entries(self._open_broker(), self._registry)

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
        registry = self._registry
        schedules = {s.name: s for s in registry.crons} if registry is not None else {}
        if name not in schedules:
            where = "its registry" if registry is not None else "no registry (pass tasks=)"
            raise LookupError(f"no cron schedule {name!r}: this producer has {where}")
        schedule = schedules[name]
        return await self.dispatch(
            schedule.task_name, schedule.payload, headers=schedule.headers or None
        )

    async def waiting_age(self) -> float | None:
        """How long the oldest message not yet delivered has waited (seconds), from its
        stream id's time; None when none waits. The wait of the next pickup, at least."""
        return await waiting_age(self._open_broker())

    async def group_stats(self) -> GroupStats:
        """The group's statistics over the current window, computed now.

        Group-wide and read from Redis, the same from any instance (see
        [Metrics and capacity](metrics-and-capacity.md));
        [``Runner.statistics``][trunner.Runner.statistics] is one instance's own.
        Instances that have not reported for ``instance_ttl`` are not counted.

        Returns:
            The statistics, as the leader computes them at the end of a window.
        """
        return await read_stats(self._open_broker(), self._instance_ttl)

    async def stats(self) -> GroupStats:
        """Deprecated alias of :meth:`group_stats` (removed in the next release)."""
        warnings.warn(
            "stats() is deprecated, use group_stats(): the group's statistics, not to be "
            "confused with statistics(), this instance's",
            DeprecationWarning,
            stacklevel=2,
        )
        return await self.group_stats()

    async def instances(self) -> list[InstanceInfo]:
        """The group's live instances, and which one leads.

        An instance that has not reported for ``instance_ttl`` is not listed.

        Returns:
            One [``InstanceInfo``][trunner.InstanceInfo] per live instance, by id.
        """
        return await read_instances(self._open_broker(), self._instance_ttl)

    async def inspect(self) -> GroupInfo:
        """The group at a glance, as ``trunner inspect`` shows it.

        Returns:
            The queue, pending messages per consumer, delayed tasks, dead letters, live
            instances, leader, capacity decision and the leader's last statistics. A
            group that no runner created yet has no pending messages.
        """
        return await inspect_group(self._open_broker(), self._instance_ttl)

    async def pause(self) -> bool:
        """Pause the group: every runner of it stops fetching new messages.

        Running tasks go on and finish; acknowledgements, heartbeats and the leader's
        chores go on too (the delayed mover keeps moving due tasks into the stream, where
        they wait). A runner started while the group is paused stays paused. The pause
        lasts until [``resume``][trunner.Runner.resume]; see
        [Pausing a group](pause.md) for the guarantee and how fast it holds.

        Returns:
            ``True`` if this call paused the group, ``False`` if it was paused already
            (then nothing changes, and the runners are told again).
        """
        broker = self._open_broker()
        changed, _ = await broker.pause(wall_ms(), notices_for(broker.keys)[0])
        return changed

    async def resume(self) -> bool:
        """Resume a paused group: its runners fetch again at once.

        Returns:
            ``True`` if the group was paused, ``False`` if it was not (then nothing
            changes).
        """
        broker = self._open_broker()
        return await broker.resume(notices_for(broker.keys)[1])

    async def dead_letters(self, count: int = 100, start: str = "-") -> list[DeadLetter]:
        """Read the dead-letter stream, oldest first.

        Args:
            count: The most entries to return.
            start: The dead-letter entry id to start at (included); ``"-"``: the oldest.

        Returns:
            Up to ``count`` entries.
        """
        return await list_dead(self._open_broker(), count, start)

    async def dead_letters_newest(self, count: int = 100, end: str = "+") -> list[DeadLetter]:
        """Read the dead-letter stream, newest first: one page, whatever its length.

        Args:
            count: The most entries to return.
            end: The dead-letter entry id to start at, going back (included; ``"(id"``
                leaves it out, to read the page after one that ended at ``id``);
                ``"+"``: the newest.

        Returns:
            Up to ``count`` entries.
        """
        return await list_dead_newest(self._open_broker(), count, end)

    async def delete_dead_letters(
        self, ids: Sequence[str] | None = None, *, task: str | None = None
    ) -> int:
        """Delete some dead letters: those of ``ids``, or every one of the task ``task``.

        [``purge_dead_letters``][trunner.Runner.purge_dead_letters] deletes them all.

        Args:
            ids: Dead-letter entry ids (ids that are not entry ids are left out).
            task: A task name: delete every dead letter of that task (the whole stream
                is read, 500 entries per round trip).

        Returns:
            How many dead letters were deleted.

        Raises:
            ValueError: Neither or both of ``ids`` and ``task`` were given.
        """
        broker = self._open_broker()
        if (ids is None) == (task is None):
            raise ValueError("give either ids or task (purge_dead_letters() deletes all)")
        if task is not None:
            ids = await dead_ids_of_task(broker, task)
        assert ids is not None
        return await delete_dead(broker, ids)

    async def replay_dead_letters(
        self, ids: Sequence[str] | None = None, *, task: str | None = None
    ) -> ReplayResult:
        """Put dead letters back into the stream, as fresh first attempts.

        Each replayed entry leaves the dead-letter stream and enters the task stream in
        one script, with its task id and payload, and attempt 1. A dead letter of a unique
        task takes its key's lock again in the same script; if the key is locked (a task
        of that key is queued or running), it is not replayed and stays in the dead-letter
        stream. An entry whose message cannot be decoded stays too, and ids that are not
        in the dead-letter stream are skipped.

        Args:
            ids: The dead-letter entry ids to replay; ``None`` replays all of them (or,
                with ``task``, all of that task's).
            task: Replay only the dead letters of this task (with ``ids``: those of
                ``ids`` that are of it; without: every one of it, the whole stream read
                500 entries per round trip).

        Returns:
            A [``ReplayResult``][trunner.ReplayResult]: the new stream ids, and why each
            entry that was not replayed was not (it unpacks as ``(new ids, ids not
            replayed)``).
        """
        broker = self._open_broker()
        if task is not None:
            of_task = await dead_ids_of_task(broker, task)
            ids = of_task if ids is None else [i for i in ids if i in set(of_task)]
        return await replay_dead(broker, ids, self._max_payload_bytes, self._unique_for)

    def _unique_for(self, task_name: str) -> float | None:
        """The registry's ``unique_for`` of a task (None without one, or not unique)."""
        registry = self._registry
        if registry is None or task_name not in registry:
            return None
        return registry.get(task_name).unique_for

    async def purge_dead_letters(self) -> int:
        """Delete every dead-letter entry.

        Returns:
            How many entries there were.
        """
        return await self._open_broker().purge_dead()

    async def queue_length(self) -> int:
        """The number of entries in the group's stream (``XLEN``), over its
        [priority lanes](lanes.md).

        Waiting messages, plus delivered ones not yet acknowledged. With
        ``delete_on_ack=False``, acknowledged entries stay in the stream and are counted
        too.
        """
        return await self._open_broker().queue_length()

    async def lane_lengths(self) -> dict[str, int]:
        """[``queue_length``][trunner.Runner.queue_length] per [priority lane](lanes.md):
        the lanes this runner reads (a client: the default lane), then those the queue's
        other runners and clients named."""
        return await self._open_broker().lane_lengths()

    async def pending_count(self) -> int:
        """The number of messages delivered to a consumer and not yet acknowledged.

        Running, released, or abandoned by a dead instance.

        Raises:
            RedisCommandError: The consumer group does not exist yet (no runner of it
                has started).
        """
        return await self._open_broker().pending_count()

    async def delayed_count(self) -> int:
        """The number of tasks waiting in the delayed set (``ZCARD``).

        Delayed tasks ([``dispatch_delayed``][trunner.Runner.dispatch_delayed],
        [``schedule_for``][trunner.Runner.schedule_for]) and scheduled retries that have
        not been moved into the stream yet. Cron ticks are not counted: they are added to
        the stream directly.
        """
        return await self._open_broker().delayed_count()

    async def quarantined(self, count: int = 100, start: str = "-") -> list[QuarantineRecord]:
        """Up to ``count`` records of bad data the runners set aside, oldest first, from
        record id ``start`` (see [Bad data in Redis](reliability.md#bad-data-in-redis))."""
        return await list_quarantined(self._open_broker(), count, start)

    async def purge_quarantine(self) -> int:
        """Delete every quarantine record; return how many there were."""
        return await self._open_broker().purge_quarantine()

    async def quarantine_count(self) -> int:
        """Records in the group's quarantine stream."""
        return await self._open_broker().quarantine_count()

    async def dead_letter_count(self) -> int:
        """The number of entries in the group's dead-letter stream."""
        return await self._open_broker().dead_count()
