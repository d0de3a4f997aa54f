"""Dispatching from synchronous code (Django, Flask, scripts, notebooks): :class:`Client`,
the Trio client run on a thread of its own, which every thread may call.

```python
with trunner.sync.Client("redis://localhost:6379/0", queue="images", tasks=tasks) as client:
    handle = client.dispatch(resize, ResizeRequest(path="a.png"))
    thumb = handle.result(timeout=10)
```

Nothing of the producer is written again here: each call runs the Trio client's
coroutine on the client's thread (``trio.from_thread``, see ``trunner._client_thread``) and
blocks until it ends, so the messages, keys, scripts, checks, errors and the waiting for
results are the Trio client's, over its native transport and its one subscription.
"""

from __future__ import annotations

import datetime
import functools
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, TypedDict, TypeVar, Unpack, overload

from . import admin as _admin
from ._client_thread import ClientThread
from ._producer.opening import ClientArgs
from ._public import fixup_module_metadata
from ._sync_handles import BlockingHandle, WorkflowHandle
from ._task import Expiry, Task
from ._workflows import Step
from .client import Client as TrioClient
from .errors import RunnerNotRunning
from .handles import TaskHandle as TrioHandle
from .status import CancelOutcome, TaskStatus

__all__ = ["Admin", "Client", "DispatchOptions", "TaskHandle", "WorkflowHandle"]

P = ParamSpec("P")
Payload = TypeVar("Payload")
R = TypeVar("R")
T = TypeVar("T")


class DispatchOptions(TypedDict, total=False):
    """The options of a dispatch, as [``dispatch``][trunner.Runner.dispatch] takes them."""

    keep_result: float | None
    timeout: float | None
    expires: Expiry | None
    headers: Mapping[str, str] | None
    priority: str | None


class TaskHandle(BlockingHandle[TrioHandle[Any]], Generic[R]):
    """A dispatched task seen from synchronous code: its id (this ``str``), and the
    [``TaskHandle``][trunner.TaskHandle] methods as blocking calls."""

    _kind = "TaskHandle"

    def result(self, timeout: float | None = None) -> R:
        """Wait for the outcome: as [``TaskHandle.result``][trunner.TaskHandle.result]."""
        return self._client._run(lambda client: self._current(client).result(timeout))

    def status(self) -> TaskStatus:
        """As [``TaskHandle.status``][trunner.TaskHandle.status]."""
        return self._client._run(lambda client: self._current(client).status())

    def cancel(self, *, wait: bool = False) -> CancelOutcome:
        """As [``TaskHandle.cancel``][trunner.TaskHandle.cancel]."""
        return self._client._run(lambda client: self._current(client).cancel(wait=wait))

    def _current(self, client: TrioClient) -> TrioHandle[R]:
        """The Trio handle to wait through, over the client's connections of now: made
        again (same id, codec and what is known) when the client connected anew since
        the handle was made (in a process forked from the one that made it, or after a
        close and an open), so that it never uses connections of another process or a
        closed one."""
        producer = client._dispatcher
        handle = self._handle
        if handle._producer is not producer:
            handle = TrioHandle(str(self), producer, handle._result_codec, handle._known)
            self._handle = handle
        return handle


class _Blocking(Generic[P, T]):
    """A method of [``Admin``][trunner.admin.Admin], blocking, on the admin of a sync client."""

    def __init__(self, method: Callable[Concatenate[_admin.Admin, P], Awaitable[T]]) -> None:
        self._method = method
        self.__doc__ = f"As [``Admin.{method.__name__}``][trunner.admin.Admin.{method.__name__}]."

    def __get__(self, admin: Admin, owner: type[Admin] | None = None) -> Callable[P, T]:
        def call(*args: P.args, **kwargs: P.kwargs) -> T:
            return admin._client._run(lambda client: self._method(client.admin, *args, **kwargs))

        return call


