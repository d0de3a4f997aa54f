"""RESP, Redis's wire format: commands packed for the native transport, replies read.

Replies reach the broker raw, as RESP2 has them: bulk strings are bytes (or str, from
some clients), integers int, nil None, arrays lists; :func:`as_str` and
:func:`stream_entries` read the shapes every transport returns. Nothing here imports a
client library.

Text and bytes: a str argument is sent as UTF-8, and :func:`as_str` reads a bulk string as
UTF-8. Redis holds bytes, not text, so both use Python's ``surrogateescape``: a byte that
is not valid UTF-8 reads as a surrogate in U+DC80..U+DCFF and is written back as that
byte, so a name read from Redis (a consumer, a field) round-trips exactly. Any other
surrogate (a lone ``"\\ud800"``, which JSON escapes can make) has no bytes: sending it
raises :class:`~trunner.errors.InvalidArgument`, a ValueError, before anything is sent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ...errors import InvalidArgument

#: A Redis command argument, as callers may give it.
Arg = str | bytes | int | float

__all__ = [
    "RawEntry",
    "as_str",
    "check_args",
    "encode_str",
    "library_args",
    "pack",
    "packed_fields",
    "stream_entries",
    "text_field",
]


def encode_str(value: str) -> bytes:
    """A str argument as Redis gets it: UTF-8, surrogate escapes as the bytes they stand for.

    Raises:
        InvalidArgument: ``value`` holds another surrogate (it has no bytes).
    """
    try:
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(
            f"a Redis argument must be valid text: {value!r:.120} holds a lone surrogate "
            f"at index {exc.start} (UTF-8 cannot encode it)"
        ) from None


def check_args(args: Sequence[object]) -> None:
    """Check a command's arguments as :func:`pack` would, without packing them.

    Raises:
        TypeError: an argument is not str, bytes, int or float (or is a bool).
        InvalidArgument: a str argument cannot be encoded (see :func:`encode_str`).
    """
    if not args:
        raise TypeError("a Redis command needs at least its name")
    for arg in args:
        if type(arg) is str:
            if not arg.isascii():
                encode_str(arg)
        elif type(arg) is not bytes and type(arg) is not int and type(arg) is not float:
            _check_other(arg)


def library_args(args: Sequence[Any]) -> Sequence[Any]:
    """``args`` checked as by :func:`check_args`, for a client library that encodes str
    strictly (redis-py, fakeredis): a str with surrogate escapes is given as its bytes."""
    if not args:
        raise TypeError("a Redis command needs at least its name")
    converted: list[Any] | None = None
    for index, arg in enumerate(args):
        if type(arg) is str:
            if arg.isascii():
                continue
            try:
                arg.encode()
            except UnicodeEncodeError:
                converted = converted or list(args)
                converted[index] = encode_str(arg)
        elif type(arg) is not bytes and type(arg) is not int and type(arg) is not float:
            _check_other(arg)
    return args if converted is None else converted


def text_field(value: Arg) -> Arg:
    """A field of a record people read (a dead letter, a quarantine record): a str that
    cannot be sent as it is (a lone surrogate) is written with backslash escapes instead,
    so that writing the record never fails on its text."""
    if type(value) is str and not value.isascii():
        return value.encode("utf-8", "backslashreplace")
    return value


#: ``msgspec.json.encode``, imported by the first record packed (a worker whose tasks keep
#: no result never imports msgspec, see ``trunner._wire.codec``).
_json_encode: Callable[[Any], bytes] | None = None


def _encoder() -> Callable[[Any], bytes]:
    global _json_encode
    if _json_encode is None:
        import msgspec  # noqa: PLC0415

        _json_encode = msgspec.json.Encoder().encode
    return _json_encode


def packed_fields(fields: Sequence[tuple[str, Arg]], ttl_ms: int) -> bytes | None:
    """A record's field/value pairs and then its time-to-live (ms) as one argument: a JSON
    array of strings, each the bytes the pair would be sent as one argument each (a number
    as the transport writes it, a str as :func:`text_field` gives it), so that a script
    stores exactly the same.

    None when a value cannot go through JSON unchanged (bytes that are not UTF-8, any
    other type): such a record is sent as separate arguments.

    This runs for every task that keeps its result: a float is written by msgspec (a
    tenth of ``repr``'s time) where the two write the same text — from 1e-4 up to 1e16,
    which holds every time and ``keep`` a record has — and by ``repr`` elsewhere."""
    encode = _json_encode or _encoder()
    flat: list[str] = []
    append = flat.append
    for name, value in fields:  # the names are trunner's own, ASCII
        append(name)
        if type(value) is str:
            append(value if value.isascii() else value.encode("utf-8", "backslashreplace").decode())
        elif type(value) is float:
            append(encode(value).decode() if 1e-4 <= value < 1e16 else repr(value))
        elif type(value) is bytes:
            try:
                append(value.decode())
            except UnicodeDecodeError:  # not UTF-8 (or UTF-8 of a surrogate): not JSON text
                return None
        elif type(value) is int:
            append(str(value))
        else:
            return None
    append(str(ttl_ms))
    return encode(flat)


def _check_other(arg: object) -> None:
    if isinstance(arg, bool):
        raise TypeError("a Redis argument cannot be a bool; use 0/1 or a string")
    if isinstance(arg, str):
        encode_str(arg)
    elif not isinstance(arg, bytes | int | float | memoryview | bytearray):
        raise TypeError(
            f"a Redis argument must be str, bytes, int or float, not {type(arg).__name__}"
        )


def pack(args: Sequence[object]) -> bytes:
    """One command in RESP: an array of bulk strings (task code may pass anything through
    the Redis handle, so every type is checked).

    The hot path of every command: the usual types are told apart by ``type(arg) is``
    (subclasses take :func:`_packed_other`), and a small argument is formatted in one
    step (a large one is not copied twice)."""
    out = [b"*%d\r\n" % len(args)]
    append = out.append
    for arg in args:
        kind = type(arg)
        if kind is bytes:
            data: bytes = arg  # type: ignore[assignment]
        elif kind is str:
            try:
                data = arg.encode()  # type: ignore[attr-defined]
            except UnicodeEncodeError:
                data = encode_str(arg)  # type: ignore[arg-type]
        elif kind is int:
            data = b"%d" % arg  # type: ignore[str-format]
        else:
            data = _packed_other(arg)
        if len(data) < _SMALL_ARG:
            append(b"$%d\r\n%b\r\n" % (len(data), data))
        else:
            append(b"$%d\r\n" % len(data))
            append(data)
            append(b"\r\n")
    return b"".join(out)


#: Arguments shorter than this are formatted with their header in one step.
_SMALL_ARG = 1024


def _packed_other(arg: object) -> bytes:
    """An argument :func:`pack` does not see on its hot path: a subclass of ``bytes``,
    ``str`` or ``int``, a float, a buffer; or a bool or anything else (``TypeError``)."""
    if isinstance(arg, bytes):
        return bytes(arg)
    if isinstance(arg, str):
        try:
            return arg.encode()
        except UnicodeEncodeError:
            return encode_str(arg)
    if isinstance(arg, bool):
        raise TypeError("a Redis argument cannot be a bool; use 0/1 or a string")
    if isinstance(arg, int):
        return b"%d" % arg
    if isinstance(arg, float):
        return repr(arg).encode()
    if isinstance(arg, memoryview | bytearray):
        return bytes(arg)
    raise TypeError(f"a Redis argument must be str, bytes, int or float, not {type(arg).__name__}")


def as_str(value: Any) -> str:
    """A bulk string of a reply (bytes, or already str) as text; anything else by ``str``.

    Never fails: bytes that are not UTF-8 read as surrogate escapes, which :func:`pack`
    writes back as the same bytes.
    """
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


@attrs.frozen
class RawEntry:
    """A stream entry as delivered: id, flat field list, and its delivery count."""

    message_id: str
    fields: list[bytes] | None
    deliveries: int = 1


def stream_entries(raw: Any, deliveries: int = 1, suffix: str = "") -> list[RawEntry]:
    """The entries of an XRANGE or XREADGROUP reply (``[[id, [field, value ...]] ...]``);
    ``suffix`` follows each id (a lane's, see ``trunner._wire.names.entry_id``)."""
    return [
        RawEntry(as_str(e[0]) + suffix, list(e[1]) if e[1] else None, deliveries) for e in raw or ()
    ]
