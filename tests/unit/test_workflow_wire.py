"""The stored forms of workflows (trunner/_wire/workflow.py): the step reference a step's
message carries, through encoding, decoding, retries and deferrals; refused when it is
bad, with the reason, whichever way it is read; templates and their parts; a workflow's
keys. Their exact bytes are in test_envelope_bytes.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trunner._wire.decode import MessageDecodeError, decode_fields, decode_message
from trunner._wire.envelope import (
    NO_SIZE_LIMIT,
    PAYLOAD_FIELD,
    encode_message,
    message_template,
    reencode_deferred,
    reencode_for_retry,
)
from trunner._wire.keys import Keys, hash_tag
from trunner._wire.workflow import (
    MAX_NODE,
    NOW,
    Literal,
    Now,
    Part,
    Results,
    StepRef,
    WorkflowKeys,
    decode_template,
    encode_template,
    read_step_ref,
)
from trunner.message import MessageOptions

AT = 1764412800.123

ids = st.text(st.characters(codec="utf-8", exclude_categories=["Zs", "Zl", "Zp", "Cc"]), min_size=1)
nodes = st.integers(0, MAX_NODE - 100)


@st.composite
def step_refs(draw: st.DrawFn) -> StepRef:
    node = draw(nodes)
    ranges = []
    low = node + 1
    for _ in range(draw(st.integers(0, 3))):
        first = draw(st.integers(low, low + 20))
        last = draw(st.integers(first, first + 5))
        ranges.append(str(first) if first == last else f"{first}-{last}")
        low = last + 1
    return StepRef(draw(ids), node, ",".join(ranges), draw(st.booleans()))


def _decode(data: bytes, message_id: str = "1-0") -> Any:
    return decode_message(message_id, {PAYLOAD_FIELD: data})


@given(
    ref=step_refs(),
    payload=st.none() | st.integers() | st.text() | st.lists(st.integers(), max_size=3),
    keep=st.none() | st.floats(0.5, 1e6),
    group=st.none() | st.sampled_from(["g", "workers"]),
    lane=st.sampled_from(["default", "high"]),
    headers=st.none() | st.dictionaries(st.sampled_from(["a", "b"]), st.text(), min_size=1),
)
def test_a_step_survives_decoding_retries_and_deferrals(
    ref: StepRef,
    payload: Any,
    keep: float | None,
    group: str | None,
    lane: str,
    headers: Mapping[str, str] | None,
) -> None:
    data = encode_message(
        "parse",
        payload,
        enqueued_at=AT,
        task_id=f"{ref.workflow}.{ref.node}",
        options=MessageOptions(keep_result=keep, workflow=ref),
        headers=headers,
        group=group,
        max_bytes=NO_SIZE_LIMIT,
        lane=lane,
    )
    message = _decode(data, "1-0" if lane == "default" else f"1-0@{lane}")
    assert message.options.workflow == ref
    assert message.options.keep_result == keep
    if group is not None:  # the fast path reads it for its own group only
        assert decode_fields("1-0", [PAYLOAD_FIELD, data], 1, None, group) is not None
    retried = _decode(reencode_for_retry(message, 2, NO_SIZE_LIMIT, group))
    assert (retried.attempt, retried.options.workflow, retried.payload) == (2, ref, payload)
    deferred = _decode(reencode_deferred(message, rate_reserved=True, group=group))
    assert (deferred.attempt, deferred.options, deferred.payload) == (1, message.options, payload)


def test_a_step_reference_is_all_a_retry_keeps_of_the_options_but_expires() -> None:
    ref = StepRef("w1", 0, "1")
    options = MessageOptions(expires=AT + 60, workflow=ref)
    data = encode_message(
        "t", 1, enqueued_at=AT, options=options, max_bytes=NO_SIZE_LIMIT, task_id="w1.0"
    )
    retried = _decode(reencode_for_retry(_decode(data), 2, NO_SIZE_LIMIT))
    assert retried.options == MessageOptions(workflow=ref)


def test_a_message_with_and_without_its_step_differs_by_the_member_alone() -> None:
    """The member is added before ``group``: nothing else of the bytes moves (a plain
    message's bytes are test_envelope_bytes.py's, unchanged)."""
    common: dict[str, Any] = {"enqueued_at": AT, "group": "g", "max_bytes": NO_SIZE_LIMIT}
    plain = encode_message("t", {"a": 1}, options=MessageOptions(timeout=5.0), **common)
    step = encode_message(
        "t", {"a": 1}, options=MessageOptions(timeout=5.0, workflow=StepRef("w", 3)), **common
    )
    assert step.replace(b',"wf":["w",3,"",false]', b"") == plain
    assert b'"wf"' not in plain


def test_a_step_read_by_python_json_is_the_same_step() -> None:
    """A message msgspec does not read (a lone surrogate escape in its payload) is read
    by Python's json, its ``wf`` member too."""
    ref = StepRef("w1", 4, "5-6", keep=True)
    data = encode_message(
        "t",
        "\ud800",
        enqueued_at=AT,
        options=MessageOptions(workflow=ref),
        max_bytes=NO_SIZE_LIMIT,
        task_id="w1.4",
    )
    assert b"\\ud800" in data
    message = _decode(data)
    assert (message.payload, message.options.workflow) == ("\ud800", ref)


