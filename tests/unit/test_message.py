"""The task message codec: encoding, decoding, and every way an entry can be bad."""

from __future__ import annotations

import collections
import datetime
import decimal
import enum
import json
import math
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trunner import InvalidPayload, PayloadTooLarge, TaskMessage, TrunnerError
from trunner._wire.decode import MessageDecodeError, _decode_checked, decode_message
from trunner._wire.envelope import PAYLOAD_FIELD, encode_message, reencode_for_retry
from trunner.errors import InvalidMessage

MAX = 1024 * 1024
NOW = 1764412800.123

Fields = Sequence[bytes] | Mapping[bytes, bytes] | None


def encode(payload: Any, **kwargs: Any) -> bytes:
    values: dict[str, Any] = {"enqueued_at": NOW, "max_bytes": MAX}
    values.update(kwargs)
    return encode_message("send_email", payload, **values)


def raw_entry(body: Any) -> list[bytes]:
    return [PAYLOAD_FIELD, json.dumps(body).encode("utf-8")]


def body(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"task": "t", "payload": {"n": 1}, "attempt": 1, "enqueued_at": NOW}
    values.update(overrides)
    return values


PAYLOADS: list[Any] = [
    None,
    True,
    False,
    0,
    -17,
    2**70,
    1.5,
    -0.0,
    1e-300,
    "",
    "hello",
    "h\u00e9llo \u2603 \U0001f600",
    'quotes " and \\ backslash\n',
    [],
    [1, "two", None, [3.0]],
    {},
    {"to": "a@example.com", "tags": ["x", "y"], "nested": {"deep": [{"k": None}]}},
]


def _with(raw: bytes) -> list[bytes]:
    return [b"payload", raw]


def _raw_of(fields: Fields) -> bytes:
    if fields is None:
        return b""
    if isinstance(fields, Mapping):
        return fields.get(PAYLOAD_FIELD, b"")
    for i in range(0, len(fields) - 1, 2):
        if fields[i] == PAYLOAD_FIELD:
            return fields[i + 1]
    return b""


def _circular() -> list[Any]:
    items: list[Any] = []
    items.append(items)
    return items


def decodes_or_raises_decode_error(fields: Fields, deliveries: int) -> TaskMessage | None:
    error: MessageDecodeError | None = None
    try:
        message = decode_message("42-0", fields, deliveries=deliveries, max_bytes=MAX)
    except MessageDecodeError as exc:
        error = exc
    if error is not None:
        assert error.message.task_name == ""
        assert error.message.message_id == "42-0"
        assert isinstance(error.reason, str)
        assert error.reason
        return None
    assert isinstance(message, TaskMessage)
    assert message.task_name
    assert message.attempt >= 1
    assert message.deliveries == deliveries
    assert math.isfinite(message.enqueued_at)
    return message


def decoded_both_ways(fields: Fields, deliveries: int, max_bytes: int | None) -> None:
    """The fast path of decode_message agrees with the full checks, result or reason."""
    fast: TaskMessage | str
    checked: TaskMessage | str
    try:
        fast = decode_message("42-0", fields, deliveries=deliveries, max_bytes=max_bytes)
    except MessageDecodeError as exc:
        fast = exc.reason
    try:
        checked = _decode_checked("42-0", fields, deliveries, max_bytes)
    except MessageDecodeError as exc:
        checked = exc.reason
    assert fast == checked
    if isinstance(fast, TaskMessage):
        assert isinstance(checked, TaskMessage)
        assert type(fast.payload) is type(checked.payload)
        assert type(fast.enqueued_at) is float
        assert math.copysign(1, fast.enqueued_at) == math.copysign(1, checked.enqueued_at)


# -- round trip ------------------------------------------------------------------------------


@pytest.mark.parametrize("payload", PAYLOADS)
def test_round_trip_flat_list(payload: Any) -> None:
    data = encode(payload)
    message = decode_message("1700000000000-0", [b"payload", data])
    assert isinstance(message, TaskMessage)
    assert message.message_id == "1700000000000-0"
    assert message.task_name == "send_email"
    assert message.payload == payload
    assert type(message.payload) is type(payload)
    assert message.attempt == 1
    assert message.enqueued_at == NOW
    assert message.task_id == "1700000000000-0"
    assert message.deliveries == 1
    assert message.raw == data


