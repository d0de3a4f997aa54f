"""Keys: every key of a group under one prefix, sharing the group's hash tag."""

from __future__ import annotations

import json

import attrs
import pytest

from trunner._wire.keys import RELEASED_CONSUMER, UniqueLock
from trunner._wire.names import check_name
from trunner.keys import Keys


def hash_tag(key: str) -> str:
    """The part of ``key`` Redis Cluster hashes (the rule of the cluster spec)."""
    start = key.find("{")
    if start != -1:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


def all_keys(keys: Keys) -> list[str]:
    return [keys.stream, keys.dead, keys.delayed]


def test_key_names() -> None:
    keys = Keys("trunner", "emails")
    assert keys.stream == "trunner:{emails}:stream"
    assert keys.dead == "trunner:{emails}:dead"
    assert keys.delayed == "trunner:{emails}:delayed"


def test_prefix_and_group_are_used() -> None:
    keys = Keys("staging", "billing.v2")
    assert keys.stream == "staging:{billing.v2}:stream"
    assert keys.dead == "staging:{billing.v2}:dead"
    assert keys.delayed == "staging:{billing.v2}:delayed"


@pytest.mark.parametrize(
    ("prefix", "group"),
    [
        ("trunner", "emails"),
        ("trunner", "a"),
        ("env:prod:trunner", "emails:high"),
        ("p", "g-0123456789"),
    ],
)
def test_every_key_of_a_group_shares_its_hash_tag(prefix: str, group: str) -> None:
    keys = Keys(prefix, group)
    names = all_keys(keys)
    assert len(set(names)) == len(names)
    assert {hash_tag(name) for name in names} == {group}
    for name in names:
        assert name.startswith(f"{prefix}:")


def test_groups_and_prefixes_do_not_collide() -> None:
    names = [
        *all_keys(Keys("trunner", "emails")),
        *all_keys(Keys("trunner", "sms")),
        *all_keys(Keys("staging", "emails")),
    ]
    assert len(set(names)) == len(names)
    assert hash_tag(Keys("trunner", "emails").stream) != hash_tag(Keys("trunner", "sms").stream)


def test_keys_are_frozen_values() -> None:
    keys = Keys("trunner", "emails")
    assert keys == Keys("trunner", "emails")
    assert hash(keys) == hash(Keys("trunner", "emails"))
    assert keys != Keys("trunner", "sms")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        keys.group = "sms"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("prefix", "group", "error", "field"),
    [
        ("", "emails", ValueError, "prefix"),
        ("trunner", "", ValueError, "consumer_group"),
        ("{trunner}", "emails", ValueError, "prefix"),
        ("tr{unner", "emails", ValueError, "prefix"),
        ("trunner", "{emails}", ValueError, "consumer_group"),
        ("trunner", "em}ails", ValueError, "consumer_group"),
        ("trunner", "em{ails", ValueError, "consumer_group"),
        ("my trunner", "emails", ValueError, "prefix"),
        ("trunner", "my emails", ValueError, "consumer_group"),
        ("trunner", "emails\n", ValueError, "consumer_group"),
        ("trunner\t", "emails", ValueError, "prefix"),
        (None, "emails", TypeError, "prefix"),
        (b"trunner", "emails", TypeError, "prefix"),
        ("trunner", None, TypeError, "consumer_group"),
        ("trunner", 42, TypeError, "consumer_group"),
    ],
)
def test_invalid_prefix_or_group_raises(
    prefix: object, group: object, error: type[Exception], field: str
) -> None:
    with pytest.raises(error, match=field):
        Keys(prefix, group)  # type: ignore[arg-type]


def test_check_name_returns_a_valid_name() -> None:
    assert check_name("prefix", "trunner") == "trunner"


def test_released_consumer_is_in_the_reserved_namespace() -> None:
    assert RELEASED_CONSUMER.startswith("trunner:")


def test_a_delayed_lock_is_stored_as_one_json_array() -> None:
    lock = UniqueLock("trunner:{g}:unique:6:charge:1", "a" * 32, 600_000)
    assert json.loads(lock.encode()) == ["trunner:{g}:unique:6:charge:1", "a" * 32, 600_000]
    assert UniqueLock.decode(lock.encode()) == lock
    assert UniqueLock.decode(lock.encode().encode()) == lock


@pytest.mark.parametrize(
    "stored",
    [
        b"trunner:{g}:unique:6:charge:1\ntoken\n600000",  # lines, not JSON
        b"{}",
        b'["key", "token"]',
        b'["key", "token", "600000"]',
        b'["key", "token", 0]',
        b'["key", 7, 600000]',
        b"\xff",
    ],
)
def test_a_delayed_lock_of_another_layout_is_refused_with_the_reason(stored: bytes) -> None:
    with pytest.raises(ValueError, match="not"):
        UniqueLock.decode(stored)
