"""The pause notices and mark of a group: what ``pause.lua`` and ``resume.lua`` store and
send, and how a runner reads them (see :mod:`trunner._engine.pausing`).

A notice travels on the group's cancel channel beside the ids of cancelled tasks; the mark
(:attr:`Keys.paused <trunner._wire.keys.Keys.paused>`) holds when the group was paused.
"""

from __future__ import annotations

from .keys import Keys

__all__ = [
    "NOTICE",
    "PAUSE_NOTICE",
    "RESUME_NOTICE",
    "decode_mark",
    "is_notice",
    "notices_for",
]

#: The first byte of a notice on the cancel channel: 0xFF never starts UTF-8 text, and a
#: task id is UTF-8 text, so a notice is never taken for the id of a cancelled task.
NOTICE = b"\xff"
#: The notice of ``pause.lua``: the group was paused.
PAUSE_NOTICE = NOTICE + b"pause"
#: The notice of ``resume.lua``: the group was resumed.
RESUME_NOTICE = NOTICE + b"resume"


def notices_for(keys: Keys) -> tuple[bytes, bytes]:
    """The (pause, resume) notices of the group of ``keys``: :data:`PAUSE_NOTICE` and
    :data:`RESUME_NOTICE` for a group reading its own queue; for a group reading another
    queue, whose cancel channel the queue's other groups share, the same followed by ``:``
    and the group's name."""
    if keys.own_queue:
        return PAUSE_NOTICE, RESUME_NOTICE
    tail = b":" + keys.group.encode("utf-8")
    return PAUSE_NOTICE + tail, RESUME_NOTICE + tail


def is_notice(data: bytes) -> bool:
    """Whether a message of the cancel channel is a notice (not a task id)."""
    return data[:1] == NOTICE


def decode_mark(raw: bytes) -> int:
    """When the group was paused (ms since the epoch), from its stored pause mark.

    Raises:
        ValueError: The mark is not what ``pause.lua`` writes (decimal digits).
    """
    if not (raw.isdigit() and len(raw) <= 20):  # bytes.isdigit: ASCII digits only
        raise ValueError(f"not a time in ms (decimal digits): {raw[:100]!r}")
    return int(raw)