@pytest.mark.parametrize("payload", PAYLOADS)
def test_round_trip_dict_fields(payload: Any) -> None:
    data = encode(payload, attempt=3, task_id="task-1")
    message = decode_message("5-1", {b"payload": data})
    assert message.payload == payload
    assert message.task_name == "send_email"
    assert message.attempt == 3
    assert message.task_id == "task-1"
    assert message.raw == data


def test_encoded_form() -> None:
    data = encode({"to": "z\u00e9"}, attempt=2)
    assert json.loads(data) == {
        "task": "send_email",
        "payload": {"to": "z\u00e9"},
        "attempt": 2,
        "enqueued_at": NOW,
    }
    assert b" " not in data  # compact
    assert "z\u00e9".encode() in data  # UTF-8, not \u escapes
    assert json.loads(encode(1, task_id="abc"))["id"] == "abc"


def test_enqueued_at_is_kept_to_the_millisecond() -> None:
    message = decode_message("1-0", [b"payload", encode(1, enqueued_at=1.23456789)])
    assert message.enqueued_at == 1.235
    message = decode_message("1-0", [b"payload", encode(1, enqueued_at=1700000000)])
    assert message.enqueued_at == 1700000000.0
    assert isinstance(message.enqueued_at, float)


@pytest.mark.parametrize(
    "fields",
    [
        [b"payload", b"DATA"],
        (b"payload", b"DATA"),
        [b"other", b"x", b"payload", b"DATA"],
        [b"payload", b"DATA", b"other", b"x"],
        [b"other", b"payload", b"payload", b"DATA"],
        {b"payload": b"DATA"},
        {b"other": b"x", b"payload": b"DATA"},
    ],
)
def test_fields_as_flat_list_or_dict(fields: Any) -> None:
    data = encode({"k": "v"})

    def swap(item: bytes) -> bytes:
        return data if item == b"DATA" else item

    if isinstance(fields, dict):
        given_fields: Fields = {key: swap(value) for key, value in fields.items()}
    else:
        given_fields = [swap(item) for item in fields]
    message = decode_message("1-0", given_fields)
    assert message.payload == {"k": "v"}
    assert message.raw == data


def test_defaults_and_unknown_fields() -> None:
    raw = json.dumps({"task": "t", "payload": 1, "future": {"x": 1}}).encode()
    message = decode_message("9-9", [b"payload", raw])
    assert message.attempt == 1
    assert message.enqueued_at == 0.0
    assert message.task_id == "9-9"
    assert message.payload == 1


def test_integer_enqueued_at_is_accepted() -> None:
    message = decode_message("1-0", raw_entry(body(enqueued_at=1700000000)))
    assert message.enqueued_at == 1700000000.0
    assert isinstance(message.enqueued_at, float)


# -- task id and retries ---------------------------------------------------------------------


def test_task_id_defaults_to_the_entry_id_and_survives_retries() -> None:
    first = decode_message("100-0", [b"payload", encode({"n": 1})])
    assert first.task_id == "100-0"

    retry = reencode_for_retry(first, 2, MAX)
    second = decode_message("200-0", [b"payload", retry])
    assert second.message_id == "200-0"
    assert second.task_id == "100-0"
    assert second.attempt == 2
    assert second.payload == {"n": 1}
    assert second.task_name == "send_email"
    assert second.enqueued_at == NOW

    third = decode_message("300-0", [b"payload", reencode_for_retry(second, 3, MAX)])
    assert third.task_id == "100-0"
    assert third.attempt == 3
    assert third.enqueued_at == NOW


def test_explicit_task_id_is_used() -> None:
    message = decode_message("100-0", [b"payload", encode(1, task_id="delayed-7")])
    assert message.task_id == "delayed-7"
    again = decode_message("101-0", [b"payload", reencode_for_retry(message, 2, MAX)])
    assert again.task_id == "delayed-7"


def test_reencode_for_retry_respects_max_bytes() -> None:
    message = decode_message("1-0", [b"payload", encode("x" * 100)])
    with pytest.raises(PayloadTooLarge):
        reencode_for_retry(message, 2, 50)


