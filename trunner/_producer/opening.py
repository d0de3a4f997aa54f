"""The arguments ``open_client``, ``open_admin`` and the asyncio and synchronous clients
share, checked before connecting."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import _validate as v
from .._redis import refuse_memory
from .._wire.envelope import DEFAULT_MAX_PAYLOAD_BYTES
from .._wire.keys import Keys
from .._wire.names import check_name
from ..middleware import Middleware, check_middleware
from ..registry import TaskRegistry

__all__ = ["ClientArgs", "check_producer_args", "group_keys"]


def group_keys(
    what: str, queue: str | None, consumer_group: str | None, group: str | None, prefix: str
) -> Keys:
    """The keys of ``group`` (default: the queue's own) reading ``queue`` (given as
    ``queue`` or, by its older name, ``consumer_group``), for ``what`` (the opener)."""
    if consumer_group is not None:
        if queue is not None:
            raise TypeError("give the queue once: as queue or as consumer_group")
        queue = consumer_group
    if queue is None:
        raise TypeError(f"{what}() needs the queue to dispatch to")
    check_name("queue", queue)
    if group is not None:
        check_name("group", group)
    return Keys(prefix, queue if group is None else group, queue)


def check_producer_args(
    tasks: TaskRegistry | None,
    max_payload_bytes: int,
    connect_timeout: float,
    command_timeout: float,
    max_connections: int,
    instance_ttl: float,
) -> None:
    """Raise ``TypeError`` or ``ValueError`` naming the first bad argument."""
    if tasks is not None and not isinstance(tasks, TaskRegistry):
        raise TypeError(f"tasks must be a TaskRegistry or None, got {type(tasks).__name__}")
    v.check_positive_int("max_payload_bytes", max_payload_bytes)
    v.check_positive_number("connect_timeout", connect_timeout)
    v.check_positive_number("command_timeout", command_timeout)
    v.check_positive_int("max_connections", max_connections)
    v.check_positive_number("instance_ttl", instance_ttl)


class ClientArgs:
    """The arguments of a client made outside Trio (``trunner.aio.Client``,
    ``trunner.sync.Client``): those of ``open_client``, checked when it is made."""

    def __init__(
        self,
        redis: str,
        queue: str | None = None,
        *,
        group: str | None = None,
        prefix: str = "trunner",
        tasks: TaskRegistry | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        connect_timeout: float = 5.0,
        command_timeout: float = 10.0,
        max_connections: int = 20,
        instance_ttl: float = 15.0,
        middleware: Iterable[Middleware] = (),
    ) -> None:
        refuse_memory(redis)
        what = f"{type(self).__module__}.{type(self).__qualname__}"
        self.keys: Keys = group_keys(what, queue, None, group, prefix)
        """The Redis key names of the group."""
        limits = (max_payload_bytes, connect_timeout, command_timeout, max_connections)
        check_producer_args(tasks, *limits, instance_ttl)
        self._url = redis
        #: ``open_client``'s keyword arguments, as given (the queue's name resolved).
        self._options: dict[str, Any] = {
            "queue": self.keys.queue, "group": group, "prefix": prefix, "tasks": tasks,
            "max_payload_bytes": max_payload_bytes, "connect_timeout": connect_timeout,
            "command_timeout": command_timeout, "max_connections": max_connections,
            "instance_ttl": instance_ttl, "middleware": check_middleware(middleware),
        }  # fmt: skip
        self._made()

    def _made(self) -> None:
        """Set up the client's own state, once its arguments are checked."""
