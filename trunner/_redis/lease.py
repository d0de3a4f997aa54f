"""The leadership lease on one Redis key: acquire, renew, release, and fenced scripts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import LeadershipLost, RedisCommandError
from .resp import as_str
from .scripts import SCRIPTS, Script
from .transport import Arg, Subscriber, Transport

__all__ = ["LeaseStore", "fence_key_for", "hash_tag"]


def hash_tag(key: str) -> str | None:
    """The Redis Cluster hash tag of ``key`` (the part hashed), or None if it has none."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end <= start + 1:
        return None
    return key[start + 1 : end]


def fence_key_for(key: str) -> str:
    """The fence counter's key: in the lease key's hash slot, so one script can use both."""
    return f"{key}:fence" if hash_tag(key) is not None else f"{{{key}}}:fence"


class LeaseStore:
    def __init__(self, transport: Transport, key: str) -> None:
        self.transport = transport
        self.key = key
        self.fence_key = fence_key_for(key)
        self.channel = f"{key}:released"

    async def acquire(self, owner: str, ttl_ms: int) -> int:
        """Take the lease if free: the new fence number, or 0 when someone holds it."""
        reply = await self.transport.evalsha(
            SCRIPTS.lease_acquire, [self.key, self.fence_key], [owner, ttl_ms]
        )
        return int(reply)

    async def renew(self, owner: str, ttl_ms: int) -> bool:
        reply = await self.transport.evalsha(SCRIPTS.lease_renew, [self.key], [owner, ttl_ms])
        return bool(reply)

    async def release(self, owner: str) -> bool:
        reply = await self.transport.evalsha(
            SCRIPTS.lease_release, [self.key], [owner, self.channel]
        )
        return bool(reply)

    async def holder(self) -> str | None:
        reply = await self.transport.execute("GET", self.key)
        return None if reply is None else as_str(reply)

    async def fenced(
        self, script: Script, owner: str, keys: Sequence[str], args: Sequence[Arg]
    ) -> Any:
        """Run a fenced script (see ``fenced_script``) as leader ``owner``.

        Raises :class:`LeadershipLost` when the lease is not held by ``owner``: the script
        wrote nothing.
        """
        try:
            return await self.transport.evalsha(script, [self.key, *keys], [owner, *args])
        except RedisCommandError as exc:
            if "FENCED" in str(exc):
                raise LeadershipLost(f"not the leader of {self.key!r}: {owner!r}") from exc
            raise

    def open_subscriber(self) -> Subscriber:
        return self.transport.open_subscriber(self.channel)