@pytest.mark.parametrize(("stored", "deliveries"), [(1, 1), (1, 2), (2, 1), (2, 3), (5, 10)])
def test_a_crash_redelivery_is_not_an_attempt(stored: int, deliveries: int) -> None:
    data = encode({"n": 1}, attempt=stored)
    message = decode_message("1-0", [b"payload", data], deliveries=deliveries)
    assert message.attempt == stored
    assert message.deliveries == deliveries


def test_with_attempt() -> None:
    message = decode_message("1-0", [b"payload", encode(1)])
    later = message.with_attempt(5)
    assert later.attempt == 5
    assert message.attempt == 1
    assert later.payload == message.payload
    assert later.task_id == message.task_id


# -- bad entries -----------------------------------------------------------------------------

_FRAGMENT_NO_FIELD = "no 'payload' field"
_FRAGMENT_JSON = "not valid JSON"
_FRAGMENT_OBJECT = "not an object"
_FRAGMENT_TASK = "'task'"
_FRAGMENT_ATTEMPT = "'attempt'"
_FRAGMENT_ENQUEUED = "'enqueued_at'"
_FRAGMENT_ID = "'id'"
_ANY = ""  # invalid UTF-8: any readable reason


BAD_ENTRIES: list[Any] = [
    # missing payload field
    pytest.param(None, _FRAGMENT_NO_FIELD, id="fields-none"),
    pytest.param([], _FRAGMENT_NO_FIELD, id="empty-list"),
    pytest.param({}, _FRAGMENT_NO_FIELD, id="empty-dict"),
    pytest.param([b"other", b"x"], _FRAGMENT_NO_FIELD, id="other-field"),
    pytest.param({b"other": b"x"}, _FRAGMENT_NO_FIELD, id="other-field-dict"),
    pytest.param([b"payload"], _FRAGMENT_NO_FIELD, id="field-without-value"),
    pytest.param([b"x", b"payload"], _FRAGMENT_NO_FIELD, id="payload-as-a-value"),
    # invalid JSON
    pytest.param(_with(b""), _FRAGMENT_JSON, id="empty"),
    pytest.param(_with(b"{"), _FRAGMENT_JSON, id="truncated"),
    pytest.param(_with(b"not json"), _FRAGMENT_JSON, id="text"),
    pytest.param(_with(b"{'task': 't'}"), _FRAGMENT_JSON, id="single-quotes"),
    pytest.param(_with(b'{"task":"t","payload":1,}'), _FRAGMENT_JSON, id="trailing-comma"),
    pytest.param(_with(b'{"task":"t","payload":1} x'), _FRAGMENT_JSON, id="extra-data"),
    pytest.param(_with(b"[" * 100_000 + b"]" * 100_000), _FRAGMENT_JSON, id="deep-nesting"),
    # invalid UTF-8
    pytest.param(_with(b'{"task":"t\xff","payload":1}'), _ANY, id="utf8-ff"),
    pytest.param(_with(b'{"task":"t\xc3\x28","payload":1}'), _ANY, id="utf8-bad-cont"),
    pytest.param(_with(b'{"task":"t\xc0\xaf","payload":1}'), _ANY, id="utf8-overlong"),
    pytest.param(_with(b'{"task":"t\xe2\x82","payload":1}'), _ANY, id="utf8-truncated"),
    pytest.param(_with(b'{"task":"t","payload":"\xed\xa0\x80"}'), _ANY, id="utf8-surrogate"),
    pytest.param(_with('{"task":"t","payload":1}'.encode("utf-16")), _ANY, id="utf16-with-bom"),
    pytest.param(_with('{"task":"t","payload":1}'.encode("utf-16-le")), _ANY, id="utf16-le"),
    # not an object
    pytest.param(raw_entry([]), _FRAGMENT_OBJECT, id="list"),
    pytest.param(raw_entry([body()]), _FRAGMENT_OBJECT, id="list-of-object"),
    pytest.param(raw_entry("task"), _FRAGMENT_OBJECT, id="string"),
    pytest.param(raw_entry(1), _FRAGMENT_OBJECT, id="number"),
    pytest.param(raw_entry(None), _FRAGMENT_OBJECT, id="null"),
    pytest.param(raw_entry(True), _FRAGMENT_OBJECT, id="true"),
    # task
    pytest.param(raw_entry({"payload": 1}), _FRAGMENT_TASK, id="task-missing"),
    pytest.param(raw_entry(body(task="")), _FRAGMENT_TASK, id="task-empty"),
    pytest.param(raw_entry(body(task=None)), _FRAGMENT_TASK, id="task-null"),
    pytest.param(raw_entry(body(task=7)), _FRAGMENT_TASK, id="task-number"),
    pytest.param(raw_entry(body(task=True)), _FRAGMENT_TASK, id="task-bool"),
    pytest.param(raw_entry(body(task=["t"])), _FRAGMENT_TASK, id="task-list"),
    pytest.param(raw_entry(body(task={"name": "t"})), _FRAGMENT_TASK, id="task-object"),
    # payload key
    pytest.param(raw_entry({"task": "t"}), "'payload' is missing", id="payload-key-missing"),
    pytest.param(
        raw_entry({"task": "t", "attempt": 1, "enqueued_at": NOW}),
        "'payload' is missing",
        id="payload-key-missing-full",
    ),
    # attempt
    pytest.param(raw_entry(body(attempt=0)), _FRAGMENT_ATTEMPT, id="attempt-0"),
    pytest.param(raw_entry(body(attempt=-1)), _FRAGMENT_ATTEMPT, id="attempt-negative"),
    pytest.param(raw_entry(body(attempt=True)), _FRAGMENT_ATTEMPT, id="attempt-true"),
    pytest.param(raw_entry(body(attempt=False)), _FRAGMENT_ATTEMPT, id="attempt-false"),
    pytest.param(raw_entry(body(attempt=1.0)), _FRAGMENT_ATTEMPT, id="attempt-float"),
    pytest.param(raw_entry(body(attempt=2.5)), _FRAGMENT_ATTEMPT, id="attempt-fraction"),
    pytest.param(raw_entry(body(attempt="2")), _FRAGMENT_ATTEMPT, id="attempt-string"),
    pytest.param(raw_entry(body(attempt=None)), _FRAGMENT_ATTEMPT, id="attempt-null"),
    pytest.param(raw_entry(body(attempt=[1])), _FRAGMENT_ATTEMPT, id="attempt-list"),
    # enqueued_at
    # NaN and Infinity are not JSON: refused wherever they appear (the encoder refuses them).
    pytest.param(_with(b'{"task":"t","payload":1,"enqueued_at":NaN}'), _FRAGMENT_JSON, id="nan"),
    pytest.param(
        _with(b'{"task":"t","payload":1,"enqueued_at":Infinity}'), _FRAGMENT_JSON, id="inf"
    ),
    pytest.param(
        _with(b'{"task":"t","payload":1,"enqueued_at":-Infinity}'), _FRAGMENT_JSON, id="-inf"
    ),
    pytest.param(_with(b'{"task":"t","payload":[NaN]}'), _FRAGMENT_JSON, id="nan-payload"),
    pytest.param(
        _with(b'{"task":"t","payload":1,"enqueued_at":1e400}'), _FRAGMENT_ENQUEUED, id="1e400"
    ),
    pytest.param(
        _with(b'{"task":"t","payload":1,"enqueued_at":1' + b"0" * 400 + b"}"),
        _FRAGMENT_ENQUEUED,
        id="enqueued-at-int-too-large-for-a-float",
    ),
    pytest.param(raw_entry(body(enqueued_at="1700000000")), _FRAGMENT_ENQUEUED, id="at-string"),
    pytest.param(raw_entry(body(enqueued_at=None)), _FRAGMENT_ENQUEUED, id="at-null"),
    pytest.param(raw_entry(body(enqueued_at=True)), _FRAGMENT_ENQUEUED, id="at-bool"),
    pytest.param(raw_entry(body(enqueued_at=[1.0])), _FRAGMENT_ENQUEUED, id="at-list"),
    pytest.param(raw_entry(body(enqueued_at={})), _FRAGMENT_ENQUEUED, id="at-object"),
    # id
    pytest.param(raw_entry(body(id="")), _FRAGMENT_ID, id="id-empty"),
    pytest.param(raw_entry(body(id=None)), _FRAGMENT_ID, id="id-null"),
    pytest.param(raw_entry(body(id=5)), _FRAGMENT_ID, id="id-number"),
    pytest.param(raw_entry(body(id=["x"])), _FRAGMENT_ID, id="id-list"),
]


