"""The stored form of the lock a unique task takes when it enters the stream later than it
was dispatched: a delayed unique task, a cron tick of a unique task (see
:class:`UniqueLock`; its key is named by ``Keys.unique``).
"""

from __future__ import annotations

import json

import attrs

__all__ = ["UniqueLock"]


@attrs.frozen
class UniqueLock:
    """The lock a unique task takes: the lock's key, the token of its dispatch, and its
    time-to-live (``unique_for``) in ms. A delayed unique task and a cron tick of a unique
    task take it when they enter the stream.

    Stored in :attr:`Keys.delayed_unique` as a JSON array ``["<key>", "<token>", <ttl>]``:
    :meth:`encode` writes that layout and :meth:`decode` reads it, nothing else does.
    """

    key: str
    token: str
    ttl_ms: int

    def encode(self) -> str:
        """The stored form, ``["<key>", "<token>", <ttl>]``."""
        return json.dumps([self.key, self.token, self.ttl_ms])

    @classmethod
    def decode(cls, raw: bytes | str) -> UniqueLock:
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
