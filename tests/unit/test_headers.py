"""Message headers on the wire: what a dispatch may send, how a stored entry carries them,
and what a runner does with headers it cannot read."""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any

import pytest

import trunner
from trunner._redis import RawEntry
from trunner._wire.decode import (
    MessageDecodeError,
    decode_fields,
    decode_message,
    fields_of,
    message_from_fields,
    stored_headers,
)
from trunner._wire.envelope import NO_SIZE_LIMIT, encode_message, reencode_for_retry
from trunner._wire.headers import MAX_HEADERS, MAX_HEADERS_BYTES, NO_HEADERS, check_headers
from trunner._wire.inspection import dead_letter_of
from trunner.message import TaskMessage


def encode(headers: Any = None, **more: Any) -> bytes:
    return encode_message(
        "t", {"x": 1}, enqueued_at=1.5, headers=headers, max_bytes=NO_SIZE_LIMIT, **more
    )


def decode(raw: bytes, message_id: str = "1-0") -> TaskMessage:
    return decode_message(message_id, [b"payload", raw])


def test_headers_travel_in_the_message_and_come_back_read_only() -> None:
    raw = encode({"traceparent": "00-abc-def-01", "tenant": "é"})
    assert json.loads(raw)["headers"] == {"traceparent": "00-abc-def-01", "tenant": "é"}
    message = decode(raw)
    assert message.headers == {"traceparent": "00-abc-def-01", "tenant": "é"}
    assert isinstance(message.headers, MappingProxyType)
    with pytest.raises(TypeError):
        message.headers["tenant"] = "other"  # type: ignore[index]


def test_a_message_without_headers_keeps_the_layout_it_always_had() -> None:
    raw = encode()
    assert raw == b'{"task":"t","payload":{"x":1},"attempt":1,"enqueued_at":1.5}'
    assert encode({}) == raw, "empty headers are no headers"
    assert decode(raw).headers is NO_HEADERS


def test_an_entry_in_the_layout_before_headers_decodes_with_none() -> None:
    old = b'{"task":"t","payload":[1],"attempt":2,"enqueued_at":1.0,"id":"9-0"}'
    message = decode(old)
    assert (message.task_name, message.payload, message.attempt) == ("t", [1], 2)
    assert message.headers == {}
    fields = decode_fields("1-0", [b"payload", old], 1, None)
    assert fields is not None
    assert fields[9] is None


def test_stored_empty_headers_are_no_headers() -> None:
    raw = b'{"task":"t","payload":1,"headers":{}}'
    assert decode(raw).headers is NO_HEADERS


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ("a=b", "must be a mapping"),
        ([("a", "b")], "must be a mapping"),
        ({"a": 1}, "must map str to str"),
        ({1: "a"}, "must map str to str"),
        ({"a": None}, "must map str to str"),
        ({"": "a"}, "a header name is empty"),
        ({"a": "\ud800"}, "cannot be encoded as UTF-8"),
        ({f"h{i}": "" for i in range(MAX_HEADERS + 1)}, f"more than {MAX_HEADERS}"),
        ({"big": "x" * MAX_HEADERS_BYTES}, f"more than {MAX_HEADERS_BYTES}"),
    ],
)
def test_bad_headers_are_refused_before_anything_is_encoded(headers: Any, why: str) -> None:
    with pytest.raises(trunner.errors.InvalidHeaders, match=why) as caught:
        encode(headers)
    assert isinstance(caught.value, ValueError)
    assert "of task 't'" in str(caught.value)