@pytest.mark.parametrize("deliveries", [1, 3])
@pytest.mark.parametrize(("fields", "fragment"), BAD_ENTRIES)
def test_bad_entry_raises_message_decode_error(
    fields: Fields, fragment: str, deliveries: int
) -> None:
    with pytest.raises(MessageDecodeError) as info:
        decode_message("1700-5", fields, deliveries=deliveries)
    error = info.value
    assert isinstance(error, InvalidMessage)
    assert isinstance(error, ValueError)
    assert isinstance(error, TrunnerError)
    assert isinstance(error.reason, str)
    assert error.reason.strip()
    assert fragment in error.reason
    assert "1700-5" in str(error)
    assert error.reason in str(error)
    standin = error.message
    assert isinstance(standin, TaskMessage)
    assert standin.message_id == "1700-5"
    assert standin.task_name == ""
    assert standin.payload is None
    assert standin.task_id == "1700-5"
    assert standin.deliveries == deliveries
    assert standin.attempt == deliveries
    assert standin.enqueued_at == 0.0
    assert standin.raw == _raw_of(fields)


def test_oversized_entry_with_max_bytes() -> None:
    data = encode("x" * 1000)
    assert decode_message("1-0", [b"payload", data], max_bytes=len(data)).payload == "x" * 1000
    assert decode_message("1-0", [b"payload", data]).payload == "x" * 1000
    with pytest.raises(MessageDecodeError) as info:
        decode_message("1-0", [b"payload", data], max_bytes=len(data) - 1, deliveries=2)
    assert str(len(data)) in info.value.reason
    assert str(len(data) - 1) in info.value.reason
    assert info.value.message.raw == data
    assert info.value.message.task_name == ""
    assert info.value.message.attempt == 2


