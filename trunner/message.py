"""The wire format of a task message, and its JSON codec.

A stream entry has one field, ``payload``, holding a UTF-8 JSON object::

    {"task": "send_email", "payload": {...}, "attempt": 1, "enqueued_at": 1764412800.123}

``attempt`` is the attempt the next execution of this entry is (1 for a fresh dispatch; a
retry re-enqueues with ``attempt + 1``). ``id`` is present when the task was retried or
dispatched delayed: it is the task's stable id. Without it the task id is the entry's own
stream id. A unique task adds ``unique_key``, ``unique_token`` and ``unique_for`` (its lock's
time-to-live, seconds). A dispatch may add its options (:class:`MessageOptions`):
``keep_result`` and ``timeout`` (seconds), ``expires`` (seconds since the epoch), and its
``headers``: a JSON object of strings (at most :data:`MAX_HEADERS` of them, at most
:data:`MAX_HEADERS_BYTES` bytes encoded; a message without them has none, as every message
written before they existed). Unknown fields are ignored, so later versions can add fields.

The strings that become Redis keys or arguments (``task``, ``id``, ``unique_key``,
``unique_token``) must be encodable as UTF-8: JSON can carry a lone surrogate (``"\\ud800"``),
UTF-8 cannot. :func:`encode_message` refuses them; a stored entry holding one is
undecodable. Inside ``payload`` they are fine (they travel as JSON escapes).

A retry or a replay writes the stored ``payload`` back verbatim, and the same headers
(:func:`reencode_for_retry`):
what the task is given never changes between attempts, even for JSON that Python reads but
would not write (``1e400``), and the message grows by at most :data:`MESSAGE_GROWTH` bytes,
which the read-side size check allows for.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs

from ._wire.names import DEFAULT_LANE, check_lane, split_entry_id, utf8_error
from ._wire.payload import Problem, find_problem, is_plain
from .errors import InvalidHeaders, InvalidMessage, InvalidPayload, PayloadTooLarge

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "DEFAULT_UNIQUE_FOR",
    "MAX_HEADERS",
    "MAX_HEADERS_BYTES",
    "MESSAGE_GROWTH",
    "NO_HEADERS",
    "NO_OPTIONS",
    "NO_SIZE_LIMIT",
    "PAYLOAD_FIELD",
    "MessageDecodeError",
    "MessageOptions",
    "TaskMessage",
    "addressed_group",
    "check_headers",
    "decode_message",
    "encode_message",
    "message_growth",
]

PAYLOAD_FIELD = b"payload"
#: The default of ``max_payload_bytes`` (``RunnerConfig``, ``open_client``, eager mode).
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
#: ``max_bytes`` that never refuses: re-encoding a message that came from Redis (a retry,
#: a replay) must not fail on its size.
NO_SIZE_LIMIT = 1 << 62
#: How many bytes the message of a retry or a replay may add to the message dispatched: the
#: task id (``,"id":"<stream id>[@<lane>]"``, at most 82 bytes), a longer attempt number (at
#: most 19 more digits) and a longer ``enqueued_at`` (at most 16 more characters), 117 in
#: all, rounded up. A runner reads entries up to ``max_payload_bytes + MESSAGE_GROWTH``
#: bytes, so that a message dispatched under the limit survives all of its retries, replays
#: and reclaims.
MESSAGE_GROWTH = 128


def message_growth(group: str) -> int:
    """How many bytes a group's own message (a retry, a replay, a cron tick) may add to the
    message dispatched: :data:`MESSAGE_GROWTH`, and its ``group`` field."""
    return MESSAGE_GROWTH + len(_dumps({"group": group}).encode("utf-8")) - 1


def addressed_group(raw: bytes) -> str | None:
    """The ``group`` a stored message names (see :attr:`TaskMessage.group`), read whatever
    else is wrong with it; None when it names none (or is no JSON object)."""
    try:
        group = _body(raw).get("group")
    except ValueError:
        return None
    return group if isinstance(group, str) and group else None


#: The lock time-to-live (seconds) of a unique message that does not say its own
#: ``unique_for`` (written before the field existed), when it is replayed from the dead
#: letters by a client that does not know the task.
DEFAULT_UNIQUE_FOR = 3600.0
#: The most headers one message carries.
MAX_HEADERS = 64
#: The most bytes the headers of one message take, encoded as a JSON object
#: (``{"name":"value",...}``, UTF-8): room for W3C trace context, a tenant and the like.
MAX_HEADERS_BYTES = 8192
#: The headers of a message that has none (read-only, like every message's headers).
NO_HEADERS: Mapping[str, str] = MappingProxyType({})

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
# For strings holding lone surrogates (valid in Python and in JSON escapes, not in UTF-8).
_dumps_ascii = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (the standard has no NaN or Infinity)")


#: Strict JSON: NaN and Infinity, which the encoder refuses, are refused here too.
_decoder = json.JSONDecoder(parse_constant=_no_constant)
_loads = _decoder.decode
#: One JSON value at an index: ``(value, end)`` (no whitespace skipped; StopIteration when
#: there is no value there). The fast path of :func:`decode_message` uses it directly.
_scan_once: Callable[[str, int], tuple[Any, int]] = _decoder.scan_once  # type: ignore[attr-defined]


#: Fields of a message that become Redis keys or arguments.
_KEY_FIELDS = ("task", "id", "unique_key", "unique_token")


@attrs.frozen
class MessageOptions:
    """What one dispatch asked for, beyond its task's defaults (None: the task's)."""

    keep_result: float | None = None
    """Keep the outcome this many seconds after the task finished."""
    timeout: float | None = None
    """Each attempt may run this many seconds; then it fails with ``TaskTimeout``."""
    expires: float | None = None
    """Not started by then (seconds since the epoch): dropped, with the outcome ``expired``."""

    def to_body(self, body: dict[str, Any]) -> None:
        """Add the options that are set to a message body."""
        if self.keep_result is not None:
            body["keep_result"] = self.keep_result
        if self.timeout is not None:
            body["timeout"] = self.timeout
        if self.expires is not None:
            body["expires"] = self.expires

    @staticmethod
    def from_body(body: Mapping[str, Any]) -> MessageOptions | None:
        """The options a message body holds; None when it holds none. ValueError saying
        which is bad when one is not a finite number (or, for durations, not > 0)."""
        keep, timeout, expires = body.get("keep_result"), body.get("timeout"), body.get("expires")
        if keep is None and timeout is None and expires is None:
            return None
        for name, value in (("keep_result", keep), ("timeout", timeout)):
            if value is not None and ((s := _seconds(value)) is None or s <= 0):
                raise ValueError(f"'{name}' must be a number of seconds > 0, got {value!r:.50}")
        if expires is not None and _seconds(expires) is None:
            raise ValueError(f"'expires' must be seconds since the epoch, got {expires!r:.50}")
        return MessageOptions(keep, timeout, expires)


#: The options of a message that has none.
NO_OPTIONS = MessageOptions()


def _read_only(headers: Mapping[str, str] | None) -> Mapping[str, str]:
    """``headers`` as a read-only mapping (the shared empty one when there are none)."""
    if not headers:
        return NO_HEADERS
    if isinstance(headers, MappingProxyType):
        return headers
    return MappingProxyType(dict(headers))


@attrs.frozen
class TaskMessage:
    """One delivery of a task, as task code and the failed-task handler see it.

    Task code gets it from [``current_message``][trunner.current_message]; the
    failed-task handler gets it as its first argument.
    """

    message_id: str
    """The stream entry id of this delivery. It is different for each retry."""
    task_name: str
    """The task name; ``""`` when the entry could not be decoded."""
    payload: Any
    """The decoded payload given to the task's action; ``None`` when undecodable."""
    attempt: int
    """Which attempt this is, from 1: a failed attempt's retry is the next one. A run lost
    without an outcome (its worker crashed) is run again as the same attempt: see
    ``deliveries``."""
    enqueued_at: float
    """When the task was first dispatched, in seconds since the epoch: for a delayed task,
    when it was scheduled; for a cron task, the tick. ``0.0`` when undecodable."""
    task_id: str
    """The task's stable id across retries: the first entry's stream id for ``dispatch``;
    the id returned by ``dispatch_delayed`` / ``schedule_for``; ``cron:<schedule
    name>:<tick in ms>`` for a cron tick."""
    deliveries: int = 1
    """How many times this stream entry has been delivered to a consumer: more than 1
    when earlier runs of this attempt were lost without an outcome (their worker crashed,
    was killed, or stalled past ``reclaim_delay``), bounded by the task's
    ``max_redeliveries``."""
    raw: bytes = attrs.field(default=b"", repr=False)
    """The entry's ``payload`` field exactly as stored (not shown in ``repr``)."""
    unique_key: str | None = None
    """For a [unique task](unique-tasks.md): its key
    ([``Task.key_for(payload)``][trunner.Task.key_for]), whose lock is released when the
    task finishes. ``None`` otherwise."""
    unique_token: str | None = attrs.field(default=None, repr=False)
    """For a unique task: the token its lock holds (not shown in ``repr``). ``None``
    otherwise."""
    options: MessageOptions = attrs.field(default=NO_OPTIONS, repr=False)
    """What the dispatch asked for beyond the task's defaults (``keep_result``,
    ``timeout``, ``expires``)."""
    headers: Mapping[str, str] = attrs.field(default=NO_HEADERS, converter=_read_only, repr=False)
    """The message's headers (``str`` to ``str``, read-only), as the dispatch and its
    dispatch hooks set them (see [Middleware and headers](middleware.md)); the same for
    every attempt of the task. Empty for a message dispatched without any."""

    group: str | None = attrs.field(default=None, repr=False)
    """The one consumer group this message is for: set on what a group sends itself (its
    retries, its replayed dead letters, its cron ticks), which the other groups reading
    the same queue skip. ``None`` for a dispatch: every group reading the queue runs it
    (see [Queues and fan-out](queues.md))."""

    lane: str = attrs.field(default=DEFAULT_LANE, repr=False)
    """The priority lane of this delivery: the lane whose stream it was read from, which
    its id names (``"default"`` for a task dispatched without a priority). Its retries and
    deferrals go back to it (see [Priority lanes](lanes.md))."""

    def with_attempt(self, attempt: int) -> TaskMessage:
        """A copy with another ``attempt``."""
        return attrs.evolve(self, attempt=attempt)


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
    why = _headers_error(copy)
    if why is not None:
        raise InvalidHeaders(f"headers{of}: {why}")
    return copy