def test_the_bounds_are_inclusive() -> None:
    overhead = len(b'{"k":""}')
    exact = {"k": "v" * (MAX_HEADERS_BYTES - overhead)}
    assert check_headers(exact) == exact
    assert decode(encode(exact)).headers == exact
    with pytest.raises(trunner.errors.InvalidHeaders):
        check_headers({"k": "v" * (MAX_HEADERS_BYTES - overhead + 1)})
    many = {f"h{i}": "" for i in range(MAX_HEADERS)}
    assert decode(encode(many)).headers == many
    # Bytes, not characters: "é" takes two.
    with pytest.raises(trunner.errors.InvalidHeaders):
        check_headers({"k": "é" * ((MAX_HEADERS_BYTES - overhead) // 2 + 1)})


def test_check_headers_copies_what_it_is_given() -> None:
    given = {"a": "b"}
    checked = check_headers(given)
    assert checked == given
    assert checked is not given
    assert check_headers(None) is None
    assert check_headers({}) is None
    assert check_headers(MappingProxyType({"a": "b"})) == {"a": "b"}


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ('"a=b"', "'headers' must be a JSON object, got str"),
        ("[]", "'headers' must be a JSON object, got list"),
        ('{"a":1}', "the header 'a' is not a string: int"),
        ('{"a":null}', "the header 'a' is not a string: NoneType"),
        ('{"":"x"}', "a header name is empty"),
        ('{"a":"\\ud800"}', "cannot be encoded as UTF-8"),
        (json.dumps({f"h{i}": "" for i in range(MAX_HEADERS + 1)}), "more than 64"),
        (json.dumps({"k": "x" * MAX_HEADERS_BYTES}), "more than 8192"),
    ],
)
def test_bad_headers_in_redis_make_the_entry_undecodable_with_the_reason(
    headers: str, reason: str
) -> None:
    """As for every other field of the envelope: the runner dead-letters the entry with
    the reason (``undecodable``) rather than guess."""
    raw = ('{"task":"t","payload":1,"headers":' + headers + "}").encode()
    assert decode_fields("1-0", [b"payload", raw], 1, None) is None
    with pytest.raises(MessageDecodeError) as caught:
        decode(raw)
    assert reason in caught.value.reason
    assert caught.value.message.raw == raw
    assert stored_headers(raw) == {}, "listings show none rather than fail"


def test_a_retry_and_a_replay_carry_the_same_headers() -> None:
    headers = {"traceparent": "00-1-2-01", "tenant": "acme"}
    first = decode(encode(headers, options=trunner.message.MessageOptions(timeout=3.0)))
    again = decode(reencode_for_retry(first, 2, NO_SIZE_LIMIT), "2-0")
    assert again.attempt == 2
    assert again.headers == headers
    assert again.task_id == "1-0"
    # A message that is not a stored one (a test's own) is encoded from its fields.
    own = TaskMessage("3-0", "t", [1], 1, 0.0, "3-0", headers={"a": "b"})
    assert decode(reencode_for_retry(own, 2, NO_SIZE_LIMIT)).headers == {"a": "b"}


def test_fields_carry_the_headers_both_ways() -> None:
    message = decode(encode({"a": "b"}))
    fields = fields_of(message)
    assert fields[9] == {"a": "b"}
    assert message_from_fields("1-0", 1, fields) == message
    plain = decode(encode())
    assert fields_of(plain)[9] is None


def test_a_task_message_built_by_hand_has_read_only_headers() -> None:
    message = TaskMessage("1-0", "t", None, 1, 0.0, "1-0", headers={"a": "b"})
    assert isinstance(message.headers, MappingProxyType)
    assert TaskMessage("1-0", "t", None, 1, 0.0, "1-0").headers is NO_HEADERS
    assert "headers" not in repr(message)


def test_a_dead_letter_shows_the_headers_of_its_message() -> None:
    raw = encode({"tenant": "acme"})
    entry = RawEntry("5-0", [b"payload", raw, b"task", b"t", b"reason", b"max retries"])
    letter = dead_letter_of(entry)
    assert letter.headers == {"tenant": "acme"}
    bad = RawEntry("6-0", [b"payload", b"{not json", b"reason", b"undecodable"])
    assert dead_letter_of(bad).headers == {}


def test_a_cron_schedule_carries_checked_headers() -> None:
    schedule = trunner.CronSchedule("s", "* * * * *", "t", None, headers={"source": "cron"})
    assert schedule.headers == {"source": "cron"}
    assert isinstance(schedule.headers, MappingProxyType)
    assert trunner.CronSchedule("s", "* * * * *", "t").headers == {}
    with pytest.raises(trunner.errors.InvalidHeaders):
        trunner.CronSchedule("s", "* * * * *", "t", headers={"a": 1})  # type: ignore[dict-item]
    tasks = trunner.TaskRegistry()
    made = tasks.cron("* * * * *", "t", headers={"k": "v"})
    assert made.headers == {"k": "v"}