def test_oversized_check_comes_before_parsing() -> None:
    with pytest.raises(MessageDecodeError, match="more than 3"):
        decode_message("1-0", [b"payload", b"not json at all"], max_bytes=3)


# -- encoding errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param({1, 2}, id="set"),
        pytest.param(object(), id="object"),
        pytest.param(float("nan"), id="nan"),
        pytest.param(float("inf"), id="inf"),
        pytest.param(float("-inf"), id="-inf"),
        pytest.param({"deep": [1, float("nan")]}, id="nested-nan"),
        pytest.param(b"bytes", id="bytes"),
        pytest.param({"k": {1, 2}}, id="nested-set"),
        pytest.param({(1, 2): "tuple key"}, id="tuple-key"),
        pytest.param(_circular(), id="circular"),
    ],
)
def test_encode_rejects_non_json_payloads(payload: Any) -> None:
    with pytest.raises(InvalidPayload, match="send_email") as info:
        encode_message("send_email", payload, enqueued_at=NOW, max_bytes=MAX)
    assert not isinstance(info.value, PayloadTooLarge)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, TrunnerError)


def test_encode_rejects_too_large_payloads() -> None:
    assert issubclass(PayloadTooLarge, InvalidPayload)
    size = len(encode("x" * 500))
    assert len(encode("x" * 500, max_bytes=size)) == size
    with pytest.raises(PayloadTooLarge, match="max_payload_bytes") as info:
        encode("x" * 500, max_bytes=size - 1)
    assert isinstance(info.value, InvalidPayload)
    assert str(size) in str(info.value)
    with pytest.raises(InvalidPayload):
        encode("x" * 500, max_bytes=size - 1)


def test_size_limit_counts_utf8_bytes() -> None:
    size = len(encode("\u2603" * 100))  # three bytes each
    assert size > 300
    with pytest.raises(PayloadTooLarge):
        encode("\u2603" * 100, max_bytes=size - 1)


# -- properties ------------------------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=20,
)
known_keys = st.sampled_from(["task", "payload", "attempt", "enqueued_at", "id"])
json_objects = st.dictionaries(known_keys | st.text(max_size=8), json_values, max_size=8)


