"""The leadership lease on one Redis key: acquire, renew, release, and fenced scripts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._wire.keys import aside_key_for, fence_key_for
from ..errors import LeadershipLost, RedisCommandError
from .scripts import SCRIPTS, Script
from .transports.base import Arg, Subscriber, Transport
from .transports.resp import as_str

__all__ = ["LeaseStore"]


class LeaseStore:
    """The lease on ``key``, its fence counter (:func:`~trunner._wire.keys.fence_key_for`) and
    the channel its holder announces a release on; every write checks the holder."""

    def __init__(self, transport: Transport, key: str) -> None:
        self.transport = transport
        self.key = key
        self.fence_key = fence_key_for(key)
        self.channel = f"{key}:released"

    async def acquire(self, owner: str, ttl_ms: int, now_ms: int) -> tuple[int, str]:
        """Take the lease if free: (the new fence number, or 0 when someone holds it;
        what was renamed aside because trunner cannot have written it, or '')."""
        reply = await self.transport.evalsha(
            SCRIPTS.lease_acquire,
            [
                self.key,
                self.fence_key,
                aside_key_for(self.key, now_ms),
                aside_key_for(self.fence_key, now_ms),
            ],
            [owner, ttl_ms],
        )
        return int(reply[0]), as_str(reply[1] or b"")

    async def renew(self, owner: str, ttl_ms: int) -> bool:
        reply = await self.transport.evalsha(SCRIPTS.lease_renew, [self.key], [owner, ttl_ms])
        return bool(reply)

    async def release(self, owner: str) -> bool:
        reply = await self.transport.evalsha(
            SCRIPTS.lease_release, [self.key], [owner, self.channel]
        )
        return bool(reply)

    async def holder(self) -> str | None:
        """The id the lease holds according to Redis, or None when it is free."""
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
