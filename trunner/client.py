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
from .redis_handle import RedisHandle
from .task import TaskRegistry

__all__ = ["Client", "open_client"]


class Client(Producer):
    """Dispatches tasks to a consumer group. Get one from :func:`open_client`."""

    def __init__(
        self, broker: Broker, registry: TaskRegistry | None, max_payload_bytes: int
    ) -> None:
        self._broker = broker
        self._registry = registry
        self._max_payload_bytes = max_payload_bytes
        self.keys = broker.keys
        #: A Redis handle batching the commands of concurrent tasks (see RedisHandle).
        self.redis: RedisHandle

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
    max_payload_bytes: int = 1024 * 1024,
    connect_timeout: float = 5.0,
    command_timeout: float = 10.0,
    max_connections: int = 20,
) -> AsyncIterator[Client]:
    """Open a producer-only client of ``consumer_group`` on the Redis at ``redis``.

    With ``tasks``, dispatching a task name the registry does not know raises
    :class:`~trunner.TaskNotFound`; without it any name is accepted.
    """
    keys = Keys(prefix, consumer_group)
    if tasks is not None and not isinstance(tasks, TaskRegistry):
        raise TypeError(f"tasks must be a TaskRegistry or None, got {type(tasks).__name__}")
    v.check_positive_int("max_payload_bytes", max_payload_bytes)
    v.check_positive_number("connect_timeout", connect_timeout)
    v.check_positive_number("command_timeout", command_timeout)
    v.check_positive_int("max_connections", max_connections)
    async with open_transport(
        redis,
        client_name=f"trunner-client:{consumer_group}",
        max_connections=max_connections,
        connect_timeout=connect_timeout,
        command_timeout=command_timeout,
    ) as transport:
        client = Client(Broker(transport, keys), tasks, max_payload_bytes)
        handle = client.redis = RedisHandle(transport)

        def crashed(what: str) -> Crashed:
            return Crashed(f"the client's Redis handle failed: {what}")

        try:
            async with run_in_background(handle.run, handle.close, crashed):
                yield client
        finally:
            client._broker = None