@given(raw=st.binary(), deliveries=st.integers(1, 10))
def test_any_bytes_decode_or_raise_decode_error(raw: bytes, deliveries: int) -> None:
    for fields in ([b"payload", raw], {b"payload": raw}):
        message = decodes_or_raises_decode_error(fields, deliveries)
        if message is not None:
            assert message.raw == raw


@given(value=json_values)
def test_any_json_value_decodes_or_raises_decode_error(value: Any) -> None:
    decodes_or_raises_decode_error(raw_entry(value), 1)


@given(obj=json_objects, deliveries=st.integers(1, 10))
def test_any_json_object_decodes_or_raises_decode_error(obj: Any, deliveries: int) -> None:
    decodes_or_raises_decode_error(raw_entry(obj), deliveries)


@given(overrides=json_objects, deliveries=st.integers(1, 10))
def test_valid_message_with_random_fields_decodes_or_raises_decode_error(
    overrides: dict[str, Any], deliveries: int
) -> None:
    message = decodes_or_raises_decode_error(raw_entry(body(**overrides)), deliveries)
    if message is not None:
        # whatever decodes can be re-encoded for its retry
        again = decode_message("43-0", [b"payload", reencode_for_retry(message, 2, MAX)])
        assert again.task_name == message.task_name
        assert again.payload == message.payload
        assert again.task_id == message.task_id


unique_keys = st.sampled_from(["unique_key", "unique_token"])


@given(
    overrides=st.dictionaries(known_keys | unique_keys | st.text(max_size=8), json_values),
    deliveries=st.integers(-1, 10),
    max_bytes=st.none() | st.integers(0, 200),
    padding=st.sampled_from(["", " ", "\n", "x"]),
)
def test_fast_path_agrees_with_the_full_checks(
    overrides: dict[str, Any], deliveries: int, max_bytes: int | None, padding: str
) -> None:
    data = json.dumps(body(**overrides), ensure_ascii=False).encode("utf-8")
    for raw in (data, padding.encode() + data, data + padding.encode()):
        not_bytes: Any = bytearray(raw)
        variants: list[Fields] = [
            [PAYLOAD_FIELD, raw],
            {PAYLOAD_FIELD: raw},
            [b"other", b"x", PAYLOAD_FIELD, raw],
            [PAYLOAD_FIELD, not_bytes],
        ]
        for fields in variants:
            decoded_both_ways(fields, deliveries, max_bytes)


@given(raw=st.binary(), deliveries=st.integers(1, 3))
def test_fast_path_agrees_with_the_full_checks_on_any_bytes(raw: bytes, deliveries: int) -> None:
    decoded_both_ways([PAYLOAD_FIELD, raw], deliveries, MAX)


@pytest.mark.parametrize(
    "text",
    [
        '{"task":"t","payload":1,"enqueued_at":1e400}',
        '{"task":"t","payload":1,"enqueued_at":-1e400}',
        '{"task":"t","payload":1,"enqueued_at":NaN}',
        '{"task":"t","payload":1,"enqueued_at":Infinity}',
        '{"task":"t","payload":1,"enqueued_at":1700000000}',
        '{"task":"t","payload":1,"enqueued_at":' + "9" * 400 + "}",
        '{"task":"t","payload":1,"enqueued_at":true}',
        '{"task":"t","payload":1,"attempt":true}',
        '{"task":"t","payload":1,"attempt":1.0}',
        '{"task":"t","payload":1,"attempt":0}',
        '{"task":"t","payload":1,"id":""}',
        '{"task":"t","payload":1,"unique_key":"k"}',
        '{"task":"t","payload":1,"unique_key":"k","unique_token":"x"}',
        '{"task":"t","payload":1,"unique_key":"","unique_token":"x"}',
        '{"task":"t","payload":1,"unique_key":null,"unique_token":5}',
        '{"task":"t","task":"u","payload":1}',
        '{"task":"t","payload":1} ',
        ' {"task":"t","payload":1}',
        '{"task":"t","payload":1}{}',
        '{"task":"t"}',
        '{"task":"","payload":1}',
        "[" * 100_000,
    ],
)
def test_fast_path_agrees_with_the_full_checks_on_edge_cases(text: str) -> None:
    for deliveries in (0, 1, 2):
        decoded_both_ways([PAYLOAD_FIELD, text.encode()], deliveries, MAX)