def _headers_error(headers: Any) -> str | None:
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


def encode_message(
    task_name: str,
    payload: Any,
    *,
    attempt: int = 1,
    enqueued_at: float,
    task_id: str | None = None,
    unique_key: str | None = None,
    unique_token: str | None = None,
    unique_for: float | None = None,
    options: MessageOptions | None = None,
    headers: Mapping[str, str] | None = None,
    group: str | None = None,
    max_bytes: int,
    rate_reserved: bool = False,
    lane: str = DEFAULT_LANE,
) -> bytes:
    """Encode one task message; raise :class:`InvalidPayload` if it cannot be sent
    (:class:`InvalidHeaders` for its headers: see :func:`check_headers`).

    ``unique_for``: a unique task's lock time-to-live in seconds (written with its key, so
    that a replay can take the lock again). ``group``: the one consumer group the message
    is for (see :attr:`TaskMessage.group`). ``rate_reserved``: its rate limit's admission
    is taken already (:data:`RATE_RESERVED_MARK`, always the last member). ``lane``: its
    priority lane, written as the first member (``{"lane":"<name>",``: the scripts that
    move a message back into its lane read it there) unless it is the default.
    """
    body: dict[str, Any] = {} if lane == DEFAULT_LANE else {"lane": lane}
    body |= {
        "task": task_name,
        "payload": payload,
        "attempt": attempt,
        "enqueued_at": round(enqueued_at, 3),
    }
    if task_id is not None:
        body["id"] = task_id
    if unique_key is not None:
        body["unique_key"] = unique_key
        body["unique_token"] = unique_token
        if unique_for is not None:
            body["unique_for"] = unique_for
    if options is not None:
        options.to_body(body)
    if headers and (checked := check_headers(headers, task_name)) is not None:
        body["headers"] = checked
    if group is not None:
        body["group"] = group
    if rate_reserved:
        body["rate_reserved"] = True
    if not is_plain(payload) and (problem := find_problem(payload)) is not None:
        raise InvalidPayload(_unsendable(task_name, problem))  # no silent conversion
    try:
        text = _dumps(body)
    except (TypeError, ValueError, RecursionError) as exc:
        problem = find_problem(payload)
        why = _unsendable(task_name, problem) if problem else f"{exc}"
        raise InvalidPayload(why) from exc
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate: fine in the payload (sent as a JSON escape), never in a key.
        _check_key_fields(body)
        data = _dumps_ascii(body).encode("ascii")
    if len(data) > max_bytes:
        raise PayloadTooLarge(
            f"task {task_name!r}: encoded message is {len(data)} bytes, "
            f"more than max_payload_bytes={max_bytes}"
        )
    return data


