"""The header rules of a task message: what a dispatch may send, and what a runner reads.

Headers are a JSON object of strings (at most :data:`MAX_HEADERS` of them, at most
:data:`MAX_HEADERS_BYTES` bytes encoded, no empty name, each encodable as UTF-8); a message
without them has none, as every message written before they existed. The same check
(:func:`headers_error`) runs on both sides: what a dispatch writes, a runner reads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..errors import InvalidHeaders

__all__ = [
    "MAX_HEADERS",
    "MAX_HEADERS_BYTES",
    "NO_HEADERS",
    "check_headers",
    "headers_error",
    "read_only",
]

#: The most headers one message carries.
MAX_HEADERS = 64
#: The most bytes the headers of one message take, encoded as a JSON object
#: (``{"name":"value",...}``, UTF-8): room for W3C trace context, a tenant and the like.
MAX_HEADERS_BYTES = 8192
#: The headers of a message that has none (read-only, like every message's headers).
NO_HEADERS: Mapping[str, str] = MappingProxyType({})

#: The encoder that measures headers (the message's own: the size is that of the bytes sent).
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def read_only(headers: Mapping[str, str] | None) -> Mapping[str, str]:
    """``headers`` as a read-only mapping (the shared empty one when there are none)."""
    if not headers:
        return NO_HEADERS
    if isinstance(headers, MappingProxyType):
        return headers
    return MappingProxyType(dict(headers))


def check_headers(headers: object, task_name: str = "") -> dict[str, str] | None:
    """A copy of ``headers`` as a message carries them: None when there are none;
    :class:`InvalidHeaders` saying why if they cannot be sent (not a mapping of ``str`` to
    ``str``, an empty name, more than :data:`MAX_HEADERS` of them or more than
    :data:`MAX_HEADERS_BYTES` bytes encoded, or a lone surrogate)."""
    if headers is None:
        return None
    of = f" of task {task_name!r}" if task_name else ""
    if not isinstance(headers, Mapping):
        raise InvalidHeaders(
            f"headers{of} must be a mapping of str to str, got {type(headers).__name__}"
        )
    copy = dict(headers)
    if not copy:
        return None
    for name, value in copy.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidHeaders(
                f"headers{of} must map str to str, got {type(name).__name__} "
                f"{name!r:.80} -> {type(value).__name__} {value!r:.80}"
            )
    why = headers_error(copy)
    if why is not None:
        raise InvalidHeaders(f"headers{of}: {why}")
    return copy


def headers_error(headers: Any) -> str | None:
    """Why ``headers`` (read from JSON, or checked by :func:`check_headers`) are not what a
    message may carry, or None. The one check of both sides: what a dispatch writes, a
    runner reads."""
    if type(headers) is not dict:
        return f"'headers' must be a JSON object, got {type(headers).__name__}"
    if len(headers) > MAX_HEADERS:
        return f"{len(headers)} headers, more than {MAX_HEADERS}"
    for name, value in headers.items():
        if type(value) is not str:
            return f"the header {name!r:.80} is not a string: {type(value).__name__}"
        if not name:
            return "a header name is empty"
    try:
        size = len(_dumps(headers).encode("utf-8"))
    except UnicodeEncodeError as exc:
        return f"a header cannot be encoded as UTF-8 (a lone surrogate?): {exc}"
    if size > MAX_HEADERS_BYTES:
        return f"the headers take {size} bytes encoded, more than {MAX_HEADERS_BYTES}"
    return None
