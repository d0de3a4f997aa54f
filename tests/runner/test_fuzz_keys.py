"""A fuzzer for every key a runner reads: one bad value never takes down a group.

For each kind of key a runner reads (the delayed set and its messages and unique index,
the metrics hash, the cron state, the leader key, the fence counter, the instance
records, the capacity decision, the dead letters, the cancel marks and where-map, the
stream; the rate and concurrency limits' state, holders, waiting lists and registry, the
lanes' registry, floors and streams, the pause mark, the task records, the registry of
groups), hypothesis writes bad values into a group before two runners start on it: a
value of another Redis type, bytes that are not UTF-8, lone surrogates, text that is not
JSON, JSON of the wrong shape, missing fields, NaN, infinities, 1e300, 1e400, integers
beyond int64 and 2^64, ids Redis refuses, empty strings and 64 KiB values. Then good work
is dispatched: a task, a delayed task, a delayed unique task, a cron tick, a rate-limited
and a concurrency-limited task (one of a priority lane where lanes are read), and an
entry for no task (a dead letter). A second test writes each number that broke the
scripts (inf, -inf, nan, 1e300, 20 digits) into every key holding a number at once. Every
example asserts that

* both runners keep serving, one leads, no leader chore was restarted, and the chores
  that read the bad key went round again (mover, aggregator, janitor, reporter);
* every good task ran, and the entry for no task was dead-lettered;
* every bad item the doc says is set aside has a quarantine record with its reason, a key
  of a wrong type was renamed aside with its value (nothing deleted);
* ``runner.errors()`` yielded nothing but what bad data explains.

Both tiers run it: memory:// (fakeredis) and a real redis-server. Examples are few per
key kind and derandomized (see docs/reliability.md, "Bad data in Redis").
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import trunner
from trunner._redis import forget_memory_server
from trunner._wire.envelope import encode_message
from trunner._wire.keys import UniqueLock
from trunner.keys import Keys
from trunner.testing import open_runner_factory

from ..conftest import parts, raw_client, redis_state
from ..support.servers import RedisServer

#: Timings that make the leader's chores, reports and elections come fast.
FAST: dict[str, Any] = {
    "leader_ttl": 0.5,
    "leader_wait": 0.6,
    "leader_jitter": 0.01,
    "report_interval": 0.1,
    "stats_interval": 0.1,
    "instance_ttl": 1.0,
    "block_duration": 0.2,
    "janitor_interval": 0.1,
    "reclaim_interval": 0.2,
    "drain_timeout": 2.0,
    # Capacity decisions, so the leader publishes one every round and instances read it.
    "num_workers": 2,
    "min_workers": 1,
    "max_workers": 3,
    "long_queue_threshold": 30.0,
}
PREFIX = "fuzz"
#: Examples per key kind and tier (derandomized: the same ones every run).
EXAMPLES = 3

# -- bad values --------------------------------------------------------------------------

LONG = 64 * 1024
scalars = st.sampled_from(
    [
        b"", b"0", b"-1", b"1.5", b" 7", b"0x10", b"NaN", b"nan", b"inf", b"-inf",
        b"1e400", b"-1e400", b"1e308", b"1e-300", b"1e300", b"-1e300", b"-nan", b"Infinity",
        b"9223372036854775807", b"9223372036854775808", b"-9223372036854775809", b"9" * 40,
        b"99999999999999", b"12345678901234567890", b"18446744073709551616", b"9" * 20,
        b"\xff\xfe\xfd",
        b"\xed\xa0\x80",  # a lone surrogate, as CESU-8 would write it
        b'"\\ud800"', b"null", b"{}", b"[]", b"true", b"{not json", "\u00b2".encode(),
        "\u0661\u0662".encode(),  # digits, but not ASCII ones
    ]
)  # fmt: skip
long_values = st.sampled_from([b"x" * LONG, b"9" * LONG, b"[" * LONG, b"\xff" * LONG])
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()  # NaN and infinities: json.dumps writes them
    | st.text(max_size=12)
    | st.just("\ud800")
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode("utf-8", "surrogatepass")


values = scalars | st.binary(max_size=24) | long_values | json_values.map(_dumps)
#: Stream ids that are not, or not of this stream: beyond 2^64 - 1 (Redis refuses them),
#: far ahead, of a lane nobody declared, or what XRANGE reads as a bound.
entry_ids = st.sampled_from(
    [
        b"99999999999999999999-0", b"1-18446744073709551616", b"18446744073709551615-0",
        b"0-0", b"0-1", b"9999999999999-0", b"1-1@urgent", b"1-1@", b"1-1@no such",
        b"1-1@nobody", b"+", b"-", b"$", b">", b"1", b"-1-1",
    ]
)  # fmt: skip
field_names = st.sampled_from([b"", b"\xff", b"t:record:n", b"t:record:s", b"x" * 300]) | st.binary(
    min_size=1, max_size=12
)

# -- corruptions: what is written, and what must follow ----------------------------------

Op = tuple[Any, ...]


@attrs.define
class Corruption:
    """Bad data for one key kind: the writes, and what the runners must make of them."""

    kind: str
    ops: list[Op]
    #: (source, item) of the quarantine records that must be written.
    records: set[tuple[str, str]] = attrs.Factory(set)
    #: Messages (bytes) that must end in the dead-letter stream.
    dead: list[bytes] = attrs.Factory(list)
    #: Whether a cron tick must fire after the runners start.
    cron: bool = False
    #: Whether the runners read priority lanes (and a task is dispatched to one).
    lanes: bool = False
    #: Task ids whose status() must be read without an error.
    ghosts: list[str] = attrs.Factory(list)
    #: Keys of a wrong type the runners leave as they are (documented so).
    left: set[str] = attrs.Factory(set)

    def __repr__(self) -> str:  # hypothesis prints it: keep 64 KiB values short
        ops = [tuple(_short(x) for x in op) for op in self.ops]
        return f"Corruption({self.kind!r}, {ops!r}, records={self.records!r})"


def _short(value: Any) -> Any:
    if isinstance(value, bytes) and len(value) > 60:
        return value[:20] + b"..." + value[-10:]
    if isinstance(value, str) and len(value) > 60:
        return value[:20] + "..." + value[-10:]
    return value


def wrong_types(expected: str) -> st.SearchStrategy[str]:
    return st.sampled_from([t for t in TYPED if t != expected])


def text(raw: bytes) -> str:
    """How trunner reads a field name or item (bytes that are not UTF-8 as escapes), as a
    quarantine record writes it."""
    return raw.decode("utf-8", "surrogateescape").encode("utf-8", "backslashreplace").decode()


def is_number(raw: bytes) -> bool:
    """What a metrics field may hold: a finite number >= 0."""
    try:
        value = float(raw)
    except ValueError:
        return False
    return math.isfinite(value) and value >= 0


def is_int(raw: bytes) -> bool:
    try:
        int(raw)
    except ValueError:
        return False
    return True


def details_readable(raw: bytes) -> bool:
    """Whether an instance's details are what the reporter writes (a JSON object of a
    host, a pid, a capacity and a start time), or none at all (empty)."""
    if not raw:
        return True
    try:
        details = json.loads(raw)
        if not isinstance(details, dict):
            return False
        int(details.get("pid", 0))
        int(details.get("capacity", 0))
        float(details.get("started_at", 0.0))
    except (ValueError, TypeError, OverflowError, RecursionError):
        return False
    return True


def rate_state_ok(raw: bytes, ttl_ms: int | None) -> bool:
    """Whether admit.lua keeps a rate state (a time in ms of at most 15 digits, >= 0, with a
    time-to-live it is not more than an hour beyond)."""
    if ttl_ms is None or not re.fullmatch(rb"[0-9]{1,15}(\.[0-9]+)?", raw):
        return False
    return float(raw) <= time.time() * 1000 + ttl_ms + 3_600_000


def waiter_ok(raw: bytes) -> bool:
    """Whether a waiting-list item is granted (a JSON object with a task and an id) rather
    than quarantined."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return False
    return (
        isinstance(body, dict)
        and isinstance(body.get("task"), str)
        and isinstance(body.get("id"), str)
        and body["id"] != ""
    )


