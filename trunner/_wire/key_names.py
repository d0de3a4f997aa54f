"""How trunner's key names are made: the Redis Cluster hash tag, a name in another key's
hash slot (a lease's fence counter, a key set aside), and the two families of a queue's
keys, the queue's own (shared by the groups reading it) and each group's, in
:class:`KeyFamilies`, the base of :class:`~trunner._wire.keys.Keys` (which names them all).
"""

from __future__ import annotations

__all__ = ["KeyFamilies", "aside_key_for", "fence_key_for", "hash_tag"]


def hash_tag(key: str) -> str | None:
    """The Redis Cluster hash tag of ``key`` (the part hashed), or None if it has none."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end <= start + 1:
        return None
    return key[start + 1 : end]


def _in_slot_of(key: str, suffix: str) -> str:
    """``key`` + ``suffix``, in ``key``'s hash slot (a key without a hash tag is hashed
    whole: it becomes the tag)."""
    return f"{key}{suffix}" if hash_tag(key) is not None else f"{{{key}}}{suffix}"


def fence_key_for(lease_key: str) -> str:
    """The fence counter of a leadership lease: in the lease key's hash slot, so that one
    script can use both."""
    return _in_slot_of(lease_key, ":fence")


def aside_key_for(key: str, at_ms: int) -> str:
    """The name a key holding what trunner cannot have written is renamed to, set aside
    (in the same hash slot, so the script that finds it can rename it)."""
    return _in_slot_of(key, f":bad:{at_ms}")


class KeyFamilies:
    """The two families of keys under one prefix, both in the queue's hash slot: the
    queue's, shared by every group reading it, and a group's own. The base of ``Keys``,
    which holds the fields and names every key."""

    __slots__ = ()

    prefix: str
    group: str
    queue: str

    def _qkey(self, name: str) -> str:
        """A key of the queue, shared by every group reading it."""
        return f"{self.prefix}:{{{self.queue}}}:{name}"

    def _key(self, name: str) -> str:
        """A key of the group's own."""
        if self.queue == self.group:
            return f"{self.prefix}:{{{self.queue}}}:{name}"
        return f"{self.prefix}:{{{self.queue}}}:group:{self.group}:{name}"
