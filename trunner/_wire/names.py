"""The names trunner writes into Redis, checked: group names and prefixes, task names, lane
names, and the ids of stream entries in lanes.

A key is built from these (``keys``); a name that cannot be sent, or that would break a
key's hash tag, is refused here, before it reaches Redis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import attrs

__all__ = [
    "DEFAULT_LANE",
    "LANE_MARK",
    "MAX_LANE_LENGTH",
    "check_lane",
    "check_name",
    "check_task_name",
    "entry_id",
    "is_lane",
    "is_lane_entry_id",
    "is_stream_id",
    "lane_suffix",
    "split_entry_id",
    "utf8_error",
]

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


def check_task_name(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator of a task's or a schedule's name: a non-empty str without
    surrounding whitespace that can be sent to Redis (else TypeError, ValueError)."""
    if not isinstance(value, str):
        raise TypeError(f"task {attr.name} must be a str, got {type(value).__name__}")
    if not value or value != value.strip():
        raise ValueError(
            f"task {attr.name} must be non-empty without surrounding spaces: {value!r}"
        )
    if (why := utf8_error(value)) is not None:
        raise ValueError(f"task {attr.name} cannot be sent to Redis: {why}")


#: The lane of a queue's first stream, ``<prefix>:{<queue>}:stream``: the one lane of a
#: queue that declares none (see [Priority lanes](lanes.md)).
DEFAULT_LANE = "default"
#: Between a stream id and its lane in the id of an entry of another lane than the default.
LANE_MARK = "@"
#: The most characters of a lane name.
MAX_LANE_LENGTH = 32
_LANE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def check_lane(value: object, field: str = "priority") -> str:
    """Validate a lane name: 1 to 32 ASCII letters, digits, ``_``, ``.`` or ``-``.

    Raises:
        TypeError: ``value`` is not a str.
        ValueError: ``value`` is empty, too long or holds another character.
    """
    if not isinstance(value, str):
        raise TypeError(f"{field} must be a lane name (a str), got {type(value).__name__}")
    if not is_lane(value):
        raise ValueError(
            f"{field} must be a lane name: 1 to {MAX_LANE_LENGTH} ASCII letters, digits, "
            f"'_', '.' or '-' (got {value!r:.60})"
        )
    return value


def is_lane(value: str) -> bool:
    """Whether ``value`` is a lane name (what :func:`check_lane` accepts)."""
    return 0 < len(value) <= MAX_LANE_LENGTH and _LANE_CHARS.issuperset(value)


def entry_id(stream_id: str, lane: str) -> str:
    """The id trunner gives the entry ``stream_id`` of ``lane``'s stream: the stream id
    itself in the default lane, else ``<stream id>@<lane>`` (the streams of two lanes give
    the same ids: the lane tells them apart). It is also the task id of a plain dispatch."""
    return stream_id + lane_suffix(lane)


#: The largest part of a stream id Redis takes (``<ms>`` and ``<seq>`` are unsigned 64-bit).
_MAX_ID_PART = 2**64 - 1


def _id_part(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 20 and int(text) <= _MAX_ID_PART


def is_stream_id(text: str) -> bool:
    """Whether ``text`` is a complete stream id, ``<ms>-<seq>`` (ASCII digits, each part
    at most 2^64 - 1: Redis refuses a larger one)."""
    ms, dash, seq = text.partition("-")
    return bool(dash) and _id_part(ms) and _id_part(seq)


def is_lane_entry_id(text: str) -> bool:
    """Whether ``text`` is an id :func:`entry_id` makes: ``<ms>-<seq>``, or
    ``<ms>-<seq>@<lane>``."""
    stream_id, mark, lane = text.partition(LANE_MARK)
    return is_stream_id(stream_id) and (not mark or is_lane(lane))


def lane_suffix(lane: str) -> str:
    """What :func:`entry_id` adds to the stream ids of ``lane``: ``""`` for the default
    lane, else ``@<lane>``."""
    return "" if lane == DEFAULT_LANE else f"{LANE_MARK}{lane}"


def split_entry_id(message_id: str) -> tuple[str, str]:
    """(lane, stream id) of an id made by :func:`entry_id`."""
    stream_id, mark, lane = message_id.partition(LANE_MARK)
    return (lane, stream_id) if mark else (DEFAULT_LANE, message_id)