def _unsendable(task_name: str, problem: Problem) -> str:
    return f"payload of task {task_name!r} is not JSON-serializable: {problem}"


def _check_key_fields(body: Mapping[str, Any]) -> None:
    for name in _KEY_FIELDS:
        value = body.get(name)
        if isinstance(value, str) and (why := utf8_error(value)) is not None:
            what = "task name" if name == "task" else f"{name} of task {body.get('task')!r:.80}"
            raise InvalidPayload(f"the {what} cannot be sent to Redis: {why}")


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_scan_string: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


def _skip(text: str, index: int) -> int:
    """The index of the first character at or after ``index`` that is not JSON whitespace."""
    match = _WHITESPACE.match(text, index)
    return match.end() if match else index


def _member_spans(text: str) -> dict[str, tuple[int, int]] | None:
    """Where the value of each member of the JSON object ``text`` is: ``{key: (start, end)}``
    (the last of duplicate keys, as the decoder keeps); None if ``text`` is not an object."""
    spans: dict[str, tuple[int, int]] = {}
    try:
        i = _skip(text, 0)
        if text[i : i + 1] != "{":
            return None
        i = _skip(text, i + 1)
        if text[i : i + 1] == "}":
            return spans
        while True:
            if text[i : i + 1] != '"':
                return None
            key, i = _scan_string(text, i + 1)
            i = _skip(text, i)
            if text[i : i + 1] != ":":
                return None
            start = _skip(text, i + 1)
            _, end = _scan_once(text, start)
            spans[key] = (start, end)
            i = _skip(text, end)
            if text[i : i + 1] == "}":
                return spans
            if text[i : i + 1] != ",":
                return None
            i = _skip(text, i + 1)
    except (ValueError, RecursionError, StopIteration):
        return None