def mark_ok(raw: bytes) -> bool:
    """Whether a pause mark reads as paused (_wire/pause.py, decode_mark)."""
    return raw.isdigit() and len(raw) <= 20


def _message(task: str, payload: Any, task_id: str) -> bytes:
    return encode_message(task, payload, enqueued_at=0.0, task_id=task_id, max_bytes=10_000)


def corruptions(keys: Keys) -> dict[str, st.SearchStrategy[Corruption]]:
    """A strategy of corruptions per key kind."""

    def of_type(kind: str, key: str, expected: str) -> st.SearchStrategy[Corruption]:
        return wrong_types(expected).map(lambda t: Corruption(kind, [("type", key, t)]))

    @st.composite
    def delayed(draw: st.DrawFn) -> Corruption:
        """Delayed ids without a message, due at odd times, or with a message that is not
        a message."""
        ops: list[Op] = []
        dead: list[bytes] = []
        for i in range(draw(st.integers(1, 3))):
            task_id = f"bad-{i}"
            score = draw(st.sampled_from([float("-inf"), 0.0, 1000.0, -5.0, 1e18, float("inf")]))
            ops.append(("zadd", keys.delayed, task_id, score))
            message = draw(st.none() | values)
            if message is not None:
                ops.append(("hset", keys.delayed_messages, task_id, message))
                if score < 1e18:
                    dead.append(message)
        return Corruption("delayed", ops, dead=dead)

    @st.composite
    def delayed_unique(draw: st.DrawFn) -> Corruption:
        """A due unique delayed task whose stored lock is not ``[key, token, ttl]``."""
        lock = draw(
            values
            | st.tuples(json_values, json_values, json_values).map(lambda t: _dumps(list(t)))
            | st.sampled_from(
                [
                    _dumps([keys.unique("6:record"), "t", 0]),
                    _dumps([keys.unique("6:record"), "t", -1]),
                    _dumps([keys.unique("6:record"), "t", 2**70]),
                    _dumps([keys.unique("6:record"), "t", 1e400]),
                    _dumps([keys.unique("6:record"), "t"]),
                    f"{keys.unique('6:record')}\ntoken\n600000".encode(),
                ]
            )
        )
        message = _message("record", "locked", "bad-u")
        ops = [
            ("zadd", keys.delayed, "bad-u", 1000.0),
            ("hset", keys.delayed_messages, "bad-u", message),
            ("hset", keys.delayed_unique, "bad-u", lock),
        ]
        records = set() if _lock_readable(lock) else {("delayed:unique", "bad-u")}
        return Corruption("delayed:unique", ops, records=records)

    @st.composite
    def metrics(draw: st.DrawFn) -> Corruption:
        fields = draw(st.dictionaries(field_names, values, min_size=1, max_size=4))
        ops: list[Op] = [("hset", keys.metrics, f, v) for f, v in fields.items()]
        records = {("metrics", text(f)) for f, v in fields.items() if not is_number(v)}
        return Corruption("metrics", ops, records=records)

    @st.composite
    def cron(draw: st.DrawFn) -> Corruption:
        value = draw(values)
        ops: list[Op] = [("hset", keys.cron, "tick", value)]
        other = draw(st.none() | st.tuples(field_names, values))
        if other is not None:
            ops.append(("hset", keys.cron, *other))
        records = set() if is_int(value) else {("cron", "tick")}
        return Corruption("cron", ops, records=records, cron=True)

    @st.composite
    def leader(draw: st.DrawFn) -> Corruption:
        kind = draw(st.sampled_from(["no ttl", *[t for t in TYPED if t != "string"]]))
        if kind == "no ttl":
            ops: list[Op] = [("set", keys.leader, draw(values))]
        else:
            ops = [("type", keys.leader, kind)]
        return Corruption("leader", ops, records={("leader", keys.leader)})

    @st.composite
    def fence(draw: st.DrawFn) -> Corruption:
        kind = draw(st.sampled_from(["value", *[t for t in TYPED if t != "string"]]))
        if kind == "value":
            value = draw(values)
            ops: list[Op] = [("set", keys.fence, value)]
            records = (
                set() if is_int(value) and int(value) < 2**63 - 1 else {("leader", keys.leader)}
            )
        else:
            ops = [("type", keys.fence, kind)]
            records = {("leader", keys.leader)}
        return Corruption("fence", ops, records=records)

    @st.composite
    def instances(draw: st.DrawFn) -> Corruption:
        """Instance records: ids seen at odd times, details that are not what the
        reporter writes."""
        ops: list[Op] = []
        records: set[tuple[str, str]] = set()
        for i in range(draw(st.integers(1, 3))):
            instance = f"ghost-{i}"
            when = draw(st.sampled_from(["now", "-inf", "inf", "old", "future", "ahead"]))
            ops.append(("zadd-seen", keys.instances, instance, when))
            if when in ("inf", "future"):  # no running instance writes it: dropped, noted
                records.add(("instances", instance))
            details = draw(
                st.none()
                | values
                | st.fixed_dictionaries(
                    {},
                    optional={
                        "host": json_values,
                        "pid": json_values,
                        "capacity": json_values | st.sampled_from([1e400, -1, 2**70]),
                        "started_at": json_values,
                    },
                ).map(_dumps)
            )
            if details is not None:
                ops.append(("hset", keys.instances_info, instance, details))
                # (Seen now, it may be gone by the leader's round on a busy machine; seen
                # an hour ahead, it is listed, its details read.)
                if when == "ahead" and not details_readable(details):
                    records.add(("instances:info", instance))
        return Corruption("instances", ops, records=records)

    @st.composite
    def capacity(draw: st.DrawFn) -> Corruption:
        names = draw(st.sets(st.sampled_from([b"value", b"version", b"fence"]), min_size=1))
        fields = {name: draw(values) for name in sorted(names)}
        return Corruption("capacity", [("hset", keys.capacity, f, v) for f, v in fields.items()])

    @st.composite
    def dead(draw: st.DrawFn) -> Corruption:
        """Dead letters that are not what trunner writes: the runners still dead-letter,
        and reading the dead letters does not fail."""
        ops: list[Op] = []
        for _ in range(draw(st.integers(1, 3))):
            fields = draw(
                st.dictionaries(
                    st.sampled_from([b"attempt", b"failed_at", b"task", b"payload", b"reason"])
                    | field_names,
                    values,
                    min_size=1,
                    max_size=4,
                )
            )
            ops.append(("xadd", keys.dead, fields))
        return Corruption("dead", ops)

    @st.composite
    def marks(draw: st.DrawFn) -> Corruption:
        """Cancel marks and where-map entries that are not a time or an entry id."""
        key = draw(st.sampled_from([keys.cancelled, keys.where]))
        source = "cancelled" if key == keys.cancelled else "where"
        value = draw(values)
        valid = value.isdigit() if source == "cancelled" else _is_entry_id(value)
        records = set() if valid else {(source, "ghost-task")}
        return Corruption("marks", [("hset", key, "ghost-task", value)], records=records)

    @st.composite
    def stream(draw: st.DrawFn) -> Corruption:
        entries = draw(
            st.lists(
                st.dictionaries(
                    st.sampled_from([b"payload", b"task"]) | field_names,
                    values | st.just(_message("record", "x", "stray")),
                    min_size=1,
                    max_size=3,
                ),
                min_size=1,
                max_size=3,
            )
        )
        return Corruption("stream", [("xadd", keys.stream, e) for e in entries])

    @st.composite
    def rate(draw: st.DrawFn) -> Corruption:
        """The state of a rate limit: numbers tonumber() takes and trunner never writes,
        with or without a time-to-live."""
        key = keys.rate_limit("5:paced")
        value = draw(values | st.sampled_from([b"0", b"1000.5", b"99999999999999"]))
        ttl = draw(st.sampled_from([None, 60_000]))
        ops: list[Op] = [("set", key, value)] if ttl is None else [("setpx", key, value, ttl)]
        records = set() if rate_state_ok(value, ttl) else {("limits", key)}
        return Corruption("rate", ops, records=records)

    @st.composite
    def concurrency(draw: st.DrawFn) -> Corruption:
        """A concurrency limit's holders (ids that are no entry, odd scores), waiting list
        (items that are no message) and the registry of limits in use."""
        holders = keys.concurrency_holders("6:capped")
        waiting = keys.concurrency_waiting("6:capped")
        ops: list[Op] = []
        for member in draw(st.lists(entry_ids | values, max_size=3)):
            score = draw(st.sampled_from([float("-inf"), 0.0, 1e300, float("inf"), -1.0]))
            ops.append(("zadd", holders, member, score))
        records: set[tuple[str, str]] = set()
        items = draw(st.lists(values | st.just(_message("capped", "w", "w-id")), max_size=3))
        for item in items:
            ops.append(("rpush", waiting, item))
            if not waiter_ok(item):
                records.add(("concurrency:waiting", waiting))
        for member in draw(st.lists(values | st.just(b"6:capped"), max_size=2)):
            ops.append(("sadd", keys.concurrency_keys, member))
        return Corruption("concurrency", ops or [("sadd", keys.concurrency_keys, b"")], records)

    @st.composite
    def lanes(draw: st.DrawFn) -> Corruption:
        """The registry of lanes and the lanes' floors (the id a lost group is recreated
        from), with runners reading two lanes."""
        ops: list[Op] = []
        for member in draw(st.lists(values | st.just(b"urgent"), max_size=3)):
            ops.append(("sadd", keys.lanes, member))
        for floor in (keys.floor, keys.lane_floor("urgent")):
            value = draw(st.none() | entry_ids | values)
            if value is not None:
                ops.append(("set", floor, value))
        return Corruption("lanes", ops or [("sadd", keys.lanes, b"x")], lanes=True)

    @st.composite
    def pause(draw: st.DrawFn) -> Corruption:
        """A pause mark that is no time (a time would pause the group, as it should)."""
        value = draw(values.filter(lambda v: not mark_ok(v)))
        return Corruption("pause", [("set", keys.paused, value)], {("paused", keys.paused)})

    @st.composite
    def records_(draw: st.DrawFn) -> Corruption:
        """Task records (outcomes, progress) that are not what trunner writes."""
        ops: list[Op] = []
        ghosts = []
        for i in range(draw(st.integers(1, 3))):
            task_id = f"ghost-{i}"
            ghosts.append(task_id)
            key = keys.task(task_id)
            if draw(st.booleans()):
                ops.append(("set", key, draw(values)))
            else:
                names = st.sampled_from(
                    [b"state", b"attempt", b"progress", b"result", b"error", b"task",
                     b"finished_at", b"started_at", b"enqueued_at"]
                ) | field_names  # fmt: skip
                for name, value in draw(
                    st.dictionaries(names, values, min_size=1, max_size=4)
                ).items():
                    ops.append(("hset", key, name, value))
            # Its id in the where-map, as a moved task's.
            if draw(st.booleans()):
                ops.append(("hset", keys.where, task_id, draw(entry_ids)))
        return Corruption("records", ops, ghosts=ghosts)

    @st.composite
    def groups(draw: st.DrawFn) -> Corruption:
        """The queue's registry of groups: groups that do not exist, names that are not
        names."""
        members = draw(st.lists(values, min_size=1, max_size=3))
        return Corruption("groups", [("sadd", keys.groups, m) for m in members])

    def mostly(
        bad_values: st.SearchStrategy[Corruption], *typed: st.SearchStrategy[Corruption]
    ) -> st.SearchStrategy[Corruption]:
        """Bad values three times in four; otherwise a key of a wrong type."""
        return st.integers(0, 3).flatmap(lambda i: st.one_of(*typed) if i == 0 else bad_values)

    quarantine = wrong_types("stream").map(
        # With a bad metrics field, so that a record must be written.
        lambda t: Corruption(
            "quarantine",
            [("type", keys.quarantine, t), ("hset", keys.metrics, "t:x:n", b"x")],
            records={("metrics", "t:x:n")},
        )
    )
    return {
        "delayed": mostly(
            delayed(),
            of_type("delayed", keys.delayed, "zset"),
            of_type("delayed", keys.delayed_messages, "hash"),
        ),
        "delayed:unique": mostly(
            delayed_unique(), of_type("delayed:unique", keys.delayed_unique, "hash")
        ),
        "metrics": mostly(metrics(), of_type("metrics", keys.metrics, "hash")),
        "cron": mostly(cron(), of_type("cron", keys.cron, "hash").map(_with_cron)),
        "leader": leader(),
        "fence": fence(),
        "instances": mostly(
            instances(),
            of_type("instances", keys.instances, "zset"),
            of_type("instances", keys.instances_info, "hash"),
        ),
        "capacity": mostly(capacity(), of_type("capacity", keys.capacity, "hash")),
        "dead": mostly(dead(), of_type("dead", keys.dead, "stream")),
        "marks": mostly(
            marks(),
            of_type("marks", keys.cancelled, "hash"),
            of_type("marks", keys.where, "hash"),
        ),
        "stream": mostly(stream(), of_type("stream", keys.stream, "stream")),
        "rate": mostly(rate(), of_type("rate", keys.rate_limit("5:paced"), "string")),
        "concurrency": mostly(
            concurrency(),
            of_type("concurrency", keys.concurrency_holders("6:capped"), "zset"),
            of_type("concurrency", keys.concurrency_waiting("6:capped"), "list"),
            of_type("concurrency", keys.concurrency_keys, "set"),
        ),
        "lanes": mostly(
            lanes(),
            of_type("lanes", keys.lanes, "set").map(_with_lanes),
            of_type("lanes", keys.lane_floor("urgent"), "string").map(_with_lanes),
            of_type("lanes", keys.lane_stream("urgent"), "stream").map(_with_lanes),
        ),
        "pause": mostly(pause(), of_type("pause", keys.paused, "string")),
        "records": mostly(
            records_(),
            of_type("records", keys.task("ghost-0"), "hash").map(
                lambda c: attrs.evolve(c, ghosts=["ghost-0"])
            ),
        ),
        # A registry of groups of another type is left alone: every script reads it as
        # "shared" (docs/reliability.md).
        "groups": mostly(
            groups(),
            of_type("groups", keys.groups, "set").map(
                lambda c: attrs.evolve(c, left={keys.groups})
            ),
        ),
        "other": st.one_of(
            of_type("other", keys.stats, "string"),
            of_type("other", keys.floor, "string"),
            quarantine,
        ),
    }


