"""The stored form of a task message: one typed, versioned envelope, and how it is written.

A stream entry has one field, ``payload``, holding a UTF-8 JSON object, the members of
:class:`Envelope` in its order::

    {"task": "send_email", "payload": {...}, "attempt": 1, "enqueued_at": 1764412800.123}

``attempt`` is the attempt the next execution of this entry is (a retry writes
``attempt + 1``). ``id``, the task's stable id, is present when the task was retried or
dispatched delayed; without it the task id is the entry's own stream id. A unique task adds
``unique_key``, ``unique_token`` and ``unique_for`` (its lock's time-to-live, seconds); a
dispatch its options (``keep_result``, ``timeout``, ``expires``) and ``headers``. Unknown
members are ignored; ``v``, the version, is 1 when absent, and this version writes none.

The strings that become Redis keys or arguments (``task``, ``id``, ``unique_key``,
``unique_token``) must be encodable as UTF-8: JSON can carry a lone surrogate (``"\\ud800"``),
UTF-8 cannot. :func:`encode_message` refuses them. Inside ``payload`` they are fine: they
travel as JSON escapes, and the message is then written in ASCII.

A retry or a replay writes the stored ``payload`` back verbatim (``msgspec.Raw``), and the
same headers: what the task is given never changes between attempts, even for JSON that
Python reads but would not write (``1e400``), and the message grows by at most
:data:`MESSAGE_GROWTH` bytes, which the read-side size check allows for.

msgspec writes and reads the envelope; Python's json writes the payload (its bytes as
trunner always wrote them: ``1e+16``, str and int subclasses). What msgspec would write
otherwise than json, or cannot, is written by json: a float below 1e-4 or from 1e16
(msgspec writes ``1e16``, json ``1e+16``), a str subclass, a lone surrogate. A stored payload
that msgspec does not read (a lone surrogate escape) is found by
:func:`~trunner._wire.json_text.member_spans`.

Measured with ``bench/envelope.py`` (best of 9, small payload / 10 KB, against the stdlib
codec and its hand-written splice): a dispatch 6.6 / 291 µs as before (the payload's checks
and json dominate); a retry 16.1 → 6.0 µs / 112 → 14.4 µs. msgspec is imported with trunner
now: 7 ms more (median of 9, on trunner's 240 ms) and 1.1 MB of RSS (31.7 MB without it).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import msgspec
from msgspec import UNSET, Raw, UnsetType

from ..errors import InvalidPayload, PayloadTooLarge
from .headers import check_headers
from .json_text import loads, member_spans, seconds
from .message import NO_OPTIONS, MessageOptions, TaskMessage
from .names import DEFAULT_LANE, utf8_error
from .payload import Problem, find_problem, is_plain
from .workflow import NOW, Literal, Part, StepRef, encode_template

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "MESSAGE_GROWTH",
    "NO_SIZE_LIMIT",
    "PAYLOAD_FIELD",
    "Envelope",
    "encode_message",
    "message_growth",
    "message_template",
    "payload_json",
    "reencode_deferred",
    "reencode_for_retry",
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


class Envelope(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The members of a stored task message, in the order they are written.

    ``lane`` is first and ``rate_reserved`` last: the scripts read them there (``lanes.lua``
    the prefix ``{"lane":"<name>",``, ``admit.lua`` the tail :data:`RATE_RESERVED_MARK`).
    A member absent is UNSET where a JSON ``null`` means something else (an error, or for
    ``unique_token`` a value written as it was given), None where it means the same.
    """

    lane: str | None = None
    task: str
    payload: Raw
    attempt: int | UnsetType = UNSET
    enqueued_at: float | UnsetType = UNSET
    id: str | UnsetType = UNSET
    unique_key: str | None = None
    unique_token: str | UnsetType | None = UNSET
    unique_for: int | float | None = None
    keep_result: int | float | None = None
    timeout: int | float | None = None
    expires: int | float | None = None
    headers: dict[str, str] | None = None
    wf: StepRef | None = None
    group: str | None = None
    v: int = 1
    rate_reserved: bool | int | None = None


_FIELDS = tuple((f.name, f.default) for f in msgspec.structs.fields(Envelope))
_encoder = msgspec.json.Encoder()
_read_envelope = msgspec.json.Decoder(Envelope).decode
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode

_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
_escape_ascii: Callable[[str], str] = json.encoder.encode_basestring_ascii


def _ascii(text: str) -> str:
    """JSON ``text`` with every character beyond ASCII escaped, as ``ensure_ascii`` does."""
    return _NON_ASCII.sub(lambda m: _escape_ascii(m.group())[1:-1], text)