def stored_unique_for(raw: bytes) -> float | None:
    """The ``unique_for`` (seconds) a stored message carries, or None (absent or invalid)."""
    with contextlib.suppress(ValueError, RecursionError):
        body = _loads(raw.decode("utf-8"))
        if isinstance(body, dict):
            seconds = _seconds(body.get("unique_for"))
            if seconds is not None and seconds > 0:
                return seconds
    return None


def stored_headers(raw: bytes) -> Mapping[str, str]:
    """The headers a stored message carries, read-only; empty when it has none, or when
    they (or the message) cannot be decoded. For listings (dead letters): a runner checks
    them strictly (see :func:`decode_message`)."""
    with contextlib.suppress(ValueError, RecursionError):
        body = _loads(raw.decode("utf-8"))
        if isinstance(body, dict):
            headers = body.get("headers")
            if headers and _headers_error(headers) is None:
                return MappingProxyType(headers)
    return NO_HEADERS


#: How a message deferred by its rate limit ends: its admission is reserved (see
#: :func:`reencode_deferred`). Always the last member, so a runner tests only the end of
#: the message (a nested value cannot end the top-level object). ``admit.lua`` replaces
#: ``true`` with the reserved time (ms since the epoch) when it defers the message.
RATE_RESERVED_MARK = b',"rate_reserved":true}'
_RESERVED_TAIL = re.compile(rb',"rate_reserved":(true|[0-9]{1,19})\}\Z')


