"""Finding the consumer groups on a Redis: what ``trunner dashboard`` shows without
``--group``, and ``trunner inspect`` without a group lists.

There is no registry of queues: each queue has its registry of groups,
``<prefix>:{<queue>}:groups`` (a set, written by the script that creates a group, when one
of its runners starts). The registries are found by ``SCAN`` with ``MATCH
<prefix>:{*}:groups`` (on Cluster, on every primary), then read (``SMEMBERS``, one
pipeline). ``SCAN`` looks at every key of the database, matching or not, ``COUNT`` at a
time: its cost is the size of the keyspace, bounded by ``SCAN_COUNT * MAX_SCAN_CALLS``
keys per node (see [The dashboard](dashboard.md#finding-the-groups)).
A group whose runners never started (a queue only dispatched to) is not found.
"""

from __future__ import annotations

import re

import attrs

from ._redis import Transport, as_str, open_transport
from ._util import connection_name
from ._wire.keys import Keys, hash_tag
from ._wire.names import check_name
from .errors import RedisCommandError

__all__ = ["FoundGroup", "GroupsFound", "discover_groups", "find_groups"]

#: Keys Redis looks at per ``SCAN`` call.
SCAN_COUNT = 1000
#: ``SCAN`` calls at most per node, per discovery: 1000 calls of 1000, a million keys.
MAX_SCAN_CALLS = 1000
#: Registries read per pipeline.
READ_BATCH = 100


@attrs.frozen(order=True)
class FoundGroup:
    """A consumer group found on Redis, and the queue it reads."""

    queue: str
    """The queue (stream) the group reads: its own name, or another's (fan-out)."""
    group: str
    """The consumer group."""

    @property
    def own_queue(self) -> bool:
        """Whether the group reads the queue of its own name."""
        return self.queue == self.group


@attrs.frozen
class GroupsFound:
    """What [``discover_groups``][trunner.admin.discover_groups] found."""

    groups: list[FoundGroup]
    """The groups, sorted by queue, then group."""
    complete: bool
    """False when the scan stopped at its bound (1000 calls per node): some groups may
    be missing (name them)."""
    ignored: list[str] = attrs.field(factory=list)
    """Why some registries or members were not read as groups (written by something else:
    not a set, not a name)."""


def _glob_escape(text: str) -> str:
    return re.sub(r"([\\*?\[\]])", r"\\\1", text)


def _queue_of_registry(key: str, prefix: str) -> str | None:
    """The queue whose registry of groups ``key`` is, or None if it is not one (a key the
    glob matched but trunner does not name so: ``<prefix>:{q}:unique:x:groups``)."""
    queue = hash_tag(key)
    if queue is None:
        return None
    try:
        keys = Keys(prefix, queue)
    except (TypeError, ValueError):
        return None
    return queue if keys.groups == key else None


async def find_groups(
    transport: Transport,
    prefix: str = "trunner",
    *,
    scan_count: int = SCAN_COUNT,
    max_scan_calls: int = MAX_SCAN_CALLS,
) -> GroupsFound:
    """The groups registered under ``prefix`` on the Redis of ``transport``."""
    check_name("prefix", prefix)
    names, complete = await transport.scan_keys(
        f"{_glob_escape(prefix)}:{{*}}:groups", count=scan_count, max_calls=max_scan_calls
    )
    queues = sorted(
        {q for q in (_queue_of_registry(as_str(n), prefix) for n in names) if q is not None}
    )
    found: set[FoundGroup] = set()
    ignored: list[str] = []
    for start in range(0, len(queues), READ_BATCH):
        batch = queues[start : start + READ_BATCH]
        replies = await transport.pipeline([("SMEMBERS", Keys(prefix, q).groups) for q in batch])
        for queue, reply in zip(batch, replies, strict=True):
            if isinstance(reply, RedisCommandError):  # WRONGTYPE: not trunner's
                ignored.append(f"{Keys(prefix, queue).groups}: {reply}")
                continue
            if isinstance(reply, BaseException):
                raise reply
            for member in reply:
                group = as_str(member)
                try:
                    check_name("group", group)
                except (TypeError, ValueError) as exc:
                    ignored.append(f"{Keys(prefix, queue).groups}: {exc}")
                    continue
                found.add(FoundGroup(queue, group))
    return GroupsFound(sorted(found), complete, ignored)


async def discover_groups(
    redis: str,
    *,
    prefix: str = "trunner",
    connect_timeout: float = 5.0,
    command_timeout: float = 10.0,
) -> GroupsFound:
    """The consumer groups on the Redis at ``redis`` under ``prefix``, with the queue each
    reads: those registered by their runners (a group is registered when its first runner
    starts, and forgotten by its leader once it is no longer on the queue's stream).

    Cost: ``SCAN`` over the whole database (on Cluster, of every primary), at most
    1000 calls of ``COUNT 1000`` per node (a million keys); then one ``SMEMBERS``
    per queue found. ``complete`` says whether the scan ended before its bound.

    Args:
        redis: The Redis URL, as for [``open_client``][trunner.open_client].
        prefix: The key prefix of the groups' runners.
        connect_timeout: Redis must answer a ``PING`` within this time.
        command_timeout: A command without a reply for this long fails.

    Returns:
        The groups found, sorted by queue, then group.

    Raises:
        RedisUnavailable: Redis cannot be reached.
        RedisCommandError: Redis refused ``SCAN`` (an ACL without it, for instance).
    """
    check_name("prefix", prefix)
    async with open_transport(
        redis,
        client_name=connection_name("trunner-discovery"),
        max_connections=2,
        connect_timeout=connect_timeout,
        command_timeout=command_timeout,
    ) as transport:
        return await find_groups(transport, prefix)
