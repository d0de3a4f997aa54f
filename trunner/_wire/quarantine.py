"""The quarantine stream's records: the fields every writer stores for one bad item set
aside, and :class:`QuarantineRecord`, what a reader gets back (see
:mod:`trunner._engine.quarantine`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import attrs

__all__ = ["MAX_VALUE_BYTES", "QUARANTINE_MAXLEN", "QuarantineRecord", "record_fields"]

#: Approximate cap of the quarantine stream (its oldest records are trimmed).
QUARANTINE_MAXLEN = 10_000
#: The most bytes of a bad value a record keeps.
MAX_VALUE_BYTES = 4096


@attrs.frozen
class QuarantineRecord:
    """One bad item set aside: where it was read, which one, why, and what was done."""

    id: str
    """The record's id in the quarantine stream."""
    source: str
    """Where the item was read: ``delayed:unique``, ``metrics``, ``cron`` ..."""
    item: str
    """Which item: a task id, a hash field, a schedule's name ..."""
    reason: str
    """What is wrong with it."""
    action: str
    """What was done with it: ``removed`` (it is only here now), ``left in place`` ..."""
    value: bytes = attrs.field(repr=False)
    """The value as read (at most 4096 bytes)."""
    instance: str
    """The instance that set it aside."""
    at: float
    """When (seconds since the epoch)."""

    @classmethod
    def from_fields(cls, record_id: str, fields: Mapping[bytes, bytes]) -> QuarantineRecord:
        """A record as stored (missing or bad fields read as empty, never an error)."""

        def text(name: bytes) -> str:
            return fields.get(name, b"").decode("utf-8", "replace")

        try:
            at = float(fields.get(b"at", b"0")) / 1000
        except ValueError:
            at = 0.0
        return cls(
            id=record_id,
            source=text(b"source"),
            item=text(b"item"),
            reason=text(b"reason"),
            action=text(b"action"),
            value=fields.get(b"value", b""),
            instance=text(b"instance"),
            at=at,
        )


def record_fields(
    source: str, item: str, reason: str, value: bytes | str, action: str, instance: str
) -> list[tuple[str, bytes | str | int]]:
    """The fields of one quarantine record, as every writer stores them."""
    raw = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
    return [
        ("source", source),
        ("item", _text(item)),
        ("reason", _text(reason)),
        ("action", action),
        ("value", raw[:MAX_VALUE_BYTES]),
        ("instance", instance),
        ("at", int(time.time() * 1000)),
    ]


def _text(value: str) -> str:
    """``value`` as text Redis can store whatever it holds (lone surrogates escaped)."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")