def _with_cron(corruption: Corruption) -> Corruption:
    return attrs.evolve(corruption, cron=True)


def _with_lanes(corruption: Corruption) -> Corruption:
    return attrs.evolve(corruption, lanes=True)


def _lock_readable(raw: bytes) -> bool:
    try:
        UniqueLock.decode(raw)
    except ValueError:
        return False
    return True


def _is_entry_id(raw: bytes) -> bool:
    ms, dash, seq = raw.partition(b"-")
    return bool(dash) and ms.isdigit() and seq.isdigit()


#: How to write a value of each Redis type.
TYPED: dict[str, Callable[[Any, str], Any]] = {
    "string": lambda raw, key: raw.set(key, b"\xffnot what trunner writes"),
    "list": lambda raw, key: raw.rpush(key, b"x"),
    "set": lambda raw, key: raw.sadd(key, b"x"),
    "zset": lambda raw, key: raw.zadd(key, {b"x": 1}),
    "hash": lambda raw, key: raw.hset(key, b"x", b"y"),
    "stream": lambda raw, key: raw.xadd(key, {b"x": b"y"}),
}


def write(raw: Any, op: Op) -> None:
    """Write one bad value, as something other than trunner would."""
    match op:
        case ("type", key, kind):
            raw.delete(key)
            TYPED[kind](raw, key)
        case ("set", key, value):
            raw.set(key, value)
        case ("setpx", key, value, ttl):
            raw.set(key, value, px=ttl)
        case ("rpush", key, value):
            raw.rpush(key, value)
        case ("sadd", key, member):
            raw.sadd(key, member)
        case ("hset", key, field, value):
            raw.hset(key, field, value)
        case ("zadd", key, member, score):
            raw.zadd(key, {member: score})
        case ("zadd-seen", key, member, when):
            now_ms = raw.time()[0] * 1000
            scores: dict[str, float] = {
                "now": now_ms,
                "old": 1000,
                "future": now_ms * 10,
                "ahead": now_ms + 1_800_000,  # within the hour of clock skew allowed
            }
            raw.zadd(key, {member: scores.get(when) or float(when)})
        case ("xadd", key, fields):
            raw.xadd(key, fields)
        case _:
            raise AssertionError(op)