def rate_reserved_at(raw: bytes) -> int | None:
    """The time (ms since the epoch) a message deferred by its rate limit was reserved for
    (0 when it does not say), or None when it carries no reservation."""
    match = _RESERVED_TAIL.search(raw, max(0, len(raw) - 40))
    if match is None:
        return None
    value = match.group(1)
    return 0 if value == b"true" else int(value)


def is_rate_reserved(raw: bytes) -> bool:
    """Whether a stored message carries a rate reservation (:data:`RATE_RESERVED_MARK`):
    its rate limit admitted it already, when it was deferred (it runs without being
    checked again)."""
    return raw.endswith(b"}") and _RESERVED_TAIL.search(raw, max(0, len(raw) - 40)) is not None


def reencode_deferred(
    message: TaskMessage, *, rate_reserved: bool, group: str | None = None
) -> bytes:
    """The message of ``message`` deferred by a limit, to come back later: the same task
    id, payload and attempt (a deferral uses no attempt), copied verbatim as
    :func:`reencode_for_retry` does; with :data:`RATE_RESERVED_MARK` when
    ``rate_reserved``; for ``group`` alone (see :attr:`TaskMessage.group`). Its options
    stay as they are, ``expires`` included (a deferral is not a retry: a task not started
    by then is dropped when it comes back). Never refused for its size."""
    return _reencode(
        message,
        message.attempt,
        NO_SIZE_LIMIT,
        rate_reserved=rate_reserved,
        group=group,
        options=_own_options(message.options),
    )


def reencode_for_retry(
    message: TaskMessage, attempt: int, max_bytes: int, group: str | None = None
) -> bytes:
    """The message of the next attempt of ``message`` (same task id and payload), for
    ``group`` alone (see :attr:`TaskMessage.group`; None: for every group).

    The payload is copied verbatim from the message as stored (its JSON text, not the
    object decoded from it): the attempt that failed may have changed the object it was
    given, and JSON that Python reads but does not write back (``1e400`` reads as ``inf``)
    stays what it was. So does the unique lock's ``unique_for``. A message that is not a
    stored one (a test's own TaskMessage) is encoded from its fields. A rate limit's
    reservation is not carried over: the retry is admitted again.
    """
    return _reencode(
        message,
        attempt,
        max_bytes,
        rate_reserved=False,
        group=group,
        options=_retry_options(message.options),
    )


def _own_options(options: MessageOptions) -> MessageOptions | None:
    return None if options == NO_OPTIONS else options


