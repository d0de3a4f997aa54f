"""``lua/numbers.lua``: the one check of every number a script reads from stored data.

Redis's Lua (5.1) and fakeredis's (lupa) both take ``tonumber('inf')``, ``'nan'``,
``'1e300'``, ``'0x10'`` and ``' 5'``; ``checked_number`` takes none of them, the same on
both tiers."""

from __future__ import annotations

import pkgutil
from typing import Any

import pytest

from trunner._redis import SCRIPTS

#: The library as the scripts are built with it (``trunner/_redis/lua/numbers.lua``).
NUMBERS = (pkgutil.get_data("trunner._redis", "lua/numbers.lua") or b"").decode()

#: checked_number(ARGV[1], {integer = ARGV[2] == '1', min = 0, max = 1e15, digits = 16}),
#: as {number as '%.3f', ''} or {'', reason}.
PROBE = (
    NUMBERS
    + """
local number, why = checked_number(ARGV[1], {integer = ARGV[2] == '1', min = 0, max = 1e15,
  digits = 16})
if number then
  return {string.format('%.3f', number), ''}
end
return {'', why}
"""
)

REFUSED = [
    "inf", "-inf", "nan", "-nan", "NaN", "Infinity", "1e300", "1e3", "1E3", "0x10", " 5", "5 ",
    "+5", "", "5.", ".5", "1.5.1", "-1", "1" * 16, "9" * 20, "9" * 400, "\u00b2", "\u0661",
    "1_000", "null",
]  # fmt: skip


@pytest.mark.parametrize("value", REFUSED)
def test_what_tonumber_takes_and_trunner_never_writes_is_refused(raw: Any, value: str) -> None:
    number, why = raw.eval(PROBE, 0, value, "0")
    assert number == b"", value
    assert why.startswith(b"a "), why


@pytest.mark.parametrize(
    ("value", "integer", "expected"),
    [
        ("0", "1", b"0.000"),
        ("1764800000000", "1", b"1764800000000.000"),
        ("999999999999999", "1", b"999999999999999.000"),
        ("1000000000000000", "1", b"1000000000000000.000"),
        ("1764800000000.250", "0", b"1764800000000.250"),
        ("007", "0", b"7.000"),
    ],
)
def test_plain_decimals_within_range_are_read(
    raw: Any, value: str, integer: str, expected: bytes
) -> None:
    assert raw.eval(PROBE, 0, value, integer) == [expected, b""]


def test_an_integer_is_refused_with_a_fraction_and_the_reasons_say_why(raw: Any) -> None:
    assert raw.eval(PROBE, 0, "5.5", "1")[1] == b"a string that is not an integer in decimal digits"
    assert raw.eval(PROBE, 0, "5.5", "0")[0] == b"5.500"
    assert raw.eval(PROBE, 0, "-1", "0")[1] == b"a number below 0"
    assert raw.eval(PROBE, 0, "9" * 16, "0")[1] == b"a number above 1e+15"
    assert raw.eval(PROBE, 0, "9" * 17, "0")[1] == b"a number of more than 16 digits"
    assert raw.eval(PROBE, 0, "9" * 400, "0")[1] == b"a number of more than 16 digits"
    assert raw.eval(PROBE, 0, "inf", "0")[1] == b"a string that is not a decimal number"


def test_every_script_that_reads_a_stored_number_has_the_check() -> None:
    readers = {
        "admit", "cron_fire", "forget_stale", "publish_capacity", "report", "task_started",
        "group_floor", "trim",
    }  # fmt: skip
    for name in readers:
        assert "local function checked_number(" in getattr(SCRIPTS, name).source, name


@pytest.mark.parametrize("stored", ["nan", "inf", "1e300", "-1"])
def test_a_maximum_that_is_no_number_is_replaced_and_reported(raw: Any, stored: str) -> None:
    """report.lua kept the larger of the stored maximum and the report's: 'nan' or 'inf'
    (which tonumber took) was never exceeded, and stayed for ever, unreported."""
    metrics, field = "n:{g}:metrics", "t:x:max"
    raw.hset(metrics, field, stored)
    keys = [metrics, "n:{g}:instances", "n:{g}:info", "n:{g}:capacity"]
    reply = raw.eval(SCRIPTS.report.source, 4, *keys, "i1", "1000", "{}", field, "5")
    assert reply[2] == [field.encode(), stored.encode()]
    assert raw.hget(metrics, field) == b"5"
    reply = raw.eval(SCRIPTS.report.source, 4, *keys, "i1", "1001", "{}", field, "3")
    assert reply[2] == [], "a good maximum is kept, and reported as nothing"
    assert raw.hget(metrics, field) == b"5"


@pytest.mark.parametrize("stored", ["nan", "inf", "1e300"])
def test_a_recorded_attempt_that_is_no_count_does_not_stop_the_start_being_recorded(
    raw: Any, stored: str
) -> None:
    """task_started.lua compared the record's attempt read by tonumber: 'nan' or 'inf'
    made the record say 'running' never again."""
    record, stream = "n:{g}:result:t1", "n:{g}:stream"
    raw.delete(record, stream)
    raw.xgroup_create(stream, "g", id="0", mkstream=True)
    entry = raw.xadd(stream, {"payload": "{}"}).decode()
    raw.xreadgroup("g", "c1", {stream: ">"})  # the attempt's delivery: c1's first
    raw.hset(record, mapping={"state": "running", "attempt": stored})
    fields = ["state", "running", "attempt", "2"]
    args = ["g", entry, "c1", "1", "60000", "2", *fields]
    assert raw.eval(SCRIPTS.task_started.source, 2, record, stream, *args) == 1
    assert raw.hget(record, "attempt") == b"2"


def test_ids_beyond_2_to_the_53_are_compared_exactly_and_never_added_up(raw: Any) -> None:
    """group_floor.lua and trim.lua read ids with tonumber(): a part of 20 digits lost its
    last digits, and string.format('%d') wrote a negative floor (or failed). They now
    refuse such an id (no floor recorded, nothing trimmed); delivered.lua compares ids as
    decimal text."""
    stream, floor, lease = "n:{g}:s", "n:{g}:floor", "n:{g}:lease"
    raw.xadd(stream, {"payload": "a"}, id="5-18446744073709551614")
    raw.xgroup_create(stream, "g", id="0")
    raw.xreadgroup("g", "c", {stream: ">"}, count=1)
    raw.xack(stream, "g", "5-18446744073709551614")
    raw.xadd(stream, {"payload": "b"}, id="5-18446744073709551615")
    assert raw.eval(SCRIPTS.group_floor.source, 2, stream, floor, "g") is None
    assert raw.get(floor) is None, "no floor recorded"
    raw.set(lease, "me")
    reply = raw.eval(SCRIPTS.trim.source, 3, lease, stream, "n:{g}:groups", "me", "9" * 13, "100")
    assert reply == [0, b"0-0"]
    assert raw.xlen(stream) == 2, "the entry not yet delivered is kept"
    # Delivered up to ...614: ...615 is not delivered, though both are 1.8446744073709552e19.
    keys = [stream, "n:{g}:d", "n:{g}:dm", "n:{g}:w", "n:{g}:rec", "n:{g}:d", "n:{g}:dm"]
    look = raw.eval(SCRIPTS.task_status.source, 7, *keys, "g", "5-18446744073709551615")
    assert look[3] == b"5-18446744073709551615"
    assert look[7] == 0, "not delivered yet"
    look = raw.eval(SCRIPTS.task_status.source, 7, *keys, "g", "5-18446744073709551614")
    assert look[7] == 1