BAD_STEPS: dict[str, Any] = {
    "not an array": "w1",
    "an object": {"workflow": "w1", "node": 1},
    "too short": ["w1"],
    "empty id": ["", 1],
    "id with a space": ["w 1", 1],
    "id not a str": [5, 1],
    "id with a lone surrogate": ["w\ud800", 1],
    "node negative": ["w1", -1],
    "node a bool": ["w1", True],
    "node a float": ["w1", 1.0],
    "node too large": ["w1", MAX_NODE + 1],
    "next not a str": ["w1", 1, 2],
    "next not indices": ["w1", 1, "2,x"],
    "next with a space": ["w1", 1, "2, 3"],
    "next before its node": ["w1", 5, "4"],
    "next on its node": ["w1", 5, "5"],
    "next a range backwards": ["w1", 5, "9-7"],
    "next past the largest node": ["w1", 5, str(MAX_NODE + 1)],
    "keep not a bool": ["w1", 1, "", 1],
}


@pytest.mark.parametrize("why", sorted(BAD_STEPS))
def test_a_bad_step_is_refused_with_the_reason_whichever_way_it_is_read(why: str) -> None:
    body = {"task": "t", "payload": 1, "attempt": 1, "enqueued_at": AT, "wf": BAD_STEPS[why]}
    data = json.dumps(body).encode()
    assert decode_fields("1-0", [PAYLOAD_FIELD, data], 1, None) is None
    with pytest.raises(MessageDecodeError, match="'wf' is not a workflow step") as caught:
        _decode(data)
    assert caught.value.message.task_name == ""  # a stand-in: the message is given up
    with pytest.raises(ValueError, match="'wf' is not a workflow step"):
        read_step_ref(BAD_STEPS[why])


