"""The producer-only face: ``Client`` and ``open_client``, for processes that dispatch
tasks and run none."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

import trio

from ._admin_calls import AdminCalls
from ._producer.dispatch import Producer
from ._producer.dispatching import DispatchCalls
from ._producer.opening import check_producer_args, group_keys
from ._producer.scheduling import ScheduleCalls
from ._redis import Broker, open_transport
from ._util import connection_name, run_in_background
from ._waiting.waiters import Waiters
from ._wire.envelope import DEFAULT_MAX_PAYLOAD_BYTES
from ._wire.keys import Keys
from .admin import Admin
from .errors import Crashed
from .middleware import Middleware, check_middleware
from .redis_handle import RedisHandle
from .registry import TaskRegistry

__all__ = ["Client", "open_client"]


class Client(DispatchCalls, ScheduleCalls, AdminCalls):
    """A producer-only client of one consumer group.

    The object [``open_client``][trunner.open_client] yields, and a runner's
    [``client``][trunner.Runner.client]; do not create it yourself. It has every
    [dispatch method][dispatch-methods] of a runner
    ([``dispatch``][trunner.Runner.dispatch],
    [``dispatch_many``][trunner.Runner.dispatch_many],
    [``dispatch_delayed``][trunner.Runner.dispatch_delayed],
    [``schedule_for``][trunner.Runner.schedule_for],
    [``cancel_delayed``][trunner.Runner.cancel_delayed] ...), which behave the same, and
    its [``admin``][trunner.Client.admin] inspects and administers the group (the
    client's own admin methods, such as ``client.dead_letters()``, are the admin's, and
    deprecated). After the ``open_client`` block they raise
    [``RunnerNotRunning``][trunner.errors.RunnerNotRunning].
    """

    _called = "client"

    def __init__(self, producer: Producer, admin: Admin, redis: RedisHandle, keys: Keys) -> None:
        self._dispatcher = producer
        self._admin = admin
        self.keys = keys
        """The Redis key names of the group."""
        self.redis = redis
        """A [Redis handle][trunner.RedisHandle] batching the commands of concurrent Trio
        tasks, open for the duration of the ``open_client`` block."""

    def __repr__(self) -> str:
        return f"<Client group={self.consumer_group!r}>"

    @property
    def consumer_group(self) -> str:
        """The group this client dispatches to."""
        return self.keys.group

    @property
    def admin(self) -> Admin:
        """The [``Admin``][trunner.admin.Admin] of the client's group: its inspection and
        administration, over the client's connections."""
        return self._admin

    @property
    def _waiters(self) -> Waiters | None:
        return self._dispatcher._waiters

    @_waiters.setter
    def _waiters(self, waiters: Waiters | None) -> None:
        self._dispatcher._waiters = waiters

    async def _drain(self) -> None:
        """Refuse every call from now on (``RunnerNotRunning``), end the waits for outcomes
        (they raise it too), and return once the calls under way ended: how a synchronous
        client (``trunner.sync``) closes, before it leaves the ``open_client`` block."""
        calls, waiters = self._dispatcher._calls(), self._waiters
        self._dispatcher.close()
        self._admin._close()
        if waiters is not None:
            waiters.stop()
        await calls.ended()


class _Services:
    """What a client runs: its Redis handle and its result waiters."""

    def __init__(self, redis: RedisHandle, waiters: Waiters) -> None:
        self.redis = redis
        self.waiters = waiters

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.redis.run)
            await nursery.start(self.waiters.run)
            task_status.started()

    def stop(self) -> None:
        self.waiters.stop()
        self.redis.stop()


