"""Finding the groups on a Redis (trunner/_discovery.py): the queues' registries of groups,
found by a bounded SCAN under the key prefix, read as (queue, group) pairs; what is not
trunner's is left out, with why."""

from __future__ import annotations

import uuid
from typing import Any

import trio

import trunner
from trunner._discovery import find_groups
from trunner._redis import open_transport
from trunner.admin import FoundGroup, discover_groups
from trunner.keys import Keys

from ..conftest import config, open_checked_runner


def _prefix() -> str:
    """A prefix of the test's own: the session's Redis holds other tests' groups."""
    return f"d{uuid.uuid4().hex[:8]}"


async def test_the_groups_its_runners_registered_are_found_with_their_queues(url: str) -> None:
    prefix = _prefix()
    noop = trunner.TaskRegistry()
    async with (
        open_checked_runner(url, config("emails", prefix=prefix), noop),
        open_checked_runner(url, config("audit", queue="events", prefix=prefix), noop),
        open_checked_runner(url, config("mailer", queue="events", prefix=prefix), noop),
        open_checked_runner(url, config("emails", prefix=_prefix()), noop),  # another prefix
    ):
        found = await discover_groups(url, prefix=prefix)
    assert found.groups == [
        FoundGroup("emails", "emails"),
        FoundGroup("events", "audit"),
        FoundGroup("events", "mailer"),
    ]
    assert found.complete
    assert found.ignored == []
    assert [g.own_queue for g in found.groups] == [True, False, False]


async def test_keys_that_are_not_registries_and_bad_members_are_left_out(
    url: str, raw: Any
) -> None:
    prefix = "p*[x]"  # glob characters in the prefix are matched as themselves
    raw.sadd(Keys(prefix, "q").groups, "q", "has space", "fine")
    raw.sadd(Keys("pz[x]", "other").groups, "other")  # what p*[x] would match as a glob
    raw.sadd(Keys(prefix, "q").unique("4:task:groups"), "lookalike")  # ends in :groups
    raw.set(f"{prefix}:{{q2}}:unique:x:groups", "a lock")
    raw.set(Keys(prefix, "strings").groups, "not a set")
    raw.sadd(f"{prefix}:no-tag:groups", "untagged")
    found = await discover_groups(url, prefix=prefix)
    assert found.groups == [FoundGroup("q", "fine"), FoundGroup("q", "q")]
    assert len(found.ignored) == 2
    assert any("has space" in why for why in found.ignored)
    assert any(Keys(prefix, "strings").groups in why for why in found.ignored)


async def test_the_scan_is_bounded_and_says_when_it_stopped_short(url: str, raw: Any) -> None:
    prefix = _prefix()
    for i in range(300):
        raw.set(f"{prefix}:{{q{i}}}:task:{i}", "x")
    raw.sadd(Keys(prefix, "q7").groups, "q7")
    async with open_transport(
        url, client_name="test", max_connections=1, connect_timeout=5
    ) as transport:
        short = await find_groups(transport, prefix, scan_count=10, max_scan_calls=2)
        whole = await find_groups(transport, prefix, scan_count=10, max_scan_calls=10_000)
    assert not short.complete
    assert whole.complete
    assert whole.groups == [FoundGroup("q7", "q7")]
    await trio.lowlevel.checkpoint()
