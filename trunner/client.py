"""The producer-only face: dispatch and inspection for processes that run no workers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from . import _validate as v
from ._producer import Producer
from ._redis import Broker, open_transport
from ._util import run_in_background
from .errors import Crashed
from .keys import Keys
from .message import DEFAULT_MAX_PAYLOAD_BYTES
from .redis_handle import RedisHandle
from .task import TaskRegistry

__all__ = ["Client", "open_client"]


class Client(Producer):
    """Dispatches tasks to a consumer group. Get one from :func:`open_client`."""

    def __init__(
        self,
        broker: Broker,
        redis: RedisHandle,
        *,
        registry: TaskRegistry | None,
        max_payload_bytes: int,
        instance_ttl: float,
    ) -> None:
        super().__init__(
            registry=registry, max_payload_bytes=max_payload_bytes, instance_ttl=instance_ttl
        )
        self._broker = broker
        self.keys = broker.keys
        #: A Redis handle batching the commands of concurrent tasks (see RedisHandle).
        self.redis = redis

    @property
    def consumer_group(self) -> str:
        return self.keys.group


@asynccontextmanager
async def open_client(
    redis: str,
    consumer_group: str,
    *,
    prefix: str = "trunner",
    tasks: TaskRegistry | None = None,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    connect_timeout: float = 5.0,
    command_timeout: float = 10.0,
    max_connections: int = 20,
    instance_ttl: float = 15.0,
) -> AsyncIterator[Client]:
    """Open a producer-only client of ``consumer_group`` on the Redis at ``redis``.

    With ``tasks``, dispatching a task name the registry does not know raises
    :class:`~trunner.TaskNotFound`; without it any name is accepted. ``instance_ttl``: the
    group's ``RunnerConfig.instance_ttl``, for :meth:`~Client.instances` and statistics.
    """
    keys = Keys(prefix, consumer_group)
    if tasks is not None and not isinstance(tasks, TaskRegistry):
        raise TypeError(f"tasks must be a TaskRegistry or None, got {type(tasks).__name__}")
    v.check_positive_int("max_payload_bytes", max_payload_bytes)
    v.check_positive_number("connect_timeout", connect_timeout)
    v.check_positive_number("command_timeout", command_timeout)
    v.check_positive_int("max_connections", max_connections)
    v.check_positive_number("instance_ttl", instance_ttl)
    async with open_transport(
        redis,
        client_name=f"trunner-client:{consumer_group}",
        max_connections=max_connections,
        connect_timeout=connect_timeout,
        command_timeout=command_timeout,
    ) as transport:
        handle = RedisHandle(transport)
        client = Client(
            Broker(transport, keys),
            handle,
            registry=tasks,
            max_payload_bytes=max_payload_bytes,
            instance_ttl=instance_ttl,
        )

        def crashed(what: str) -> Crashed:
            return Crashed(f"the client's Redis handle failed: {what}")

        try:
            async with run_in_background(handle.run, handle.stop, crashed):
                yield client
        finally:
            client._broker = None
