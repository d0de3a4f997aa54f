"""The exact bytes of every kind of message trunner writes, as it writes them today.

A stored message outlives the code that wrote it (a delayed task, a dead letter, a message
waiting in a stream across an upgrade), and the scripts read some members by position (the
lane first, the rate reservation last). So a change of the envelope must be a visible,
deliberate change of this file, never a side effect of moving or re-encoding code.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from trunner._wire.decode import decode_message
from trunner._wire.envelope import (
    PAYLOAD_FIELD,
    encode_message,
    reencode_deferred,
    reencode_for_retry,
)
from trunner.message import MessageOptions, TaskMessage

ENQUEUED_AT = 1764412800.1234
MAX_BYTES = 1 << 20

#: A stored message with every member, its payload in a form Python would not write back
#: (``1e400``, spaces, an escape): a retry and a deferral copy it verbatim.
STORED = (
    b'{"lane":"high","task":"send_email","payload":{"big":1e400, "s" : "\\u00e9"},'
    b'"attempt":2,"enqueued_at":1764412800.123,"id":"t-9","unique_key":"k",'
    b'"unique_token":"tok","unique_for":60,"keep_result":30,"timeout":5,'
    b'"expires":1764412900,"headers":{"h":"v"},"rate_reserved":1764412800500}'
)


def _stored() -> TaskMessage:
    return decode_message("1764412800123-0@high", {PAYLOAD_FIELD: STORED})


WRITERS: dict[str, Callable[[], bytes]] = {
    "dispatch": lambda: encode_message(
        "send_email",
        {"to": "a@b.c", "n": [1, 2.5, None, True]},
        enqueued_at=ENQUEUED_AT,
        max_bytes=MAX_BYTES,
    ),
    "lane": lambda: encode_message(
        "send_email", [1], enqueued_at=ENQUEUED_AT, max_bytes=MAX_BYTES, lane="high"
    ),
    "delayed": lambda: encode_message(
        "send_email", "x", enqueued_at=ENQUEUED_AT, task_id="t-1", max_bytes=MAX_BYTES
    ),
    "unique": lambda: encode_message(
        "send_email",
        1,
        enqueued_at=ENQUEUED_AT,
        unique_key="k",
        unique_token="tok",
        unique_for=60.0,
        max_bytes=MAX_BYTES,
    ),
    "options": lambda: encode_message(
        "send_email",
        None,
        enqueued_at=ENQUEUED_AT,
        options=MessageOptions(30.0, 5.5, 1764412900.0),
        max_bytes=MAX_BYTES,
    ),
    "headers": lambda: encode_message(
        "send_email",
        {},
        enqueued_at=ENQUEUED_AT,
        headers={"trace": "abc", "é": "ü"},
        max_bytes=MAX_BYTES,
    ),
    "cron": lambda: encode_message(
        "tick",
        {"a": 1},
        enqueued_at=ENQUEUED_AT,
        task_id="cron:every:1764412800123",
        unique_key="u",
        unique_token="0" * 32,
        headers={"h": "v"},
        group="workers",
        max_bytes=MAX_BYTES,
        lane="low",
    ),
    "rate_reserved": lambda: encode_message(
        "send_email", 1, enqueued_at=ENQUEUED_AT, rate_reserved=True, max_bytes=MAX_BYTES
    ),
    "surrogate": lambda: encode_message(
        "send_email", "\ud800 é", enqueued_at=ENQUEUED_AT, max_bytes=MAX_BYTES
    ),
    "retry": lambda: reencode_for_retry(_stored(), 3, MAX_BYTES),
    "retry_for_group": lambda: reencode_for_retry(_stored(), 3, MAX_BYTES, "workers"),
    "deferred": lambda: reencode_deferred(_stored(), rate_reserved=True),
    "deferred_for_group": lambda: reencode_deferred(
        _stored(), rate_reserved=False, group="workers"
    ),
}

GOLDEN: dict[str, bytes] = {
    "dispatch": (
        b'{"task":"send_email","payload":{"to":"a@b.c","n":[1,2.5,null,true]},"attempt":1,'
        b'"enqueued_at":1764412800.123}'
    ),
    "lane": (
        b'{"lane":"high","task":"send_email","payload":[1],"attempt":1,'
        b'"enqueued_at":1764412800.123}'
    ),
    "delayed": (
        b'{"task":"send_email","payload":"x","attempt":1,"enqueued_at":1764412800.123,"id":"t-1"}'
    ),
    "unique": (
        b'{"task":"send_email","payload":1,"attempt":1,"enqueued_at":1764412800.123,'
        b'"unique_key":"k","unique_token":"tok","unique_for":60.0}'
    ),
    "options": (
        b'{"task":"send_email","payload":null,"attempt":1,"enqueued_at":1764412800.123,'
        b'"keep_result":30.0,"timeout":5.5,"expires":1764412900.0}'
    ),
    "headers": (
        b'{"task":"send_email","payload":{},"attempt":1,"enqueued_at":1764412800.123,'
        b'"headers":{"trace":"abc","\xc3\xa9":"\xc3\xbc"}}'
    ),
    "cron": (
        b'{"lane":"low","task":"tick","payload":{"a":1},"attempt":1,'
        b'"enqueued_at":1764412800.123,"id":"cron:every:1764412800123","unique_key":"u",'
        b'"unique_token":"00000000000000000000000000000000","headers":{"h":"v"},'
        b'"group":"workers"}'
    ),
    "rate_reserved": (
        b'{"task":"send_email","payload":1,"attempt":1,"enqueued_at":1764412800.123,'
        b'"rate_reserved":true}'
    ),
    "surrogate": (
        b'{"task":"send_email","payload":"\\ud800 \\u00e9","attempt":1,'
        b'"enqueued_at":1764412800.123}'
    ),
    "retry": (
        b'{"lane":"high","task":"send_email","payload":{"big":1e400, "s" : "\\u00e9"},'
        b'"attempt":3,"enqueued_at":1764412800.123,"id":"t-9","unique_key":"k",'
        b'"unique_token":"tok","unique_for":60.0,"keep_result":30,"timeout":5,'
        b'"headers":{"h":"v"}}'
    ),
    "retry_for_group": (
        b'{"lane":"high","task":"send_email","payload":{"big":1e400, "s" : "\\u00e9"},'
        b'"attempt":3,"enqueued_at":1764412800.123,"id":"t-9","unique_key":"k",'
        b'"unique_token":"tok","unique_for":60.0,"keep_result":30,"timeout":5,'
        b'"headers":{"h":"v"},"group":"workers"}'
    ),
    "deferred": (
        b'{"lane":"high","task":"send_email","payload":{"big":1e400, "s" : "\\u00e9"},'
        b'"attempt":2,"enqueued_at":1764412800.123,"id":"t-9","unique_key":"k",'
        b'"unique_token":"tok","unique_for":60.0,"keep_result":30,"timeout":5,'
        b'"expires":1764412900,"headers":{"h":"v"},"rate_reserved":true}'
    ),
    "deferred_for_group": (
        b'{"lane":"high","task":"send_email","payload":{"big":1e400, "s" : "\\u00e9"},'
        b'"attempt":2,"enqueued_at":1764412800.123,"id":"t-9","unique_key":"k",'
        b'"unique_token":"tok","unique_for":60.0,"keep_result":30,"timeout":5,'
        b'"expires":1764412900,"headers":{"h":"v"},"group":"workers"}'
    ),
}


def test_every_writer_has_its_golden_bytes() -> None:
    assert WRITERS.keys() == GOLDEN.keys()


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_the_bytes_written_are_todays(kind: str) -> None:
    assert WRITERS[kind]() == GOLDEN[kind]


@pytest.mark.parametrize("kind", sorted(GOLDEN))
def test_the_golden_bytes_decode(kind: str) -> None:
    """Each golden message reads back (the lane of a lane's message is that of its
    stream entry, as the fetcher gives it)."""
    message = decode_message("1764412800123-0@high", {PAYLOAD_FIELD: GOLDEN[kind]})
    assert message.raw == GOLDEN[kind]
