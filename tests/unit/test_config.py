"""RunnerConfig: documented defaults, immutability, and validation naming the field."""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest
import trio

import trunner
from trunner import RunnerConfig


async def _handler(message: Any, error: BaseException) -> None:
    pass


def _build(field: str, value: object) -> RunnerConfig:
    values: dict[str, Any] = {"consumer_group": "emails", field: value}
    return RunnerConfig(**values)


def test_defaults_match_the_documented_ones() -> None:
    config = RunnerConfig(consumer_group="emails")
    assert config.consumer_group == "emails"
    assert config.num_workers == 10
    assert config.num_fetchers == 1
    assert config.batch_size == 10
    assert config.block_duration == 5.0
    assert config.reclaim_delay == 30.0  # see "Choosing reclaim_delay" in concepts.md
    assert config.reclaim_interval == 1.0
    assert config.delete_on_ack is True
    assert config.drain_timeout == 30.0
    assert config.prefix == "trunner"
    assert config.failed_task_handler is None
    assert config.host is None
    assert config.consumer_name is None
    assert config.connect_timeout == 5.0
    assert config.max_payload_bytes == 1024 * 1024
    assert config.dead_letter_maxlen == 100_000
    assert config.ack_batch_size == 100
    assert config.ack_flush_interval == 0.005
    assert config.max_connections == 20
    assert config.janitor_interval == 60.0
    assert config.stream_retention == 24 * 3600.0


def test_consumer_group_is_required() -> None:
    with pytest.raises(TypeError, match="consumer_group"):
        RunnerConfig()  # type: ignore[call-arg]


def test_arguments_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        RunnerConfig("emails")  # type: ignore[call-arg]


def test_valid_values_are_kept() -> None:
    config = RunnerConfig(
        consumer_group="emails.v2",
        num_workers=1,
        num_fetchers=3,
        batch_size=50,
        block_duration=0.25,
        reclaim_delay=10,
        reclaim_interval=0.5,
        delete_on_ack=False,
        drain_timeout=0,
        prefix="staging:trunner",
        failed_task_handler=_handler,
        host="web-1",
        consumer_name="web-1:42:abc",
        connect_timeout=1,
        max_payload_bytes=1,
        dead_letter_maxlen=None,
        ack_batch_size=1,
        ack_flush_interval=1e-6,
        max_connections=1,
    )
    assert config.consumer_group == "emails.v2"
    assert config.num_workers == 1
    assert config.num_fetchers == 3
    assert config.batch_size == 50
    assert config.block_duration == 0.25
    assert config.reclaim_delay == 10
    assert config.reclaim_interval == 0.5
    assert config.delete_on_ack is False
    assert config.drain_timeout == 0
    assert config.prefix == "staging:trunner"
    assert config.failed_task_handler is _handler
    assert config.host == "web-1"
    assert config.consumer_name == "web-1:42:abc"
    assert config.connect_timeout == 1
    assert config.max_payload_bytes == 1
    assert config.dead_letter_maxlen is None
    assert config.ack_batch_size == 1
    assert config.ack_flush_interval == 1e-6
    assert config.max_connections == 1


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("num_workers", 5),
        ("consumer_group", "other"),
        ("prefix", "other"),
        ("delete_on_ack", False),
        ("drain_timeout", 1.0),
    ],
)
def test_config_is_frozen(field: str, value: object) -> None:
    config = RunnerConfig(consumer_group="emails")
    before = getattr(config, field)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(config, field, value)
    assert getattr(config, field) == before


def test_evolve_revalidates() -> None:
    config = RunnerConfig(consumer_group="emails")
    assert attrs.evolve(config, num_workers=3).num_workers == 3
    with pytest.raises(ValueError, match="num_workers"):
        attrs.evolve(config, num_workers=0)


_INT_FIELDS = [
    "num_workers",
    "num_fetchers",
    "batch_size",
    "max_payload_bytes",
    "ack_batch_size",
    "max_connections",
]
_POSITIVE_DURATIONS = [
    "block_duration",
    "reclaim_delay",
    "reclaim_interval",
    "connect_timeout",
    "ack_flush_interval",
]
_NAME_FIELDS = ["consumer_group", "prefix"]
_OPTIONAL_NAME_FIELDS = ["host", "consumer_name"]

WRONG_TYPES: list[tuple[str, object]] = [
    *[(f, True) for f in _INT_FIELDS],
    *[(f, False) for f in _INT_FIELDS],
    *[(f, "10") for f in _INT_FIELDS],
    *[(f, 10.0) for f in _INT_FIELDS],
    *[(f, None) for f in _INT_FIELDS],
    ("dead_letter_maxlen", True),
    ("dead_letter_maxlen", "1000"),
    ("dead_letter_maxlen", 1000.0),
    *[(f, "60") for f in ["janitor_interval", "stream_retention"]],
    *[(f, True) for f in ["janitor_interval", "stream_retention"]],
    *[(f, "5") for f in [*_POSITIVE_DURATIONS, "drain_timeout"]],
    *[(f, True) for f in [*_POSITIVE_DURATIONS, "drain_timeout"]],
    *[(f, None) for f in [*_POSITIVE_DURATIONS, "drain_timeout"]],
    *[(f, [1.0]) for f in [*_POSITIVE_DURATIONS, "drain_timeout"]],
    ("delete_on_ack", 1),
    ("delete_on_ack", 0),
    ("delete_on_ack", "yes"),
    ("delete_on_ack", None),
    *[(f, b"emails") for f in [*_NAME_FIELDS, *_OPTIONAL_NAME_FIELDS]],
    *[(f, 7) for f in [*_NAME_FIELDS, *_OPTIONAL_NAME_FIELDS]],
    *[(f, None) for f in _NAME_FIELDS],
    ("failed_task_handler", "handler"),
    ("failed_task_handler", 42),
]