def message_growth(group: str) -> int:
    """How many bytes a group's own message (a retry, a replay, a cron tick) may add to the
    message dispatched: :data:`MESSAGE_GROWTH`, and its ``group`` field."""
    return MESSAGE_GROWTH + len(_dumps({"group": group}).encode("utf-8")) - 1


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
    at = round(enqueued_at, 3)
    checked = check_headers(headers, task_name) if headers else None
    body, ascii_only = _payload_body(task_name, payload)
    envelope = _envelope(
        task_name, Raw(body), attempt, at, task_id, unique_key, unique_token, options, lane
    )
    if unique_key is not None:
        envelope.unique_for = unique_for
    envelope.headers, envelope.group = checked, group
    envelope.rate_reserved = True if rate_reserved else None
    try:
        data = _write(envelope, verbatim=False)
    except InvalidPayload:
        raise
    except (TypeError, ValueError, RecursionError) as exc:  # NaN in an option, and the like
        raise InvalidPayload(f"{exc}") from exc
    if ascii_only:
        data = _ascii(data.decode("utf-8")).encode("ascii")
    return _sized(data, task_name, max_bytes)


#: Where a step's payload and time go in the message :func:`message_template` encodes: after
#: the lane and task name, which are strings, so nothing before it can match.
_HOLES = b'"payload":null,"attempt":1,"enqueued_at":0.0'


def message_template(
    task_name: str,
    payload: Iterable[Part],
    *,
    task_id: str,
    options: MessageOptions,
    group: str,
    headers: Mapping[str, str] | None = None,
    lane: str = DEFAULT_LANE,
    unique: tuple[str, str, float] | None = None,
) -> bytes:
    """The template (see ``trunner._wire.workflow``) of a workflow step's message, attempt
    1: what :func:`encode_message` writes, with the payload made of ``payload``'s parts and
    ``enqueued_at`` the time it is added; ``unique``: a unique step's ``unique_key``,
    ``unique_token`` and ``unique_for``, written as a unique dispatch's message carries
    them. Raises as :func:`encode_message` does; the script that assembles it checks the
    size."""
    key, token, seconds = unique if unique is not None else (None, None, None)
    data = encode_message(
        task_name, None, enqueued_at=0.0, task_id=task_id, options=options, headers=headers,
        group=group, max_bytes=NO_SIZE_LIMIT, lane=lane, unique_key=key, unique_token=token,
        unique_for=seconds,
    )  # fmt: skip
    head, hole, tail = data.partition(_HOLES)
    assert hole, data
    time = Literal(b',"attempt":1,"enqueued_at":')
    return encode_template([Literal(head + b'"payload":'), *payload, time, NOW, Literal(tail)])


def _payload_body(task_name: str, payload: Any) -> tuple[bytes, bool]:
    """``payload`` as JSON, and whether it had to go in ASCII (a lone surrogate: then the
    whole message does); InvalidPayload when it has no JSON form."""
    if not is_plain(payload) and (problem := find_problem(payload)) is not None:
        raise InvalidPayload(_unsendable(task_name, problem))  # no silent conversion
    try:
        text = _dumps(payload)
    except (TypeError, ValueError, RecursionError) as exc:
        problem = find_problem(payload)
        raise InvalidPayload(_unsendable(task_name, problem) if problem else f"{exc}") from exc
    try:
        return text.encode("utf-8"), False
    except UnicodeEncodeError:  # a lone surrogate: the message goes in ASCII
        return _ascii(text).encode("ascii"), True


def payload_json(task_name: str, payload: Any) -> bytes:
    """``payload`` as a message carries it (JSON, in ASCII escapes when it holds a lone
    surrogate): the bound payload of a workflow's step written into its template."""
    return _payload_body(task_name, payload)[0]


def _envelope(
    task_name: str,
    payload: Raw,
    attempt: int,
    enqueued_at: float,
    task_id: str | None,
    unique_key: str | None,
    unique_token: str | None,
    options: MessageOptions | None,
    lane: str,
) -> Envelope:
    """The envelope of these members (a ``unique_token`` is written with its key only)."""
    options = options or NO_OPTIONS
    return Envelope(
        lane=None if lane == DEFAULT_LANE else lane,
        task=task_name,
        payload=payload,
        attempt=attempt,
        enqueued_at=enqueued_at,
        id=UNSET if task_id is None else task_id,
        unique_key=unique_key,
        unique_token=UNSET if unique_key is None else unique_token,
        keep_result=options.keep_result,
        timeout=options.timeout,
        expires=options.expires,
        wf=options.workflow,
    )


def _sized(data: bytes, task_name: str, max_bytes: int) -> bytes:
    if len(data) > max_bytes:
        raise PayloadTooLarge(
            f"task {task_name!r}: encoded message is {len(data)} bytes, "
            f"more than max_payload_bytes={max_bytes}"
        )
    return data


