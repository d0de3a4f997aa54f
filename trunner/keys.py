"""Every Redis key name trunner uses, built in one place.

All keys of one consumer group carry the hash tag ``{<group>}`` so that a script may touch
several of them on Redis Cluster: ``<prefix>:{<group>}:stream`` and so on.
"""

from __future__ import annotations

import json

import attrs

__all__ = [
    "RELEASED_CONSUMER",
    "DelayedLock",
    "Keys",
    "check_name",
    "fence_key_for",
    "hash_tag",
    "utf8_error",
]

#: The consumer that owns messages released for immediate reclaim (see ``pool``/``fetcher``).
RELEASED_CONSUMER = "trunner:released"

_FORBIDDEN = frozenset("{}")


def utf8_error(value: str) -> str | None:
    """Why ``value`` cannot be sent to Redis as UTF-8, or None if it can.

    A Python str (and a JSON string, with its ``\\uXXXX`` escapes) may hold a lone
    surrogate, which UTF-8 cannot encode: such a string can never be a key or an argument.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"{value!r:.120} holds a lone surrogate ({exc.reason} at index {exc.start})"
    return None


def check_name(field: str, value: object) -> str:
    """Validate a group name or prefix: a non-empty string without hash-tag braces."""
    if not isinstance(value, str):
        raise TypeError(f"{field} must be a str, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{field} must not be empty")
    if (why := utf8_error(value)) is not None:
        raise ValueError(f"{field} cannot be sent to Redis: {why}")
    if _FORBIDDEN & set(value):
        raise ValueError(f"{field} must not contain '{{' or '}}' (got {value!r})")
    if any(ch.isspace() for ch in value):
        raise ValueError(f"{field} must not contain whitespace (got {value!r})")
    return value


def hash_tag(key: str) -> str | None:
    """The Redis Cluster hash tag of ``key`` (the part hashed), or None if it has none."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end <= start + 1:
        return None
    return key[start + 1 : end]


def fence_key_for(lease_key: str) -> str:
    """The fence counter of a leadership lease: in the lease key's hash slot, so that one
    script can use both."""
    return f"{lease_key}:fence" if hash_tag(lease_key) is not None else f"{{{lease_key}}}:fence"


@attrs.frozen
class Keys:
    """The key names of one consumer group under one prefix."""

    prefix: str
    group: str

    def __attrs_post_init__(self) -> None:
        check_name("prefix", self.prefix)
        check_name("consumer_group", self.group)

    def _key(self, name: str) -> str:
        return f"{self.prefix}:{{{self.group}}}:{name}"

    @property
    def stream(self) -> str:
        """The task stream, read by the consumer group."""
        return self._key("stream")

    @property
    def dead(self) -> str:
        """The dead-letter stream."""
        return self._key("dead")

    @property
    def delayed(self) -> str:
        """The sorted set of delayed task ids (delayed tasks and retries), scored by due ms."""
        return self._key("delayed")

    @property
    def delayed_messages(self) -> str:
        """The hash of delayed task id -> the message to enqueue when it is due."""
        return self._key("delayed:messages")

    @property
    def delayed_wake(self) -> str:
        """Pub/sub channel: a delayed task became the earliest one (payload: due ms)."""
        return self._key("delayed:wake")

    @property
    def cron(self) -> str:
        """The hash of cron schedule name -> the last tick fired (ms)."""
        return self._key("cron")

    @property
    def leader(self) -> str:
        """The leadership lease."""
        return self._key("leader")

    @property
    def fence(self) -> str:
        """The fence counter of the leadership lease (``leader + ':fence'``)."""
        return fence_key_for(self.leader)

    @property
    def delayed_unique(self) -> str:
        """The hash of unique delayed task id -> the lock it takes when due: a JSON array
        ``["<lock key>", "<token>", <ttl ms>]`` (see :class:`DelayedLock`)."""
        return self._key("delayed:unique")

    def unique(self, key: str) -> str:
        """The lock of a unique task's key."""
        return self._key(f"unique:{key}")

    @property
    def metrics(self) -> str:
        """The hash of timing totals since the leader last reset them."""
        return self._key("metrics")

    @property
    def instances(self) -> str:
        """The sorted set of live instance ids, scored by last-seen time (ms)."""
        return self._key("instances")

    @property
    def instances_info(self) -> str:
        """The hash of instance id -> its details (JSON)."""
        return self._key("instances:info")

    @property
    def capacity(self) -> str:
        """The hash of the per-instance capacity the leader decided (value, fence, version)."""
        return self._key("capacity")

    @property
    def stats(self) -> str:
        """The statistics of the last completed window (JSON), written by the leader."""
        return self._key("stats")

    @property
    def quarantine(self) -> str:
        """The stream of bad data set aside, with the reason (see ``trunner.quarantine``)."""
        return self._key("quarantine")

    def fixed(self) -> list[str]:
        """Every key of the group with a fixed name (unique locks are not listed)."""
        return [
            self.stream,
            self.dead,
            self.delayed,
            self.delayed_messages,
            self.delayed_unique,
            self.leader,
            self.fence,
            self.cron,
            self.metrics,
            self.instances,
            self.instances_info,
            self.capacity,
            self.stats,
            self.quarantine,
        ]


@attrs.frozen
class DelayedLock:
    """The lock a delayed unique task takes when it is due: the lock's key, the token of
    its dispatch, and its time-to-live (``unique_for``) in ms.

    Stored in :attr:`Keys.delayed_unique` as a JSON array ``["<key>", "<token>", <ttl>]``:
    :meth:`encode` writes that layout and :meth:`decode` reads it, nothing else does.
    """

    key: str
    token: str
    ttl_ms: int

    def encode(self) -> str:
        return json.dumps([self.key, self.token, self.ttl_ms])

    @classmethod
    def decode(cls, raw: bytes | str) -> DelayedLock:
        """Read a stored lock; ValueError saying why if it is not that layout."""
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if (
            not isinstance(value, list)
            or len(value) != 3
            or not isinstance(value[0], str)
            or not isinstance(value[1], str)
            or type(value[2]) is not int
            or value[2] <= 0
        ):
            raise ValueError(f"not [lock key, token, ttl ms]: {value!r:.200}")
        return cls(value[0], value[1], value[2])