class Admin:
    """The admin of a synchronous client's group: the inspection and the pause of
    [``Admin``][trunner.admin.Admin], as blocking calls."""

    def __init__(self, client: Client) -> None:
        self._client = client

    queue_length = _Blocking(_admin.Admin.queue_length)
    lane_lengths = _Blocking(_admin.Admin.lane_lengths)
    pending_count = _Blocking(_admin.Admin.pending_count)
    delayed_count = _Blocking(_admin.Admin.delayed_count)
    dead_letter_count = _Blocking(_admin.Admin.dead_letter_count)
    waiting_age = _Blocking(_admin.Admin.waiting_age)
    group_stats = _Blocking(_admin.Admin.group_stats)
    instances = _Blocking(_admin.Admin.instances)
    inspect = _Blocking(_admin.Admin.inspect)
    pause = _Blocking(_admin.Admin.pause)
    resume = _Blocking(_admin.Admin.resume)
    dead_letters = _Blocking(_admin.Admin.dead_letters)
    delayed_tasks = _Blocking(_admin.Admin.delayed_tasks)
    cron_entries = _Blocking(_admin.Admin.cron_entries)
    workflow_count = _Blocking(_admin.Admin.workflow_count)
    workflows = _Blocking(_admin.Admin.workflows)
    workflow_steps = _Blocking(_admin.Admin.workflow_steps)


#: Why a closed client refuses calls.
_CLOSED = "this trunner.sync.Client is closed (open it again: client.open(), or with client:)"