@pytest.mark.parametrize(("field", "value"), WRONG_TYPES)
def test_wrong_type_raises_type_error_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(TypeError, match=field) as info:
        _build(field, value)
    assert not isinstance(info.value, ValueError)


OUT_OF_RANGE: list[tuple[str, object]] = [
    *[(f, 0) for f in _INT_FIELDS],
    *[(f, -1) for f in _INT_FIELDS],
    ("dead_letter_maxlen", 0),
    ("dead_letter_maxlen", -5),
    *[(f, 0) for f in ["janitor_interval", "stream_retention"]],
    *[(f, -1.0) for f in ["janitor_interval", "stream_retention"]],
    *[(f, math.nan) for f in ["janitor_interval", "stream_retention"]],
    *[(f, 0) for f in _POSITIVE_DURATIONS],
    *[(f, 0.0) for f in _POSITIVE_DURATIONS],
    *[(f, -0.5) for f in _POSITIVE_DURATIONS],
    *[(f, math.nan) for f in _POSITIVE_DURATIONS],
    *[(f, math.inf) for f in _POSITIVE_DURATIONS],
    *[(f, -math.inf) for f in _POSITIVE_DURATIONS],
    ("drain_timeout", -1),
    ("drain_timeout", -0.001),
    ("drain_timeout", math.nan),
    ("drain_timeout", math.inf),
    *[(f, "") for f in [*_NAME_FIELDS, *_OPTIONAL_NAME_FIELDS]],
    *[(f, "{emails}") for f in [*_NAME_FIELDS, *_OPTIONAL_NAME_FIELDS]],
    *[(f, "a{b") for f in [*_NAME_FIELDS, *_OPTIONAL_NAME_FIELDS]],
    *[(f, "a}b") for f in [*_NAME_FIELDS, *_OPTIONAL_NAME_FIELDS]],
    *[(f, "my emails") for f in [*_NAME_FIELDS, *_OPTIONAL_NAME_FIELDS]],
    *[(f, "emails\n") for f in [*_NAME_FIELDS, *_OPTIONAL_NAME_FIELDS]],
    *[(f, "\temails") for f in [*_NAME_FIELDS, *_OPTIONAL_NAME_FIELDS]],
    *[(f, "e\u00a0mails") for f in [*_NAME_FIELDS, *_OPTIONAL_NAME_FIELDS]],
    ("consumer_name", "trunner:released"),
    ("consumer_name", "trunner:x"),
]


@pytest.mark.parametrize(("field", "value"), OUT_OF_RANGE)
def test_out_of_range_value_raises_value_error_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field) as info:
        _build(field, value)
    assert not isinstance(info.value, TypeError)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("num_workers", 1),
        ("num_workers", 10_000),
        ("dead_letter_maxlen", 1),
        ("block_duration", 1e-9),
        ("drain_timeout", 0),
        ("drain_timeout", 0.0),
        ("reclaim_delay", 1),
        ("consumer_group", "a"),
        ("consumer_group", "emails:high-priority"),
        ("prefix", "\u00e9t\u00e9"),
        ("host", "host.example.com"),
        ("consumer_name", "trunner"),
        ("consumer_name", "my-trunner:1"),
        ("failed_task_handler", _handler),
        ("janitor_interval", None),
        ("janitor_interval", 0.5),
        ("stream_retention", None),
        ("stream_retention", 3600),
    ],
)
def test_boundary_values_are_accepted(field: str, value: object) -> None:
    assert getattr(_build(field, value), field) == value


def test_error_message_shows_the_bad_value() -> None:
    with pytest.raises(ValueError, match=r"num_workers must be >= 1, got -3"):
        RunnerConfig(consumer_group="emails", num_workers=-3)
    with pytest.raises(TypeError, match=r"batch_size must be an int, got str"):
        RunnerConfig(consumer_group="emails", batch_size="3")  # type: ignore[arg-type]


def test_the_failed_task_handler_must_be_async() -> None:
    def handler(message: object, error: BaseException) -> None:
        pass

    with pytest.raises(TypeError, match="failed_task_handler must be an async function"):
        RunnerConfig(consumer_group="g", failed_task_handler=handler)  # type: ignore[arg-type]


async def test_fixed_capacity_and_config_checks(group: str) -> None:
    with pytest.raises(ValueError, match="needs long_queue_threshold"):
        trunner.RunnerConfig(consumer_group=group, num_workers=3, min_workers=1, max_workers=5)
    with pytest.raises(ValueError, match="must lie within"):
        trunner.RunnerConfig(consumer_group=group, num_workers=10, max_workers=5)
    with pytest.raises(ValueError, match="instance_ttl"):
        trunner.RunnerConfig(consumer_group=group, instance_ttl=0.5, report_interval=1.0)
    with pytest.raises(TypeError, match="long_queue_hook must be an async function"):
        trunner.RunnerConfig(consumer_group=group, long_queue_hook=print)  # type: ignore[arg-type]
    assert trunner.RunnerConfig(consumer_group=group).worker_bounds == (10, 10)
    await trio.lowlevel.checkpoint()