@asynccontextmanager
async def open_client(
    redis: str,
    queue: str | None = None,
    *,
    group: str | None = None,
    consumer_group: str | None = None,
    prefix: str = "trunner",
    tasks: TaskRegistry | None = None,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    connect_timeout: float = 5.0,
    command_timeout: float = 10.0,
    max_connections: int = 20,
    instance_ttl: float = 15.0,
    middleware: Iterable[Middleware] = (),
) -> AsyncIterator[Client]:
    """Open a producer-only client of ``queue``, for the duration of the block.

    For processes that dispatch tasks but run none. It opens connections only: no
    fetchers, no workers, no leadership, so it never moves delayed tasks or fires cron
    ticks. It does not create the consumer group.

    Args:
        redis: The Redis URL, as for [``open_runner``][trunner.open_runner].
        queue: The queue to dispatch to (a name): the consumer group's name, unless the
            group reads another queue ([``RunnerConfig.queue``][trunner.RunnerConfig.queue]).
        group: The consumer group whose side of things the client sees (a name): the
            results, statuses and cancellations of its handles, its statistics,
            instances, dead letters and pause. Default: the group of the queue's own name.
            See [Queues and fan-out](queues.md).
        consumer_group: The name this argument had before queues and groups were two
            things: the same as ``queue`` (give one of them).
        prefix: The key prefix. It must match the group's runners.
        tasks: With a registry, dispatching an unknown task name raises
            [``TaskNotFound``][trunner.TaskNotFound], and [unique tasks](unique-tasks.md)
            are dispatched as unique. Without one, any name is accepted, and every task
            is sent as a plain one.
        max_payload_bytes: The largest encoded message ``dispatch`` accepts (an int >=
            1; 1 MiB by default).
        connect_timeout: Redis must answer a ``PING`` within this time (> 0).
        command_timeout: A command without a reply for this long fails with
            [``RedisUnavailable``][trunner.RedisUnavailable] (> 0).
        max_connections: The size of the connection pool (an int >= 1).
        instance_ttl: The group's
            [``RunnerConfig.instance_ttl``][trunner.RunnerConfig.instance_ttl]: an instance
            that has not reported for this long is not listed by ``instances()`` nor
            counted by ``group_stats()`` (> 0).
        middleware: [Middleware][trunner.Middleware] whose ``on_dispatch`` hooks see
            each message the client dispatches, the first first (their
            ``around_attempt`` hooks are a runner's: a client runs no task). See
            [Middleware and headers](middleware.md).

    Yields:
        The [``Client``][trunner.Client].

    Raises:
        TypeError: A bad argument, before connecting.
        ValueError: A bad argument (an invalid URL or group name, an out-of-range
            number), before connecting.
        RedisUnavailable: Redis cannot be reached within ``connect_timeout``.
        Crashed: The client's Redis handle failed.

    An exception from the block leaves as itself. After the block, the client's methods
    raise [``RunnerNotRunning``][trunner.errors.RunnerNotRunning].
    """
    keys = group_keys("open_client", queue, consumer_group, group, prefix)
    check_producer_args(
        tasks, max_payload_bytes, connect_timeout, command_timeout, max_connections, instance_ttl
    )
    hooks = check_middleware(middleware)
    async with open_transport(
        redis,
        client_name=connection_name(f"trunner-client:{keys.queue}"),
        max_connections=max_connections,
        connect_timeout=connect_timeout,
        command_timeout=command_timeout,
    ) as transport:
        handle = RedisHandle(transport)
        broker = Broker(transport, keys)
        producer = Producer(registry=tasks, max_payload_bytes=max_payload_bytes, middleware=hooks)
        services = _Services(handle, Waiters(broker))
        producer.open(broker, services.waiters)
        admin = Admin(
            broker,
            registry=tasks,
            max_payload_bytes=max_payload_bytes,
            instance_ttl=instance_ttl,
            name="Client",
            calls=producer._calls(),
        )
        client = Client(producer, admin, handle, keys)

        def crashed(what: str) -> Crashed:
            return Crashed(f"the client's Redis handle failed: {what}")

        try:
            async with run_in_background(services.run, services.stop, crashed):
                yield client
        finally:
            producer.close()
            admin._close()