class Client(ClientArgs):
    """A client of one consumer group for synchronous code: dispatches tasks, waits for
    their results, and through its [``admin``][trunner.sync.Client.admin] inspects and
    pauses the group. Safe to share between threads.

    It connects on [``open``][trunner.sync.Client.open] (or ``with client:``), or on its
    first call, in a thread of its own that runs the Trio client
    ([``Client``][trunner.Client]); each call blocks the calling thread until that
    client answered. Once [``close``][trunner.sync.Client.close]d, its calls raise
    ``RunnerNotRunning`` until it is opened again. A process made by ``fork`` connects
    anew on its first call (never through its parent's thread or connections).
    The arguments are those of [``open_client``][trunner.open_client] (``redis`` is any
    URL but ``memory://``: ``ValueError``); they are checked here, before connecting.
    """

    def _made(self) -> None:
        self._start_afresh()
        self._closed = False
        self._admin = Admin(self)
        _clients.add(self)

    def _start_afresh(self) -> None:
        """Start afresh, not open (in a new client, or in a forked child, where the parent's
        thread and lock are not this process's: the lock may be held by a thread that is
        not there, opening the client)."""
        #: Re-entrant: open() holds it around _running(), and a signal handler of the thread
        #: that opens the client may close it meanwhile (see _keep).
        self._lock = threading.RLock()
        self._thread: ClientThread | None = None

    def __repr__(self) -> str:
        return f"<trunner.sync.Client group={self.keys.group!r}>"

    @property
    def admin(self) -> Admin:
        """The group's admin, blocking: ``client.admin.pause()``, ``client.admin.inspect()``."""
        return self._admin

    def open(self) -> Client:
        """Connect now (else the first call does), or again after a close; return the
        client.

        Raises:
            RedisUnavailable: Redis cannot be reached within ``connect_timeout``.
        """
        with self._lock:
            self._closed = False
            self._running()
        return self

    def close(self) -> None:
        """Close the client: stop its thread and close its connections, letting the calls
        under way end first.

        From the start of the close, every call raises ``RunnerNotRunning`` at once, until
        the client is opened again, and so do the calls waiting for an outcome
        (``result()``, ``cancel(wait=True)``). The other calls under way (a dispatch, a
        ``status()``, an admin query) end before the connections close: once this
        returns, each of them has completed, or failed on its own. Closing a closed client
        does nothing; a close while another thread closes returns once that close ended.
        """
        with self._lock:
            thread = self._thread
            if thread is not None:
                thread.refuse_own_thread("closed")
            self._closed, self._thread = True, None
            if thread is not None:
                thread.stop()

    def __enter__(self) -> Client:
        return self.open()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _running(self) -> ClientThread:
        """The client's thread, opened now if it is not open yet."""
        thread = self._thread
        if thread is not None:
            return thread
        if self._closed:  # at once: never waiting for a close under way (it holds the lock)
            raise RunnerNotRunning(_CLOSED)
        with self._lock:
            if self._closed:
                raise RunnerNotRunning(_CLOSED)
            if self._thread is None:
                return self._keep(ClientThread(self._url, self._options))
            return self._thread

    def _keep(self, thread: ClientThread) -> ClientThread:
        """The thread just opened, kept; unless the client was closed while it opened (by
        a signal handler of the opening thread): then it is stopped."""
        if self._closed:
            thread.stop()
            raise RunnerNotRunning(_CLOSED)
        self._thread = thread
        return thread

    def _run(self, call: Callable[[TrioClient], Awaitable[T]]) -> T:
        """``call(client)`` on the client's thread, with its Trio client; blocking."""
        thread = self._running()
        return thread.run(functools.partial(call, thread.client))

    def _wrap(self, handle: TrioHandle[R]) -> TaskHandle[R]:
        return TaskHandle(handle, self)

    @overload
    def dispatch(
        self,
        task: Callable[[Payload], Awaitable[R]],
        payload: Payload,
        **options: Unpack[DispatchOptions],
    ) -> TaskHandle[R]: ...

    @overload
    def dispatch(
        self, task: Callable[[Payload], R], payload: Payload, **options: Unpack[DispatchOptions]
    ) -> TaskHandle[R]: ...

    @overload
    def dispatch(
        self, task: str | Task, payload: Any = None, **options: Unpack[DispatchOptions]
    ) -> TaskHandle[Any]: ...

    @overload
    def dispatch(
        self,
        task: Step[object, R],
        *,
        keep_result: float | None = None,
        fail_fast: bool = True,
        workflow_id: str | None = None,
        name: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> WorkflowHandle[R]: ...

    def dispatch(
        self, task: Any, payload: Any = None, **options: Any
    ) -> TaskHandle[Any] | WorkflowHandle[Any]:
        """As [``dispatch``][trunner.Runner.dispatch] (a task, or a workflow); a blocking
        call."""
        if isinstance(task, Step):
            if payload is not None:
                raise TypeError("a workflow takes no payload: its steps do")
            flow: Step[object, Any] = task
            return WorkflowHandle(self._run(lambda client: client.dispatch(flow, **options)), self)
        return self._wrap(self._run(lambda client: client.dispatch(task, payload, **options)))

    @overload
    def dispatch_many(
        self,
        task: Callable[[Payload], Awaitable[R]],
        payloads: Iterable[Payload],
        **options: Unpack[DispatchOptions],
    ) -> list[TaskHandle[R]]: ...

    @overload
    def dispatch_many(
        self,
        task: Callable[[Payload], R],
        payloads: Iterable[Payload],
        **options: Unpack[DispatchOptions],
    ) -> list[TaskHandle[R]]: ...

    @overload
    def dispatch_many(
        self, task: str | Task, payloads: Iterable[Any], **options: Unpack[DispatchOptions]
    ) -> list[TaskHandle[Any]]: ...

    def dispatch_many(
        self, task: Any, payloads: Iterable[Any], **options: Unpack[DispatchOptions]
    ) -> list[TaskHandle[Any]]:
        """As [``dispatch_many``][trunner.Runner.dispatch_many]; a blocking call."""
        handles = self._run(lambda client: client.dispatch_many(task, payloads, **options))
        return [self._wrap(handle) for handle in handles]

    @overload
    def dispatch_delayed(
        self,
        task: Callable[[Payload], Awaitable[R]],
        payload: Payload,
        delay: float | datetime.timedelta,
        **options: Unpack[DispatchOptions],
    ) -> TaskHandle[R]: ...

    @overload
    def dispatch_delayed(
        self,
        task: Callable[[Payload], R],
        payload: Payload,
        delay: float | datetime.timedelta,
        **options: Unpack[DispatchOptions],
    ) -> TaskHandle[R]: ...

    @overload
    def dispatch_delayed(
        self,
        task: str | Task,
        payload: Any,
        delay: float | datetime.timedelta,
        **options: Unpack[DispatchOptions],
    ) -> TaskHandle[Any]: ...

    def dispatch_delayed(
        self,
        task: Any,
        payload: Any,
        delay: float | datetime.timedelta,
        **options: Unpack[DispatchOptions],
    ) -> TaskHandle[Any]:
        """As [``dispatch_delayed``][trunner.Runner.dispatch_delayed]; a blocking call."""

        def run(client: TrioClient) -> Awaitable[TrioHandle[Any]]:
            return client.dispatch_delayed(task, payload, delay, **options)

        return self._wrap(self._run(run))

    @overload
    def schedule_for(
        self,
        task: Callable[[Payload], Awaitable[R]],
        payload: Payload,
        when: datetime.datetime,
        **options: Unpack[DispatchOptions],
    ) -> TaskHandle[R]: ...

    @overload
    def schedule_for(
        self,
        task: Callable[[Payload], R],
        payload: Payload,
        when: datetime.datetime,
        **options: Unpack[DispatchOptions],
    ) -> TaskHandle[R]: ...

    @overload
    def schedule_for(
        self,
        task: str | Task,
        payload: Any,
        when: datetime.datetime,
        **options: Unpack[DispatchOptions],
    ) -> TaskHandle[Any]: ...

    def schedule_for(
        self, task: Any, payload: Any, when: datetime.datetime, **options: Unpack[DispatchOptions]
    ) -> TaskHandle[Any]:
        """As [``schedule_for``][trunner.Runner.schedule_for]; a blocking call."""

        def run(client: TrioClient) -> Awaitable[TrioHandle[Any]]:
            return client.schedule_for(task, payload, when, **options)

        return self._wrap(self._run(run))

    def cancel_delayed(self, delayed_id: str) -> bool:
        """As [``cancel_delayed``][trunner.Runner.cancel_delayed]; a blocking call."""
        return self._run(lambda client: client.cancel_delayed(delayed_id))

    @overload
    def handle(self, task_id: str) -> TaskHandle[Any]: ...

    @overload
    def handle(self, task_id: str, task: Callable[..., Awaitable[R]]) -> TaskHandle[R]: ...

    @overload
    def handle(self, task_id: str, task: str | Task) -> TaskHandle[Any]: ...

    @overload
    def handle(self, task_id: str, task: Callable[..., R]) -> TaskHandle[R]: ...

    def handle(self, task_id: str, task: Any = None) -> TaskHandle[Any]:
        """As [``Client.handle``][trunner.Runner.handle]: a handle on a task dispatched
        from anywhere (no I/O)."""
        return self._wrap(self._running().client.handle(task_id, task))

    def workflow(self, workflow_id: str) -> WorkflowHandle[Any]:
        """As [``Client.workflow``][trunner.Runner.workflow]: a handle on a workflow
        dispatched from anywhere (no I/O)."""
        return WorkflowHandle(self._running().client.workflow(workflow_id), self)

    def cancel(self, task_id: str) -> CancelOutcome:
        """As [``Client.cancel``][trunner.Runner.cancel]; a blocking call."""
        return self._run(lambda client: client.cancel(task_id))


#: Every synchronous client of the process, started afresh in a forked child.
_clients: weakref.WeakSet[Client] = weakref.WeakSet()
#: The threads of the parent's clients, in a forked child: kept, never used, so that no
#: finalizer there closes or writes to what the parent still uses.
_parents_threads: list[ClientThread] = []


def _after_fork_in_child() -> None:
    for client in list(_clients):
        if client._thread is not None:
            _parents_threads.append(client._thread)
        client._start_afresh()


if hasattr(os, "register_at_fork"):  # not on Windows, which cannot fork
    os.register_at_fork(after_in_child=_after_fork_in_child)


fixup_module_metadata(__name__, globals())