# -- the group under test ------------------------------------------------------------------


class Runs:
    """Task runs by payload; the test awaits them."""

    def __init__(self) -> None:
        self.payloads: list[Any] = []
        self._lot = trio.lowlevel.ParkingLot()
        self.release = trio.Event()

    def add(self, payload: Any) -> None:
        self.payloads.append(payload)
        self._lot.unpark_all()

    async def wait_for(self, *payloads: Any) -> None:
        while not all(p in self.payloads for p in payloads):
            await self._lot.park()


def registry(runs: Runs) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def record(payload: Any) -> None:
        runs.add(payload)

    @tasks.task
    async def hold(payload: Any) -> None:
        """Keeps the queue from being empty (the capacity decision then sizes it)."""
        runs.add(payload)
        await runs.release.wait()

    @tasks.task(unique=True, unique_key=lambda p: p["k"], unique_for=60)
    async def once(payload: Any) -> None:
        runs.add(payload["k"])

    @tasks.task(rate_limit="1000/s", rate_burst=2)
    async def paced(payload: Any) -> None:
        runs.add(payload)

    @tasks.task(concurrency=1)
    async def capped(payload: Any) -> None:
        runs.add(payload)

    tasks.cron("* * * * * *", "record", "tick", name="tick")
    return tasks


