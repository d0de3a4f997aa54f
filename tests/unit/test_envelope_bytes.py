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
    message_template,
    reencode_deferred,
    reencode_for_retry,
)
from trunner._wire.workflow import Literal, Results, StepRef
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


#: A stored workflow step whose only option is its step reference: a retry must keep it.
STORED_STEP = (
    b'{"task":"parse","payload":{"big":1e400},"attempt":1,"enqueued_at":1764412800.123,'
    b'"id":"w3f9a.17","expires":1764412900,"wf":["w3f9a",17,"18,20-22",true],"group":"g"}'
)
STEP = StepRef("w3f9a", 17, "18,20-22", keep=True)


def _stored() -> TaskMessage:
    return decode_message("1764412800123-0@high", {PAYLOAD_FIELD: STORED})


def _stored_step() -> TaskMessage:
    return decode_message("1764412800123-0", {PAYLOAD_FIELD: STORED_STEP})


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
    "step": lambda: encode_message(
        "parse",
        {"u": 1},
        enqueued_at=ENQUEUED_AT,
        task_id="w3f9a.17",
        options=MessageOptions(keep_result=30.0, workflow=STEP),
        headers={"h": "v"},
        group="g",
        max_bytes=MAX_BYTES,
        lane="high",
        rate_reserved=True,
    ),
    "step_output": lambda: encode_message(
        "store",
        1,
        enqueued_at=ENQUEUED_AT,
        task_id="w3f9a.2",
        options=MessageOptions(workflow=StepRef("w3f9a", 2)),
        group="g",
        max_bytes=MAX_BYTES,
    ),
    "step_surrogate": lambda: encode_message(
        "parse",
        "\ud800",
        enqueued_at=ENQUEUED_AT,
        task_id="w3f9a.17",
        options=MessageOptions(workflow=STEP),
        group="g",
        max_bytes=MAX_BYTES,
    ),
    "step_retry": lambda: reencode_for_retry(_stored_step(), 2, MAX_BYTES, "g"),
    "step_deferred": lambda: reencode_deferred(_stored_step(), rate_reserved=True, group="g"),
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
    "step": (
        b'{"lane":"high","task":"parse","payload":{"u":1},"attempt":1,'
        b'"enqueued_at":1764412800.123,"id":"w3f9a.17","keep_result":30.0,"headers":{"h":"v"},'
        b'"wf":["w3f9a",17,"18,20-22",true],"group":"g","rate_reserved":true}'
    ),
    "step_output": (
        b'{"task":"store","payload":1,"attempt":1,"enqueued_at":1764412800.123,'
        b'"id":"w3f9a.2","wf":["w3f9a",2,"",false],"group":"g"}'
    ),
    "step_surrogate": (
        b'{"task":"parse","payload":"\\ud800","attempt":1,"enqueued_at":1764412800.123,'
        b'"id":"w3f9a.17","wf":["w3f9a",17,"18,20-22",true],"group":"g"}'
    ),
    "step_retry": (
        b'{"task":"parse","payload":{"big":1e400},"attempt":2,"enqueued_at":1764412800.123,'
        b'"id":"w3f9a.17","wf":["w3f9a",17,"18,20-22",true],"group":"g"}'
    ),
    "step_deferred": (
        b'{"task":"parse","payload":{"big":1e400},"attempt":1,"enqueued_at":1764412800.123,'
        b'"id":"w3f9a.17","expires":1764412900,"wf":["w3f9a",17,"18,20-22",true],'
        b'"group":"g","rate_reserved":true}'
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


@pytest.mark.parametrize("kind", sorted(k for k in GOLDEN if k.startswith("step")))
def test_a_step_message_reads_back_with_its_step(kind: str) -> None:
    message = decode_message("1764412800123-0", {PAYLOAD_FIELD: GOLDEN[kind]})
    assert message.options.workflow == (StepRef("w3f9a", 2) if kind == "step_output" else STEP)
    assert message.group == "g"


#: The template of a chord's callback (design/workflows.md §2.4): its payload is the
#: results of nodes 0 to 9999 in a JSON array, its time the moment it is added.
TEMPLATES: dict[str, Callable[[], bytes]] = {
    "chord_callback": lambda: message_template(
        "merge",
        [Literal(b"["), Results(0, 9999, b","), Literal(b"]")],
        task_id="w3f9a.10000",
        options=MessageOptions(workflow=StepRef("w3f9a", 10000, keep=True)),
        group="g",
    ),
    "chain_step": lambda: message_template(
        "parse",
        [Results(16, 16)],
        task_id="w3f9a.17",
        options=MessageOptions(timeout=5.0, workflow=STEP),
        headers={"traceparent": "00-1"},
        group="g",
        lane="high",
    ),
}
GOLDEN_TEMPLATES: dict[str, bytes] = {
    "chord_callback": (
        b'L27:{"task":"merge","payload":[R0-9999,1:,L28:],"attempt":1,"enqueued_at":N'
        b'L61:,"id":"w3f9a.10000","wf":["w3f9a",10000,"",true],"group":"g"}'
    ),
    "chain_step": (
        b'L40:{"lane":"high","task":"parse","payload":R16-16,0:L27:,"attempt":1,'
        b'"enqueued_at":NL110:,"id":"w3f9a.17","timeout":5.0,"headers":{"traceparent":"00-1"},'
        b'"wf":["w3f9a",17,"18,20-22",true],"group":"g"}'
    ),
}


@pytest.mark.parametrize("kind", sorted(TEMPLATES))
def test_the_templates_written_are_todays(kind: str) -> None:
    assert TEMPLATES[kind]() == GOLDEN_TEMPLATES[kind]
