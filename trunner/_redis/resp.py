"""RESP, Redis's wire format: commands packed for the native transport, replies read.

Replies reach the broker raw, as RESP2 has them: bulk strings are bytes (or str, from
some clients), integers int, nil None, arrays lists; :func:`as_str` and
:func:`stream_entries` read the shapes every transport returns. Nothing here imports a
client library.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

__all__ = ["RawEntry", "as_str", "pack", "stream_entries"]


def pack(args: Sequence[object]) -> bytes:
    """One command in RESP: an array of bulk strings (task code may pass anything through
    the Redis handle, so every type is checked)."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, str):
            data = arg.encode()
        elif isinstance(arg, bool):
            raise TypeError("a Redis argument cannot be a bool; use 0/1 or a string")
        elif isinstance(arg, int):
            data = b"%d" % arg
        elif isinstance(arg, float):
            data = repr(arg).encode()
        elif isinstance(arg, memoryview | bytearray):
            data = bytes(arg)
        else:
            raise TypeError(
                f"a Redis argument must be str, bytes, int or float, not {type(arg).__name__}"
            )
        out.append(b"$%d\r\n" % len(data))
        out.append(data)
        out.append(b"\r\n")
    return b"".join(out)


def as_str(value: Any) -> str:
    """A bulk string of a reply (bytes, or already str) as text; anything else by ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)


@attrs.frozen
class RawEntry:
    """A stream entry as delivered: id, flat field list, and its delivery count."""

    message_id: str
    fields: list[bytes] | None
    deliveries: int = 1


def stream_entries(raw: Any, deliveries: int = 1) -> list[RawEntry]:
    """The entries of an XRANGE or XREADGROUP reply (``[[id, [field, value ...]] ...]``)."""
    return [RawEntry(as_str(e[0]), list(e[1]) if e[1] else None, deliveries) for e in raw or ()]