def allowed(error: BaseException) -> bool:
    """What runner.errors() may yield in a group fed bad data: the bad data itself, the
    messages given up (dead-lettered), and the Redis errors of a key of a wrong type or of
    a group lost with its stream (both repaired by the loop that met them)."""
    if isinstance(
        error, trunner.errors.BadData | trunner.errors.InvalidMessage | trunner.TaskNotFound
    ):
        return True
    if isinstance(error, trunner.MaxRetryExceeded):
        return True
    text = str(error)
    return isinstance(error, trunner.errors.RedisCommandError) and (
        "WRONGTYPE" in text or "NOGROUP" in text
    )


def records(raw: Any, keys: Keys) -> list[dict[bytes, bytes]]:
    if raw.type(keys.quarantine) != b"stream":
        return []
    return [fields for _, fields in raw.xrange(keys.quarantine)]


async def dispatching(call: Callable[[], Any]) -> str:
    """Dispatch; while a key the dispatch writes holds a wrong type, try again (a runner's
    loop that meets the key sets it aside)."""
    while True:
        try:
            result: str = await call()
            return result
        except trunner.errors.RedisCommandError as exc:
            if "WRONGTYPE" not in str(exc):
                raise
        await trio.sleep(0.05)


@asynccontextmanager
async def collecting(runners: list[trunner.Runner]) -> AsyncIterator[list[BaseException]]:
    errors: list[BaseException] = []

    async def collect(runner: trunner.Runner) -> None:
        async for error in runner.errors():
            errors.append(error)

    async with trio.open_nursery() as nursery:
        for runner in runners:
            nursery.start_soon(collect, runner)
        yield errors
        nursery.cancel_scope.cancel()