def _reencode(
    message: TaskMessage,
    attempt: int,
    max_bytes: int,
    *,
    rate_reserved: bool,
    group: str | None,
    options: MessageOptions | None,
) -> bytes:
    spans = None
    text = ""
    if message.raw:
        with contextlib.suppress(UnicodeDecodeError):
            text = message.raw.decode("utf-8")
            spans = _member_spans(text)
    if spans is None or "payload" not in spans:
        return encode_message(
            message.task_name,
            message.payload,
            attempt=attempt,
            enqueued_at=message.enqueued_at,
            task_id=message.task_id,
            unique_key=message.unique_key,
            unique_token=message.unique_token,
            options=options,
            headers=message.headers,
            group=group,
            max_bytes=max_bytes,
            rate_reserved=rate_reserved,
            lane=message.lane,
        )
    unique_for = None
    if message.unique_key is not None and "unique_for" in spans:
        unique_for = stored_unique_for(message.raw)
    start, end = spans["payload"]
    # The envelope encoded with a placeholder payload, then the stored payload put in its
    # place: ``{"task":...,"payload":0,...}`` has the placeholder right after the name.
    envelope = encode_message(
        message.task_name,
        0,
        attempt=attempt,
        enqueued_at=message.enqueued_at,
        task_id=message.task_id,
        unique_key=message.unique_key,
        unique_token=message.unique_token,
        unique_for=unique_for,
        options=options,
        headers=message.headers,
        group=group,
        max_bytes=NO_SIZE_LIMIT,
        rate_reserved=rate_reserved,
        lane=message.lane,
    )
    head, sep, tail = envelope.partition(b',"payload":0,')
    assert sep, envelope
    data = b"".join((head, b',"payload":', text[start:end].encode("utf-8"), b",", tail))
    if len(data) > max_bytes:
        raise PayloadTooLarge(
            f"task {message.task_name!r}: encoded message is {len(data)} bytes, "
            f"more than max_payload_bytes={max_bytes}"
        )
    return data


def _retry_options(options: MessageOptions) -> MessageOptions | None:
    """The options of a retry: the same, but ``expires`` (it is about the first start)."""
    if options.keep_result is None and options.timeout is None:
        return None
    return attrs.evolve(options, expires=None)