def _write(envelope: Envelope, *, verbatim: bool) -> bytes:
    """The bytes of ``envelope``: msgspec's, unless it would write them otherwise than
    Python's json (a float outside [1e-4, 1e16), a str subclass, a lone surrogate: then
    in ASCII, the payload too unless it is copied ``verbatim``)."""
    numbers = envelope.enqueued_at, envelope.unique_for, envelope.keep_result
    if all(
        type(x) is not float or x == 0.0 or 1e-4 <= abs(x) < 1e16
        for x in (*numbers, envelope.timeout, envelope.expires)
    ):
        with contextlib.suppress(TypeError, UnicodeEncodeError):
            return _encoder.encode(envelope)
    members: dict[str, Any] = {}
    for name, default in _FIELDS:
        value = getattr(envelope, name)
        if value is not UNSET and value != default:
            members[name] = value
    if envelope.wf is not None:
        members["wf"] = msgspec.to_builtins(envelope.wf)
    members["payload"] = 0  # the placeholder, right after the task's name
    head, sep, tail = _dumps(members).partition(',"payload":0,')
    assert sep, members
    payload = bytes(envelope.payload)
    try:
        ends = head.encode("utf-8"), tail.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate: fine in other members (sent as a JSON escape), never in a key.
        _check_key_fields(members)
        ends = _ascii(head).encode("ascii"), _ascii(tail).encode("ascii")
        payload = payload if verbatim else _ascii(payload.decode("utf-8")).encode("ascii")
    return b"".join((ends[0], b',"payload":', payload, b",", ends[1]))


def _unsendable(task_name: str, problem: Problem) -> str:
    return f"payload of task {task_name!r} is not JSON-serializable: {problem}"


#: Fields of a message that become Redis keys or arguments.
_KEY_FIELDS = ("task", "id", "unique_key", "unique_token")


def _check_key_fields(body: Mapping[str, Any]) -> None:
    for name in _KEY_FIELDS:
        value = body.get(name)
        if isinstance(value, str) and (why := utf8_error(value)) is not None:
            what = "task name" if name == "task" else f"{name} of task {body.get('task')!r:.80}"
            raise InvalidPayload(f"the {what} cannot be sent to Redis: {why}")


def read(raw: bytes) -> Envelope | None:
    """The envelope of a stored message, read by msgspec; None when msgspec does not read
    it (see the module docs) or it is no UTF-8 (msgspec skips the members it does not
    know without looking)."""
    if not raw.isascii():
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    try:
        return _read_envelope(raw)
    except (msgspec.DecodeError, RecursionError):
        return None


def reencode_deferred(
    message: TaskMessage, *, rate_reserved: bool, group: str | None = None
) -> bytes:
    """The message of ``message`` deferred by a limit, to come back later: the same task
    id, payload and attempt (a deferral uses no attempt), copied verbatim as
    :func:`reencode_for_retry` does; with :data:`RATE_RESERVED_MARK` when
    ``rate_reserved``; for ``group`` alone (see :attr:`TaskMessage.group`). Its options
    stay as they are, ``expires`` included (a deferral is not a retry: a task not started
    by then is dropped when it comes back). Never refused for its size."""
    options = None if message.options == NO_OPTIONS else message.options
    return _reencode(message, message.attempt, NO_SIZE_LIMIT, rate_reserved, group, options)


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
    options = message.options
    if options.keep_result is None and options.timeout is None and options.workflow is None:
        retry_options = None  # ``expires`` is about the first start
    else:
        retry_options = attrs.evolve(options, expires=None)
    return _reencode(message, attempt, max_bytes, False, group, retry_options)


def _reencode(
    message: TaskMessage,
    attempt: int,
    max_bytes: int,
    rate_reserved: bool,
    group: str | None,
    options: MessageOptions | None,
) -> bytes:
    stored = _stored_payload(message.raw) if message.raw else None
    if stored is None:
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
    payload, unique_for = stored
    name = message.task_name
    envelope = _envelope(
        name,
        payload,
        attempt,
        round(message.enqueued_at, 3),
        message.task_id,
        message.unique_key,
        message.unique_token,
        options,
        message.lane,
    )
    if message.unique_key is not None:
        envelope.unique_for = unique_for
    envelope.headers = check_headers(message.headers, name) if message.headers else None
    envelope.group, envelope.rate_reserved = group, True if rate_reserved else None
    return _sized(_write(envelope, verbatim=True), name, max_bytes)


def _stored_payload(raw: bytes) -> tuple[Raw, float | None] | None:
    """The payload of a stored message as its JSON text, and its ``unique_for``; None when
    it is no JSON object with a payload."""
    envelope = read(raw)
    if envelope is not None:
        value = seconds(envelope.unique_for)
        return envelope.payload, value if value is not None and value > 0 else None
    # What msgspec does not read (a lone surrogate escape): found by Python's json.
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    span = member_spans(text)
    if span is None or "payload" not in span:
        return None
    start, end = span["payload"]
    value = seconds(loads(text[slice(*span["unique_for"])])) if "unique_for" in span else None
    return Raw(text[start:end].encode("utf-8")), value if value is not None and value > 0 else None