async def exercise(url: str, keys: Keys, raw: Any, corruption: Corruption) -> None:
    """Write the corruption, start two runners, push good work through, check."""
    for op in corruption.ops:
        write(raw, op)
    runs = Runs()
    tasks = registry(runs)
    async with open_runner_factory(url, keys.group) as factory:
        lanes = {"urgent": 2, "default": 1} if corruption.lanes else None
        cfg = factory.config(prefix=PREFIX, **FAST, lanes=lanes)
        a = await factory(tasks, cfg)
        b = await factory(tasks, cfg)
        async with collecting([a, b]) as errors:

            async def led() -> bool:
                await trio.lowlevel.checkpoint()
                return a.is_leader or b.is_leader

            # One leads, whatever the lease and its fence counter held.
            await redis_state(led)
            lead, other = (a, b) if a.is_leader else (b, a)
            await dispatching(lambda: other.dispatch("hold", "held"))
            await dispatching(lambda: other.dispatch("record", "now"))
            await dispatching(lambda: other.dispatch("paced", "paced"))
            await dispatching(lambda: other.dispatch("capped", "capped"))
            good = ["held", "now", "later", "unique", "paced", "capped"]
            if corruption.lanes:
                await dispatching(lambda: other.dispatch("record", "urgent", priority="urgent"))
                good.append("urgent")
            # Dispatched by the leader, its mover is woken at once: a wake-up from another
            # instance may be missed while the mover subscribes (then it looks within 5 s).
            await dispatching(lambda: lead.dispatch_delayed("record", "later", 0))
            await dispatching(lambda: lead.dispatch_delayed("once", {"k": "unique"}, 0))
            nobody = _message("nobody", None, "nobody")
            dead_letter = raw.xadd(keys.stream, {b"payload": nobody}).decode()
            await runs.wait_for(*good)
            if corruption.cron:
                await runs.wait_for("tick")
            await redis_state(led)
            lead = a if a.is_leader else b
            chores = parts(lead)
            # The leader's periodic chores go round again (two rounds: one had begun).
            # (The mover's work shows in the delayed tasks that ran.)
            await chores.janitor.wait_rounds(chores.janitor.rounds + 2)
            aggregated = chores.aggregator.rounds + 2

            async def aggregated_twice() -> bool:
                await trio.lowlevel.checkpoint()
                return chores.aggregator.rounds >= aggregated

            await redis_state(aggregated_twice)

            def dead_messages() -> list[bytes]:
                if raw.type(keys.dead) != b"stream":
                    return []
                return [f.get(b"payload", b"") for _, f in raw.xrange(keys.dead)]

            async def settled() -> bool:
                await trio.lowlevel.checkpoint()
                seen = {(r[b"source"].decode(), r[b"item"].decode()) for r in records(raw, keys)}
                wrong = [
                    k
                    for k, t in keys.types().items()
                    if raw.type(k) not in (b"none", t.encode()) and k not in corruption.left
                ]
                ids = (
                    {f.get(b"message_id", b"").decode() for _, f in raw.xrange(keys.dead)}
                    if raw.type(keys.dead) == b"stream"
                    else set()
                )
                return (
                    corruption.records <= seen
                    and not wrong
                    and dead_letter in ids
                    and all(d in dead_messages() for d in corruption.dead)
                )

            await redis_state(settled)
            for payload in good:
                assert runs.payloads.count(payload) == 1, f"{payload} ran once"
            for runner in (a, b):
                assert runner.state is trunner.RunnerState.STARTED
                assert runner.statistics().chores_restarted == 0
            # The dead letters are readable, whatever they hold.
            await a.admin.dead_letters()
            assert await a.admin.dead_letter_count() >= 1
            await a.admin.quarantined()
            await a.admin.instances()
            await a.admin.group_stats()
            await a.admin.inspect()
            for task_id in corruption.ghosts:
                await a.handle(task_id).status()
            unexplained = [e for e in errors if not allowed(e)]
            assert not unexplained, unexplained
            runs.release.set()
    # Nothing is lost: every key set aside still holds what was written there.
    for record in records(raw, keys):
        action = record[b"action"].decode()
        if action.startswith("renamed to "):
            assert raw.exists(action.removeprefix("renamed to ")), record
        assert record[b"reason"], record


