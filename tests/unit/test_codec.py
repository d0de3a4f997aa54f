"""The typed codec of task payloads and results (codec.py), without Redis: what a task's
annotations make of the values that go through JSON, and what they refuse, with which
words."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import uuid
from typing import Any, Literal, TypedDict

import attrs
import pytest

import trunner
from trunner._wire.codec import TypeCodec, codec_for, untyped


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@attrs.frozen
class Size:
    width: int
    height: int


@dataclasses.dataclass(frozen=True)
class Owner:
    id: uuid.UUID
    name: str


class Tags(TypedDict):
    names: list[str]
    weight: float


@attrs.frozen
class Order:
    owner: Owner
    sizes: list[Size]
    colour: Colour
    at: datetime.datetime
    on: datetime.date
    price: decimal.Decimal
    tags: Tags
    codes: frozenset[int]
    note: str | None = None
    kind: Literal["thumb", "full"] = "thumb"


def an_order() -> Order:
    return Order(
        owner=Owner(uuid.UUID("12345678-1234-5678-1234-567812345678"), "ada"),
        sizes=[Size(64, 48), Size(128, 96)],
        colour=Colour.BLUE,
        at=datetime.datetime(2026, 12, 1, 13, 30, 5, 120000, tzinfo=datetime.UTC),
        on=datetime.date(2026, 12, 24),
        price=decimal.Decimal("19.990"),
        tags={"names": ["a", "b"], "weight": 0.5},
        codes=frozenset({3, 1, 2}),
    )


def through_json(codec: TypeCodec, value: Any) -> Any:
    """``value`` as a dispatch sends it and a runner decodes it."""
    return codec.decode(json.loads(json.dumps(codec.encode(value))))


def test_a_nested_typed_value_survives_the_round_trip_with_its_types() -> None:
    codec = TypeCodec(Order)
    order = an_order()
    back = through_json(codec, order)
    assert back == order
    assert type(back.owner) is Owner
    assert type(back.owner.id) is uuid.UUID
    assert type(back.at) is datetime.datetime
    assert back.at.tzinfo is not None
    assert type(back.price) is decimal.Decimal
    assert str(back.price) == "19.990"
    assert back.colour is Colour.BLUE
    assert type(back.codes) is frozenset


@pytest.mark.parametrize(
    ("declared", "value"),
    [
        (int, 7),
        (str, "é\u2028"),
        (float, 0.1),
        (bool, True),
        (list[int], [1, 2]),
        (tuple[int, str], (1, "x")),
        (dict[str, Size], {"a": Size(1, 2)}),
        (set[str], {"x", "y"}),
        (uuid.UUID, uuid.UUID(int=5)),
        (datetime.date, datetime.date(2000, 2, 29)),
        (decimal.Decimal, decimal.Decimal("-0.000001")),
        (Colour, Colour.RED),
        (Size | None, None),
        (Tags, {"names": [], "weight": 1.0}),
    ],
)
def test_values_of_each_kind_come_back_equal_and_of_their_type(declared: Any, value: Any) -> None:
    back = through_json(TypeCodec(declared), value)
    assert back == value
    assert type(back) is type(value)


@pytest.mark.parametrize(
    ("wire", "where"),
    [
        ({"width": "64", "height": 48}, "$.width"),
        ({"width": 64}, "height"),
        ([64, 48], "object"),
    ],
)
def test_a_value_that_does_not_fit_says_where(wire: Any, where: str) -> None:
    with pytest.raises(trunner.InvalidPayload) as info:
        TypeCodec(Size).decode(wire)
    assert where in str(info.value)
    assert "Size" in str(info.value)


def test_validation_is_strict_no_silent_coercion() -> None:
    with pytest.raises(trunner.InvalidPayload):
        TypeCodec(int).decode("7")
    with pytest.raises(trunner.InvalidPayload):
        TypeCodec(Colour).decode("green")
    with pytest.raises(trunner.InvalidPayload):
        TypeCodec(Literal["thumb", "full"]).decode("half")


def test_any_and_missing_annotations_pass_values_as_they_are() -> None:
    async def bare(payload):  # type: ignore[no-untyped-def]
        return payload

    async def anything(payload: Any) -> Any:
        return payload

    for action in (bare, anything):
        payload, result, _ = codec_for(action)
        assert payload.passes_through
        assert result.passes_through
        marker = object()
        assert payload.decode(marker) is marker


def test_dict_and_list_are_only_checked_to_be_one() -> None:
    payload = TypeCodec(dict[str, Any])
    value = {"x": (1, 2)}
    assert payload.decode(value) is value
    with pytest.raises(trunner.InvalidPayload, match="expected dict, got list"):
        payload.decode([1])
    assert not payload.typed
    assert not payload.passes_through


def test_the_annotations_of_a_task_function_give_its_codecs() -> None:
    async def resize(request: Size, *, extra: int = 0) -> Owner:
        raise AssertionError

    async def fire(_: None) -> None:
        return None

    payload, result, _ = codec_for(resize)
    assert payload.label == "Size"
    assert result.label == "Owner"
    none_payload, none_result, _ = codec_for(fire)
    assert none_result.passes_through  # -> None keeps nothing typed
    assert none_payload.decode(None) is None


def test_unresolvable_annotations_count_as_any() -> None:
    async def task(payload: NotImportable) -> Elsewhere:  # type: ignore[name-defined]  # noqa: F821
        raise AssertionError

    payload, result, problem = codec_for(task)
    assert payload.passes_through
    assert result.passes_through
    assert problem == "NameError: name 'NotImportable' is not defined"
    with pytest.warns(UserWarning, match="NotImportable.*Define the types") as caught:
        trunner.TaskRegistry().task(task)
    assert caught[0].filename == __file__  # it points at the decorated function's module


def test_a_value_with_no_json_form_is_refused_with_the_right_error() -> None:
    with pytest.raises(trunner.InvalidPayload):
        TypeCodec(Any).encode(object())
    with pytest.raises(trunner.errors.InvalidResult) as info:
        untyped.encode_json({"when": object()})
    assert isinstance(info.value, trunner.GiveUp)  # a result that cannot be kept: no retry


class Resizer:
    async def __call__(self, request: Size) -> Owner:
        raise AssertionError


def test_an_object_with_an_async_call_is_typed_by_its_method() -> None:
    payload, result, problem = codec_for(Resizer())
    assert problem is None
    assert payload.label == "Size"
    assert result.label == "Owner"
