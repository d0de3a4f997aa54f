"""Dispatching: the producer that writes tasks to a group's queue and makes their handles,
the same for a runner and a producer-only client (whose public faces delegate to it)."""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._hooks import DispatchHooks
from .._redis import Broker
from .._task import Expiry, Task, dispatch_options
from .._waiting.calls import Calls, counting
from .._waiting.protocol import Known
from .._waiting.runtime import TRIO, Runtime
from .._waiting.waiters import Waiters
from .._wire.codec import untyped
from .._wire.decode import MessageDecodeError, decode_message
from .._wire.headers import check_headers
from .._wire.keys import UniqueLock
from .._wire.message import MessageOptions
from ..errors import InvalidHeaders, RunnerNotRunning, TaskAlreadyDispatched
from ..handles import TaskHandle
from ..middleware import DispatchInfo, Middleware, WorkflowInfo
from ..registry import TaskRegistry
from .build import (
    TaskRef,
    delay_seconds,
    encode,
    known_of,
    lane_of,
    payload_of,
    resolve,
    timestamp_of,
    unique_of,
)
from .lanes import LaneBook

if TYPE_CHECKING:
    import datetime

__all__ = ["Producer"]


@counting
class Producer:
    """Writes tasks to the group's queue and makes their handles; the source of those
    handles (their broker, waiters and what the registry knows).

    ``registry``: the tasks to check names (and unique keys) against, or None to accept
    any name; ``middleware``: whose ``on_dispatch`` hooks see each message; ``lanes``: a
    runner's declared lanes (see :class:`LaneBook`); ``on_scheduled``: told the due time
    (ms) of each delayed task added (a runner wakes its scheduler if it leads);
    ``runtime``: the event loop its handles wait on. The broker and the waiters are set
    while open. Its calls, its handles' and its admin's are counted in :meth:`_calls`.
    """

    def __init__(
        self,
        *,
        registry: TaskRegistry | None,
        max_payload_bytes: int,
        middleware: Sequence[Middleware] = (),
        lanes: Sequence[str] | None = None,
        on_scheduled: Callable[[int], None] | None = None,
        name: str = "Client",
        runtime: Runtime = TRIO,
    ) -> None:
        self._broker: Broker | None = None
        self._loop = runtime
        self._in_flight = Calls(runtime)
        self._waiters: Waiters | None = None
        hooks = DispatchHooks(middleware)
        self._dispatch_hooks = hooks if hooks else None
        self.registry = registry
        self.max_payload_bytes = max_payload_bytes
        self.lanes = LaneBook(registry, lanes)
        self._on_scheduled = on_scheduled
        self._name = name

    def open(self, broker: Broker, waiters: Waiters | None) -> None:
        """Dispatch through ``broker`` from now on, handles waiting through ``waiters``;
        the calls on these connections are counted anew (those of a previous opening, still
        under way, in the count its close awaits)."""
        self._broker, self._waiters = broker, waiters
        self._in_flight = Calls(self._loop)

    def close(self) -> None:
        """Refuse every call from now on (``RunnerNotRunning``)."""
        self._broker = self._waiters = None

    # -- what handles need of their producer (``trunner.handles.HandleSource``) ------------

    def _open_broker(self) -> Broker:
        if self._broker is None:
            raise RunnerNotRunning(f"{self._name} is not open")
        return self._broker

    def _open_waiters(self) -> Waiters:
        if self._broker is None or self._waiters is None:
            raise RunnerNotRunning(f"{self._name} is not open")
        return self._waiters

    def _runtime(self) -> Runtime:
        return self._loop

    def _calls(self) -> Calls:
        """The calls in flight on this producer's connections."""
        return self._in_flight

    def _group_name(self) -> str:
        return self._broker.group if self._broker is not None else "?"

    def _keep_result_of(self, task_name: str) -> float | None:
        """The ``keep_result`` of a task this producer's registry knows, or None."""
        if self.registry is None or task_name not in self.registry:
            return None
        return self.registry.get(task_name).keep_result

    def _knows_task(self, task_name: str) -> bool:
        """Whether this producer's registry knows the task ``task_name``."""
        return self.registry is not None and task_name in self.registry

    # -- dispatching -----------------------------------------------------------------------

    async def _headers(
        self,
        task_name: str,
        payload: Any,
        headers: Mapping[str, str] | None,
        task_id: str | None = None,
        due: float | None = None,
        workflow: WorkflowInfo | None = None,
    ) -> Mapping[str, str] | None:
        """The headers of one message: the dispatch's, as the dispatch hooks leave them
        (checked here, so that a bad one is blamed on its author: the call or a hook)."""
        hooks = self._dispatch_hooks
        if hooks is None:
            return headers
        given = check_headers(headers, task_name) or {}
        group = self._group_name()
        info = DispatchInfo(task_name, payload, given, group, task_id, due, workflow)
        after = await hooks.run(info)
        try:
            return check_headers(after, task_name)
        except InvalidHeaders as exc:
            raise InvalidHeaders(f"{exc} (as the on_dispatch hooks left them)") from None

    def _handle(self, task_id: str, task: Task | None, known: Known) -> TaskHandle[Any]:
        return TaskHandle(task_id, self, task.result_codec if task is not None else untyped, known)

    def handle(self, task_id: str, task: TaskRef | None = None) -> TaskHandle[Any]:
        """A handle on the task ``task_id`` (see ``Client.handle``)."""
        if not isinstance(task_id, str) or not task_id:
            raise TypeError(f"task_id must be a non-empty str, got {task_id!r}")
        found = resolve(self.registry, task)[1] if task is not None else None
        if found is None:
            return TaskHandle(str(task_id), self)
        known = Known(found.name, found.keep_result, "task")  # its dispatch may say otherwise
        return TaskHandle(str(task_id), self, found.result_codec, known)

    async def dispatch(
        self,
        task_name: TaskRef,
        payload: Any = None,
        *,
        keep_result: float | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the attempt timeout, not the call's
        expires: Expiry | None = None,
        headers: Mapping[str, str] | None = None,
        priority: str | None = None,
    ) -> TaskHandle[Any]:
        """Add one task to the group's stream (see ``Client.dispatch``)."""
        broker = self._open_broker()
        name, task = resolve(self.registry, task_name)
        options = dispatch_options(keep_result, timeout, expires)
        lane = lane_of(task, priority)
        await self.lanes.check(broker, lane, task)
        unique = unique_of(task, payload)
        sent = payload_of(task, payload)
        headers = await self._headers(name, sent, headers)
        limit = self.max_payload_bytes
        data = encode(name, sent, time.time(), limit, None, unique, options, headers, lane)
        await self.lanes.declare(broker, lane)
        known = known_of(name, task, options)
        if unique is None:
            return self._handle(await broker.enqueue(data, lane), task, known)
        (message_id,) = await broker.enqueue_unique(
            [(broker.keys.unique(unique.key), unique.token, data)], unique.ttl_ms, lane
        )
        if message_id is None:
            raise TaskAlreadyDispatched(name, [unique.key])
        return self._handle(message_id, task, known)

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
        """Add one task per payload, in order (see ``Client.dispatch_many``)."""
        broker = self._open_broker()
        name, task = resolve(self.registry, task_name)
        options = dispatch_options(keep_result, timeout, expires)
        lane = lane_of(task, priority)
        given = list(payloads)
        if not given:
            return []
        await self.lanes.check(broker, lane, task)
        now = time.time()
        items = []
        hooks = self._dispatch_hooks
        for payload in given:
            unique = unique_of(task, payload)
            sent = payload_of(task, payload)
            own = headers if hooks is None else await self._headers(name, sent, headers)
            data = encode(name, sent, now, self.max_payload_bytes, None, unique, options, own, lane)
            items.append((unique, data))
        await self.lanes.declare(broker, lane)
        known = known_of(name, task, options)
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
        """Schedule one task ``delay`` from now (see ``Client.dispatch_delayed``)."""
        seconds = delay_seconds(delay)
        options = dispatch_options(keep_result, timeout, expires)
        due = time.time() + seconds
        return await self._schedule(task_name, payload, due, options, headers, priority)

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
        """Schedule one task at ``when`` (see ``Client.schedule_for``)."""
        at = timestamp_of(when)
        options = dispatch_options(keep_result, timeout, expires)
        return await self._schedule(task_name, payload, at, options, headers, priority)

    async def _schedule(
        self,
        task_name: TaskRef,
        payload: Any,
        due: float,
        options: MessageOptions | None,
        headers: Mapping[str, str] | None,
        priority: str | None,
    ) -> TaskHandle[Any]:
        """Add one task to the delayed set, due at ``due`` (seconds since the epoch)."""
        broker = self._open_broker()
        name, task = resolve(self.registry, task_name)
        lane = lane_of(task, priority)
        await self.lanes.check(broker, lane, task)
        unique = unique_of(task, payload)
        task_id = secrets.token_hex(16)
        sent = payload_of(task, payload)
        headers = await self._headers(name, sent, headers, task_id, due)
        limit = self.max_payload_bytes
        data = encode(name, sent, time.time(), limit, task_id, unique, options, headers, lane)
        due_ms = math.ceil(max(due, 0.0) * 1000)
        lock = None
        if unique is not None:
            lock = UniqueLock(broker.keys.unique(unique.key), unique.token, unique.ttl_ms)
        await self.lanes.declare(broker, lane)
        await broker.schedule(task_id, due_ms, data, lock)
        if self._on_scheduled is not None:
            self._on_scheduled(due_ms)
        return self._handle(task_id, task, known_of(name, task, options))

    async def cancel_delayed(self, delayed_id: str) -> bool:
        """Remove a task that waits in the delayed set (see ``Client.cancel_delayed``)."""
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

    async def fire_cron(self, name: str) -> TaskHandle[Any]:
        """Dispatch a cron schedule's task now, once (see ``Client.fire_cron``)."""
        registry = self.registry
        schedules = {s.name: s for s in registry.crons} if registry is not None else {}
        if name not in schedules:
            where = "its registry" if registry is not None else "no registry (pass tasks=)"
            raise LookupError(f"no cron schedule {name!r}: this producer has {where}")
        schedule = schedules[name]
        return await self.dispatch(
            schedule.task_name, schedule.payload, headers=schedule.headers or None
        )
