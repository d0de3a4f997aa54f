"""The arguments ``open_client`` and ``open_admin`` share, checked before connecting."""

from __future__ import annotations

from .. import _validate as v
from .._wire.keys import Keys
from .._wire.names import check_name
from ..registry import TaskRegistry

__all__ = ["check_producer_args", "group_keys"]


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