def test_a_decoded_message_can_be_reencoded_for_retry() -> None:
    # JSON escapes of a lone surrogate are valid UTF-8 and parse; the codec must then either
    # reject the entry as undecodable or be able to write its retry.
    raw = b'{"task":"t","payload":"\\ud800"}'
    try:
        message = decode_message("1-0", [b"payload", raw])
    except MessageDecodeError:
        return
    reencode_for_retry(message, 2, MAX)


round_trip_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)


@given(
    task_name=st.text(min_size=1, max_size=20),
    payload=round_trip_values,
    attempt=st.integers(1, 10**6),
    enqueued_at=st.floats(0, 4e9),
    task_id=st.none() | st.text(min_size=1, max_size=20),
)
def test_encode_then_decode_returns_the_same_message(
    task_name: str, payload: Any, attempt: int, enqueued_at: float, task_id: str | None
) -> None:
    data = encode_message(
        task_name, payload, attempt=attempt, enqueued_at=enqueued_at, task_id=task_id, max_bytes=MAX
    )
    message = decode_message("77-0", {b"payload": data})
    assert message.payload == payload
    assert message.task_name == task_name
    assert message.attempt == attempt
    assert message.enqueued_at == round(enqueued_at, 3)
    assert message.task_id == (task_id if task_id is not None else "77-0")
    assert message.raw == data


def test_lone_surrogates_are_escaped_and_round_trip() -> None:
    """Valid in a Python str and in a JSON escape, not in UTF-8: sent as ASCII JSON."""
    data = encode_message("t", {"s": "a\ud800b", "u": "é"}, enqueued_at=NOW, max_bytes=MAX)
    data.decode("ascii")
    message = decode_message("1-0", [b"payload", data])
    assert message.payload == {"s": "a\ud800b", "u": "é"}


class Colour(enum.Enum):
    RED = "red"


class Size(enum.IntEnum):
    LARGE = 3


class Mode(enum.StrEnum):
    FAST = "fast"


@pytest.mark.parametrize(
    ("payload", "said"),
    [
        (
            {"items": [1, 2, 3, decimal.Decimal("9.99")]},
            'payload["items"][3] is a Decimal: send str(value)',
        ),
        ({"at": datetime.datetime(2030, 1, 1)}, 'payload["at"] is a datetime: send value.iso'),
        ({"on": [datetime.date(2030, 1, 1)]}, 'payload["on"][0] is a date: send value.iso'),
        ({"id": uuid.UUID(int=1)}, 'payload["id"] is a UUID: send str(value)'),
        ({"c": Colour.RED}, 'payload["c"] is an Enum member (Colour.RED): send value.value'),
        # Members of int and str enums: the JSON encoder would silently send their values.
        ([Size.LARGE], "payload[0] is an Enum member (Size.LARGE): send value.value"),
        ({"m": {"n": Mode.FAST}}, 'payload["m"]["n"] is an Enum member (Mode.FAST)'),
        ({Size.LARGE: 1}, "a key of payload is an Enum member (Size.LARGE)"),
        ({"tags": {"a"}}, 'payload["tags"] is a set: send a list'),
        ({"tags": frozenset()}, 'payload["tags"] is a frozenset: send a list'),
        ({"raw": b"x"}, 'payload["raw"] is bytes: send text'),
        ([1.0, float("nan")], "payload[1] is nan: JSON has no NaN or Infinity"),
        (object(), "payload is an object: send its data as JSON values"),
        (_circular(), "payload[0] is a reference back to a container it is in"),
    ],
)
def test_a_payload_that_cannot_be_sent_says_where_and_what_to_send(payload: Any, said: str) -> None:
    with pytest.raises(InvalidPayload) as info:
        encode_message("report", payload, enqueued_at=NOW, max_bytes=MAX)
    assert str(info.value).startswith("payload of task 'report' is not JSON-serializable: ")
    assert said in str(info.value)


def test_json_values_and_their_containers_are_sent_as_before() -> None:
    payload = collections.OrderedDict(a=(1, 2), b=collections.defaultdict(list, c=[True]))
    assert json.loads(encode_message("t", payload, enqueued_at=NOW, max_bytes=MAX))["payload"] == {
        "a": [1, 2],
        "b": {"c": [True]},
    }