def test_a_null_step_is_no_step() -> None:
    data = b'{"task":"t","payload":1,"wf":null}'
    assert _decode(data).options == MessageOptions()
    assert read_step_ref(None) is None


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("", 1), "workflow id"),
        (("w\t1", 1), "workflow id"),
        (("w1", -1), "node"),
        (("w1", True), "node"),
        (("w1", 1, "1"), "after it"),
        (("w1", 1, "3,3"), "apart"),
        (("w1", 1, "3-5,4"), "apart"),
        (("w1", 1, "5,3"), "ascending"),
        (("w1", 1, "a"), "indices and ranges"),
    ],
)
def test_a_bad_step_cannot_be_made(args: tuple[Any, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        StepRef(*args)


def test_the_successors_of_a_step_are_its_indices_and_ranges() -> None:
    assert list(StepRef("w", 1, "2,4-6,9").successors()) == [2, 4, 5, 6, 9]
    assert list(StepRef("w", 1).successors()) == []
    assert msgspec.json.encode(StepRef("w", 1, "2")) == b'["w",1,"2",false]'


# -- templates --------------------------------------------------------------------------------

byte_strings = st.binary(max_size=12)
parts = st.lists(
    st.builds(Literal, byte_strings)
    | st.builds(lambda a, n, s: Results(a, a + n, s), nodes, st.integers(0, 50), byte_strings)
    | st.just(NOW),
    max_size=8,
)


def _joined(items: list[Part]) -> list[Part]:
    """``items`` with adjacent literals joined and empty ones left out."""
    out: list[Part] = []
    for item in items:
        last = out[-1] if out else None
        if isinstance(item, Literal) and isinstance(last, Literal):
            out[-1] = Literal(last.data + item.data)
        elif not isinstance(item, Literal) or item.data:
            out.append(item)
    return out


@given(parts)
def test_a_template_reads_back_as_its_parts(items: list[Part]) -> None:
    data = encode_template(items)
    assert decode_template(data) == _joined(items)
    assert encode_template(decode_template(data)) == data


@pytest.mark.parametrize(
    "data",
    [
        b"X",
        b"L",
        b"L3:ab",
        b"L03:abc",
        b"L-1:",
        b"R1-2",
        b"R1-2,1:",
        b"R01-2,0:",
        b"R1,0:",
        b"NN L",
    ],
)
def test_a_template_that_is_none_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError, match="template"):
        decode_template(data)


def test_results_run_forward() -> None:
    with pytest.raises(ValueError, match="first <= last"):
        Results(3, 2)
    assert encode_template([Now(), Literal(b""), Results(0, 0)]) == b"NR0-0,0:"


def _assemble(template: bytes, results: Mapping[int, bytes], now: float) -> bytes:
    """What the script does with a template (the model its tests will use)."""
    out = []
    for part in decode_template(template):
        if isinstance(part, Literal):
            out.append(part.data)
        elif isinstance(part, Results):
            out.append(part.sep.join(results[i] for i in range(part.first, part.last + 1)))
        else:
            out.append(b"%.3f" % now)
    return b"".join(out)


@given(
    results=st.lists(
        st.none() | st.integers(-(2**70), 2**70) | st.text() | st.booleans(), min_size=1
    ),
    lane=st.sampled_from(["default", "low"]),
)
def test_an_assembled_template_is_the_message_of_its_results(results: list[Any], lane: str) -> None:
    """The callback of a group gets the list of their results, each byte for byte as its
    codec wrote it, in a message that reads as the one a dispatch writes."""
    ref = StepRef("w1", len(results), keep=True)
    options = MessageOptions(timeout=9.0, workflow=ref)
    template = message_template(
        "merge",
        [Literal(b"["), Results(0, len(results) - 1, b","), Literal(b"]")],
        task_id=f"w1.{len(results)}",
        options=options,
        group="g",
        headers={"h": "v"},
        lane=lane,
    )
    texts = {i: json.dumps(r, separators=(",", ":")).encode() for i, r in enumerate(results)}
    message_id = "1-0" if lane == "default" else f"1-0@{lane}"
    got = _decode(_assemble(template, texts, AT), message_id)
    want = _decode(
        encode_message(
            "merge",
            results,
            enqueued_at=AT,
            task_id=f"w1.{len(results)}",
            options=options,
            group="g",
            headers={"h": "v"},
            max_bytes=NO_SIZE_LIMIT,
            lane=lane,
        ),
        message_id,
    )
    assert got.payload == results
    assert attrs.evolve(got, raw=b"") == attrs.evolve(want, raw=b"")


# -- keys -------------------------------------------------------------------------------------


@pytest.mark.parametrize("keys", [Keys("t", "g"), Keys("t", "g", "q")])
def test_a_workflows_keys_are_its_groups_own_in_the_queues_slot(keys: Keys) -> None:
    names = keys._workflow("w3f9a").names()
    assert names[0] == keys.task("x").removesuffix("task:x") + "wf:w3f9a"
    assert names[1:] == tuple(f"{names[0]}:{n}" for n in ("plan", "marks", "res", "err"))
    assert {hash_tag(n) for n in names} == {keys.queue}
    assert keys._workflow("w3f9a") == WorkflowKeys.at(names[0].removesuffix("w3f9a"), "w3f9a")


@pytest.mark.parametrize("bad", ["", "w 1", "w\n", "w\ud800"])
def test_a_workflow_id_that_is_none_names_no_keys(bad: str) -> None:
    with pytest.raises(ValueError, match=r"workflow id|surrogate"):
        Keys("t", "g")._workflow(bad)


def test_a_step_written_by_pythons_json_carries_its_step() -> None:
    """A float msgspec writes otherwise than json (from 1e16) has the message written by
    json: the step goes as the same array."""
    ref = StepRef("w1", 4, "5", keep=True)
    data = encode_message(
        "t",
        1,
        enqueued_at=AT,
        options=MessageOptions(keep_result=1e17, workflow=ref),
        max_bytes=NO_SIZE_LIMIT,
        task_id="w1.4",
    )
    assert b'"keep_result":1e+17,"wf":["w1",4,"5",true]}' in data
    assert _decode(data).options == MessageOptions(keep_result=1e17, workflow=ref)