@pytest.fixture(scope="module", params=["memory", "redis"])
def tier(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def server(tier: str, request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The URL of the real Redis (None on the memory tier: a server per example)."""
    if tier == "memory":
        yield None
    else:
        redis_server: RedisServer = request.getfixturevalue("redis_server")
        yield redis_server.url


KINDS = list(corruptions(Keys(PREFIX, "g")))


#: The numbers that broke the scripts (Lua's tonumber takes them): each is written into
#: every key that holds a number at once, on top of the examples above (three per kind
#: cannot be trusted to draw them).
BROKE = [b"inf", b"-inf", b"nan", b"1e300", b"9" * 20, b"18446744073709551616"]


def numbers_everywhere(keys: Keys, value: bytes) -> Corruption:
    """``value`` in every key holding a number, or an id made of numbers; and what must
    be recorded of it."""
    rate = keys.rate_limit("5:paced")
    holders = keys.concurrency_holders("6:capped")
    ops: list[Op] = [
        ("setpx", rate, value, 60_000),  # a time-to-live: the number alone is refused
        ("hset", keys.cron, "tick", value),
        ("hset", keys.cancelled, "ghost-mark", value),
        ("hset", keys.where, "ghost-where", value + b"-0"),
        ("hset", keys.where, "ghost-r", b"1-" + value),
        ("hset", keys.capacity, "version", value),
        ("hset", keys.capacity, "value", value),
        ("hset", keys.metrics, "t:record:max", value),
        ("hset", keys.metrics, "t:record:n", value),
        ("hset", keys.task("ghost-r"), "state", "running"),
        ("hset", keys.task("ghost-r"), "attempt", value),
        ("hset", keys.task("ghost-r"), "progress", value),
        ("zadd", holders, value + b"-0", 1.0),
        ("zadd", holders, b"0-" + value, 1.0),
        ("sadd", keys.concurrency_keys, b"6:capped"),
        ("set", keys.floor, value + b"-0"),
        ("set", keys.lane_floor("urgent"), b"1-" + value),
        ("set", keys.fence, value),
        ("sadd", keys.lanes, value),
        ("sadd", keys.groups, value),
    ]
    if value != b"nan":  # (ZADD refuses NaN)
        ops += [
            ("zadd", holders, b"1-1", float(value)),
            ("zadd", keys.delayed, "ghost-due", float(value)),
        ]
    records = {
        ("limits", rate),
        ("cancelled", "ghost-mark"),
        ("where", "ghost-where"),
        ("where", "ghost-r"),
    }
    if not is_int(value):
        records.add(("cron", "tick"))
    if not is_number(value):
        records |= {("metrics", "t:record:max"), ("metrics", "t:record:n")}
    if not (is_int(value) and int(value) < 2**63 - 1):
        records.add(("leader", keys.leader))
    if mark_ok(value):  # a time: the group would be paused, as it should
        ops.append(("set", keys.paused, b"x" + value))
    else:
        ops.append(("set", keys.paused, value))
    records.add(("paused", keys.paused))
    return Corruption("numbers", ops, records=records, cron=True, lanes=True, ghosts=["ghost-r"])


@pytest.mark.parametrize("value", BROKE, ids=lambda v: v.decode()[:12])
async def test_the_numbers_that_broke_the_scripts_cost_only_themselves(
    server: str | None, value: bytes
) -> None:
    group = f"g-{uuid.uuid4().hex[:10]}"
    keys = Keys(PREFIX, group)
    name = f"fuzz-{uuid.uuid4().hex[:12]}"
    url = server or f"memory://{name}"
    raw = raw_client(url)
    try:
        with trio.fail_after(20):
            await exercise(url, keys, raw, numbers_everywhere(keys, value))
    finally:
        for key in raw.scan_iter(match=f"{PREFIX}:{{{group}}}*"):
            raw.delete(key)
        raw.close()
        forget_memory_server(name)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@pytest.mark.parametrize("kind", KINDS)
@given(data=st.data())
async def test_bad_values_in_any_key_cost_only_themselves(
    server: str | None, kind: str, data: st.DataObject
) -> None:
    # pytest-trio runs each example in its own trio.run: the deadline is the example's.
    group = f"g-{uuid.uuid4().hex[:10]}"
    keys = Keys(PREFIX, group)
    corruption = data.draw(corruptions(keys)[kind], label="corruption")
    event(f"{kind}: {' '.join(str(op[0]) for op in corruption.ops)}")
    name = f"fuzz-{uuid.uuid4().hex[:12]}"
    url = server or f"memory://{name}"
    raw = raw_client(url)
    try:
        with trio.fail_after(20):
            await exercise(url, keys, raw, corruption)
    finally:
        for key in raw.scan_iter(match=f"{PREFIX}:{{{group}}}*"):
            raw.delete(key)
        raw.close()
        forget_memory_server(name)