def _seconds(value: Any) -> float | None:
    """``value`` as a finite float, or None."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return None
    return seconds if math.isfinite(seconds) else None


def _field(fields: Sequence[bytes] | Mapping[bytes, bytes], name: bytes) -> bytes | None:
    if isinstance(fields, Mapping):
        return fields.get(name)
    for i in range(0, len(fields) - 1, 2):
        if fields[i] == name:
            return fields[i + 1]
    return None


def undecodable(message_id: str, raw: bytes, deliveries: int) -> TaskMessage:
    """A stand-in message for an entry that could not be decoded."""
    return TaskMessage(
        message_id=message_id,
        task_name="",
        payload=None,
        attempt=max(deliveries, 1),
        enqueued_at=0.0,
        task_id=message_id,
        deliveries=deliveries,
        raw=raw,
        lane=split_entry_id(message_id)[0],
    )


class MessageDecodeError(InvalidMessage):
    """An entry that cannot be decoded; ``message`` is a stand-in for the handler."""

    def __init__(self, reason: str, message: TaskMessage) -> None:
        super().__init__(f"message {message.message_id}: {reason}")
        self.reason = reason
        self.message = message


#: What :func:`decode_fields` finds in an entry: task name, payload, attempt (as stored:
#: deliveries are apart), enqueued at, task id, the raw ``payload`` field, unique key,
#: unique token,
#: the dispatch's options (None when it has none), its headers (None when it has none).
Fields = tuple[
    str,
    Any,
    int,
    float,
    str,
    bytes,
    str | None,
    str | None,
    MessageOptions | None,
    dict[str, str] | None,
]


def decode_message(
    message_id: str,
    fields: Sequence[bytes] | Mapping[bytes, bytes] | None,
    *,
    deliveries: int = 1,
    max_bytes: int | None = None,
) -> TaskMessage:
    """Decode a stream entry; raise :class:`MessageDecodeError` saying why if it is bad.

    ``attempt`` of the result is the stored attempt; ``deliveries`` says how many times
    this entry was delivered (crash redeliveries are not attempts).
    """
    parts = decode_fields(message_id, fields, deliveries, max_bytes)
    if parts is None:
        return _decode_checked(message_id, fields, deliveries, max_bytes)
    return message_from_fields(message_id, deliveries, parts)


def message_from_fields(message_id: str, deliveries: int, fields: Fields) -> TaskMessage:
    """The :class:`TaskMessage` of what :func:`decode_fields` found."""
    (
        task,
        payload,
        attempt,
        enqueued_at,
        task_id,
        raw,
        unique_key,
        unique_token,
        options,
        headers,
    ) = fields
    return TaskMessage(
        message_id,
        task,
        payload,
        attempt,
        enqueued_at,
        task_id,
        deliveries,
        raw,
        unique_key,
        unique_token,
        options or NO_OPTIONS,
        headers or NO_HEADERS,
        lane=split_entry_id(message_id)[0],
    )


def fields_of(message: TaskMessage) -> Fields:
    """The inverse of :func:`message_from_fields`."""
    return (
        message.task_name,
        message.payload,
        message.attempt,
        message.enqueued_at,
        message.task_id,
        message.raw,
        message.unique_key,
        message.unique_token,
        message.options if message.options != NO_OPTIONS else None,
        dict(message.headers) if message.headers else None,
    )


def decode_fields(
    message_id: str,
    fields: Sequence[bytes] | Mapping[bytes, bytes] | None,
    deliveries: int,
    max_bytes: int | None,
    group: str | None = None,
) -> Fields | None:
    """The fast path of :func:`decode_message`, without building a :class:`TaskMessage`:
    the parts of the entry every dispatch writes, or None for anything else (good or bad:
    :func:`decode_message` then checks it field by field and says why it is bad).

    The entry every dispatch writes is ``[b"payload", <JSON object>]`` with well-typed
    fields, checked by exact types (JSON only makes exact dict, str, int, float). A message
    for one consumer group (``"group"``) takes the fast path only for ``group`` (the
    reading runner's own: its retries, replays and cron ticks); the fields do not say it.
    """
    if type(fields) is not list or len(fields) != 2 or fields[0] != PAYLOAD_FIELD:
        return None
    raw = fields[1]
    if type(raw) is not bytes or (max_bytes is not None and len(raw) > max_bytes):
        return None
    try:
        text = raw.decode("utf-8")
        body, end = _scan_once(text, 0)
    except (ValueError, RecursionError, StopIteration):
        return None
    if end != len(text) or type(body) is not dict:
        return None
    if "group" in body and (group is None or body["group"] != group):
        return None  # a message for one group (another, or not said): the slow path reads it
    task = body.get("task")
    attempt = body.get("attempt", 1)
    enqueued_at = body.get("enqueued_at", 0.0)
    task_id = body.get("id", message_id)
    unique_key = body.get("unique_key")
    unique_token: Any = body.get("unique_token") if unique_key is not None else None
    if (
        type(task) is str
        and task
        and "payload" in body
        and type(attempt) is int
        and attempt >= 1
        and type(enqueued_at) is float
        and enqueued_at - enqueued_at == 0.0  # finite: not inf, not nan
        and type(task_id) is str
        and task_id
        and (
            unique_key is None
            or (type(unique_key) is str and unique_key and type(unique_token) is str)
        )
    ):
        # A string that becomes a Redis key or argument must encode as UTF-8 (JSON escapes
        # can make lone surrogates); ASCII ones do, and isascii() costs no scan.
        if (
            not (task.isascii() and task_id.isascii())
            or (unique_key is not None and not (unique_key.isascii() and unique_token.isascii()))
        ) and _key_fields_error(task, task_id, unique_key, unique_token):
            return None
        try:
            options = MessageOptions.from_body(body)
        except ValueError:
            return None  # the slow path says why
        headers = body.get("headers")
        if headers is not None and (not headers or _headers_error(headers) is not None):
            return None  # {} is no headers, as the slow path says; bad ones, it says why
        if "lane" in body and _lane_error(body["lane"]) is not None:
            return None  # the slow path says why
        return (
            task,
            body["payload"],
            attempt,
            enqueued_at,
            task_id,
            raw,
            unique_key,
            unique_token,
            options,
            headers,
        )
    return None


def _key_fields_error(task: str, task_id: str, unique_key: Any, unique_token: Any) -> str | None:
    """Why one of the strings that become Redis keys or arguments cannot be sent, or None."""
    fields = [("task", task), ("id", task_id)]
    if unique_key is not None:
        fields += [("unique_key", unique_key), ("unique_token", unique_token)]
    for name, value in fields:
        if (why := utf8_error(value)) is not None:
            return f"'{name}' cannot be sent to Redis as UTF-8: {why}"
    return None


def _group_error(group: Any) -> str | None:
    """Why a message's ``group`` is not a group name it may carry, or None."""
    if group is None or (isinstance(group, str) and group and utf8_error(group) is None):
        return None
    return f"'group' must be a non-empty string, got {group!r:.60}"


def _lane_error(lane: Any) -> str | None:
    """Why a message's ``lane`` is not a lane name, or None."""
    if lane is None:
        return None
    try:
        check_lane(lane, "'lane'")
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def _body(raw: bytes) -> dict[str, Any]:
    """The JSON object of a stored message; ValueError saying why it is not one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"the payload is not valid UTF-8: {exc}") from exc
    try:
        body = _loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"the payload is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ValueError(f"the message is a JSON {type(body).__name__}, not an object")
    return body


def _decode_checked(
    message_id: str,
    fields: Sequence[bytes] | Mapping[bytes, bytes] | None,
    deliveries: int,
    max_bytes: int | None,
) -> TaskMessage:
    """:func:`decode_message` with every check spelled out, and the reason of a refusal."""
    raw = _field(fields, PAYLOAD_FIELD) if fields is not None else None

    def bad(reason: str) -> MessageDecodeError:
        return MessageDecodeError(reason, undecodable(message_id, raw or b"", deliveries))

    if raw is None:
        raise bad("the entry has no 'payload' field")
    if max_bytes is not None and len(raw) > max_bytes:
        raise bad(f"the message is {len(raw)} bytes, more than {max_bytes}")
    try:
        body = _body(raw)
    except ValueError as exc:
        raise bad(str(exc)) from exc
    task = body.get("task")
    if not isinstance(task, str) or not task:
        raise bad("'task' is missing or not a non-empty string")
    if "payload" not in body:
        raise bad("'payload' is missing")
    attempt = body.get("attempt", 1)
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        raise bad(f"'attempt' must be an integer >= 1, got {attempt!r}")
    enqueued_at = _seconds(body.get("enqueued_at", 0.0))
    if enqueued_at is None:
        raise bad(f"'enqueued_at' must be a number, got {body.get('enqueued_at')!r:.50}")
    task_id = body.get("id", message_id)
    if not isinstance(task_id, str) or not task_id:
        raise bad(f"'id' must be a non-empty string, got {task_id!r}")
    unique_key = body.get("unique_key")
    unique_token = body.get("unique_token")
    if unique_key is not None and not (
        isinstance(unique_key, str) and unique_key and isinstance(unique_token, str)
    ):
        raise bad("'unique_key' and 'unique_token' must be strings")
    if (why := _key_fields_error(task, task_id, unique_key, unique_token)) is not None:
        raise bad(why)
    try:
        options = MessageOptions.from_body(body)
    except ValueError as exc:
        raise bad(str(exc)) from None
    headers, group = body.get("headers"), body.get("group")
    why = _headers_error(headers) if headers is not None else None
    if (why := why or _group_error(group) or _lane_error(body.get("lane"))) is not None:
        raise bad(why)
    return TaskMessage(
        message_id=message_id,
        task_name=task,
        payload=body["payload"],
        attempt=attempt,
        enqueued_at=enqueued_at,
        task_id=task_id,
        deliveries=deliveries,
        raw=raw,
        unique_key=unique_key,
        unique_token=unique_token if unique_key is not None else None,
        options=options or NO_OPTIONS,
        headers=headers or NO_HEADERS,
        group=group,
        lane=split_entry_id(message_id)[0],
    )
