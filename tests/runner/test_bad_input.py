"""Bad input: poison stream entries never crash a loop; bad calls raise and write nothing.

The codec itself is property-tested in tests/unit/test_message.py, and the errors of bad
calls in test_runner.py, test_mover.py and tests/unit/test_config.py; here: the whole runner
fed arbitrary entries (message.py, fetcher.py, pool.py, outcomes.py), and, on a real Redis,
proof that a refused call wrote nothing at all (_producer/, client.py) and that bad
settings are refused before any connection is made.
"""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import trunner
from trunner._redis import forget_memory_server
from trunner._wire.decode import MessageDecodeError, decode_message
from trunner._wire.envelope import MESSAGE_GROWTH
from trunner.keys import Keys

from ..conftest import open_checked_runner, raw_client, redis_state
from ..support.servers import RedisServer

# -- poison entries: any bytes, any field layout ---------------------------------------------

MAX_BYTES = 300
REGISTERED = "record"

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()  # NaN and infinities too: json.dumps writes them, json.loads reads them
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
# Message bodies near the real format: each known field present or not, valid or not.
bodies = st.fixed_dictionaries(
    {},
    optional={
        "task": st.sampled_from([REGISTERED, "nope", ""]) | json_values,
        "payload": json_values,
        "attempt": st.sampled_from([1, 2, 0, -1, True, 1.0, "1"]) | json_values,
        "enqueued_at": st.floats() | st.integers() | json_values,
        "id": st.text(max_size=10) | json_values,
        "unique_key": st.text(max_size=10) | json_values,
        "unique_token": st.text(max_size=10) | json_values,
        "extra": json_values,
    },
)
field_values = (
    st.binary(max_size=MAX_BYTES + 20)
    | bodies.map(lambda b: json.dumps(b).encode())
    | bodies.map(lambda b: json.dumps(b).encode("utf-16"))
    | json_values.map(lambda v: json.dumps(v).encode())
)
field_names = st.sampled_from([b"payload", b"task", b"attempt", b""]) | st.binary(max_size=8)


def _near(overrides: dict[str, Any], dropped: set[str]) -> dict[str, Any]:
    body = {"task": REGISTERED, "payload": None, "attempt": 1, "enqueued_at": 1.0} | overrides
    return {k: v for k, v in body.items() if k not in dropped}


# A valid message with a few fields changed or missing (often none), plus stray fields.
near_valid = st.builds(
    _near,
    st.just({})
    | st.fixed_dictionaries(
        {},
        optional={
            "task": st.sampled_from(["nope", "", "Record", "record "]),
            "attempt": st.sampled_from([2, 3, 0, -1, True, 1.5, "1", None]),
            "id": st.sampled_from(["", "x", 5]),
            "unique_key": st.sampled_from(["k", "", "a b{c}", 5]),
            "unique_token": st.sampled_from(["t", 5]),
        },
    )
    | bodies,
    st.sets(st.sampled_from(["task", "payload", "attempt", "enqueued_at"]), max_size=1),
)
near_valid_entries = st.builds(
    lambda body, extra: {b"payload": json.dumps(body).encode(), **extra},
    near_valid,
    st.dictionaries(field_names.filter(lambda n: n != b"payload"), field_values, max_size=2),
)
any_entries = st.dictionaries(field_names, field_values, min_size=1, max_size=4)
entries = st.lists(near_valid_entries | any_entries, min_size=1, max_size=6)


def expected_outcome(entry_id: str, fields: dict[bytes, bytes]) -> str:
    """What the runner must do with an entry: ``ran``, or the dead-letter reason.

    A runner reads entries up to ``max_payload_bytes + MESSAGE_GROWTH`` bytes (a retry of
    a message dispatched at the limit grows a little, and must still run)."""
    try:
        message = decode_message(entry_id, fields, max_bytes=MAX_BYTES + MESSAGE_GROWTH)
    except MessageDecodeError:
        return "undecodable"
    if message.task_name != REGISTERED:
        return "unknown task"
    if message.attempt > 1:  # max_retry=0: one attempt
        return "max retries exceeded (redelivered)"
    return "ran"


async def _has(ran: list[str], message_id: str) -> bool:
    await trio.lowlevel.checkpoint()
    return message_id in ran


@pytest.fixture(scope="module")
def quiet_server() -> Iterator[RedisServer]:
    """A Redis of this module's own: nothing else writes to it or connects to it."""
    with RedisServer() as server:
        yield server


class Watch:
    """Writes (``rdb_changes_since_last_save``: every write counts, even with --save "")
    and connections Redis received, to compare before and after a call."""

    def __init__(self, server: RedisServer) -> None:
        self._raw = raw_client(server.url)
        self._raw.ping()

    def now(self) -> tuple[int, int, int]:
        writes = self._raw.info("persistence")["rdb_changes_since_last_save"]
        connections = self._raw.info("stats")["total_connections_received"]
        return writes, connections, self._raw.dbsize()

    def close(self) -> None:
        self._raw.close()


def registry() -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def record(_: Any) -> None:
        await trio.lowlevel.checkpoint()

    @tasks.task(unique=True, unique_key=lambda p: p["user"], unique_for=60)
    async def per_user(_: Any) -> None:
        await trio.lowlevel.checkpoint()

    return tasks


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=entries)
async def test_any_stream_entry_is_run_or_dead_lettered_and_the_runner_keeps_serving(
    batch: list[dict[bytes, bytes]],
) -> None:
    name, group = f"poison-{uuid.uuid4().hex[:12]}", "poison"
    keys = Keys("trunner", group)
    url, stream = f"memory://{name}", keys.stream
    ran: list[str] = []
    errors: list[BaseException] = []
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def record(_: Any) -> None:
        ran.append(trunner.current_message().message_id)

    async def collect(runner: trunner.Runner) -> None:
        async for error in runner.errors():
            errors.append(error)

    cfg = trunner.RunnerConfig(
        consumer_group=group, block_duration=0.05, max_payload_bytes=MAX_BYTES
    )
    try:
        with trio.fail_after(20):
            async with (
                trio.open_nursery() as nursery,
                open_checked_runner(url, cfg, tasks) as runner,
            ):
                nursery.start_soon(collect, runner)
                raw = raw_client(url)
                ids = [raw.xadd(stream, fields).decode() for fields in batch]
                expected = {i: expected_outcome(i, f) for i, f in zip(ids, batch, strict=True)}
                for outcome in set(expected.values()):
                    event(outcome)  # pytest --hypothesis-show-statistics shows the mix

                def dead_reasons() -> dict[str, str]:
                    dead = raw.xrange(keys.dead)
                    return {f[b"message_id"].decode(): f[b"reason"].decode() for _, f in dead}

                async def settled() -> bool:
                    await trio.lowlevel.checkpoint()
                    done = set(ran) | set(dead_reasons())
                    return done >= set(ids) and raw.xpending(stream, group)["pending"] == 0

                with trio.move_on_after(5):
                    await redis_state(settled, poll=0.01)
                assert runner.state is trunner.RunnerState.STARTED
                outcomes = dict.fromkeys(ran, "ran") | dead_reasons()
                assert outcomes == expected
                assert raw.xlen(stream) == 0, "every entry was acknowledged and deleted"
                control = await runner.dispatch(REGISTERED, "still serving")
                await redis_state(lambda: _has(ran, control), poll=0.01)
    finally:
        forget_memory_server(name)
    given_up = (trunner.errors.InvalidMessage, trunner.TaskNotFound, trunner.MaxRetryExceeded)
    assert all(isinstance(e, given_up) for e in errors), errors


async def test_a_step_message_whose_step_is_bad_is_dead_lettered_and_the_runner_goes_on() -> None:
    """A malformed ``wf`` member (a workflow step reference) in Redis is that message's
    problem alone: given up as undecodable with the reason, the others run."""
    name, group = f"bad-step-{uuid.uuid4().hex[:12]}", "steps"
    keys = Keys("trunner", group)
    ran: list[Any] = []
    errors: list[BaseException] = []
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def record(payload: Any) -> None:
        ran.append(payload)

    async def collect(runner: trunner.Runner) -> None:
        async for error in runner.errors():
            errors.append(error)

    bad = [["w1", -1], ["w 1", 0, "", True], ["w1", 3, "2"], "w1", ["w1", 0, "1", "yes"]]
    cfg = trunner.RunnerConfig(consumer_group=group, block_duration=0.05)
    try:
        with trio.fail_after(20):
            async with (
                trio.open_nursery() as nursery,
                open_checked_runner(f"memory://{name}", cfg, tasks) as runner,
            ):
                nursery.start_soon(collect, runner)
                raw = raw_client(f"memory://{name}")
                body = {"task": REGISTERED, "payload": "bad", "attempt": 1, "enqueued_at": 1.0}
                for step in bad:
                    raw.xadd(keys.stream, {b"payload": json.dumps(body | {"wf": step})})
                good = body | {"payload": "good", "id": "w1.0", "wf": ["w1", 0, "1", True]}
                raw.xadd(keys.stream, {b"payload": json.dumps(good)})

                async def settled() -> bool:
                    await trio.lowlevel.checkpoint()
                    return raw.xlen(keys.dead) == len(bad) and ran == ["good"]

                await redis_state(settled, poll=0.01)
                reasons = {f[b"reason"] for _, f in raw.xrange(keys.dead)}
                assert reasons == {b"undecodable"}
                await runner.dispatch(REGISTERED, "still serving")
                await redis_state(lambda: _has(ran, "still serving"), poll=0.01)
                assert runner.state is trunner.RunnerState.STARTED
    finally:
        forget_memory_server(name)
    assert len(errors) == len(bad)
    assert all(isinstance(e, trunner.errors.InvalidMessage) for e in errors), errors
    assert all("'wf' is not a workflow step" in str(e) for e in errors), errors


# -- refused calls write nothing: checked on a real Redis ------------------------------------


NAIVE = datetime.datetime(2030, 1, 1)
AWARE = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
Call = Callable[[trunner.Client], Awaitable[Any]]

BAD_CALLS: dict[str, tuple[Call, type[Exception]]] = {
    "not JSON-serializable": (lambda c: c.dispatch("record", {1, 2}), trunner.InvalidPayload),
    "NaN in the payload": (lambda c: c.dispatch("record", [float("nan")]), trunner.InvalidPayload),
    "payload too large": (lambda c: c.dispatch("record", "x" * 3000), trunner.PayloadTooLarge),
    "empty task name": (lambda c: c.dispatch("", 1), ValueError),
    "unknown task name": (lambda c: c.dispatch("nope", 1), trunner.TaskNotFound),
    "task name not a str": (lambda c: c.dispatch(b"record", 1), TypeError),  # type: ignore[call-overload]
    "many, one not serializable": (
        lambda c: c.dispatch_many("record", [1, 2, object()]),
        trunner.InvalidPayload,
    ),
    "many, one too large": (
        lambda c: c.dispatch_many("record", [1, "x" * 3000]),
        trunner.PayloadTooLarge,
    ),
    "many, unknown task": (lambda c: c.dispatch_many("nope", [1]), trunner.TaskNotFound),
    "delayed, not serializable": (
        lambda c: c.dispatch_delayed("record", {1}, 5),
        trunner.InvalidPayload,
    ),
    "delayed, too large": (
        lambda c: c.dispatch_delayed("record", "x" * 3000, 5),
        trunner.PayloadTooLarge,
    ),
    "delayed, unknown task": (lambda c: c.dispatch_delayed("nope", 1, 5), trunner.TaskNotFound),
    "delayed, negative delay": (lambda c: c.dispatch_delayed("record", 1, -1), ValueError),
    "delayed, NaN delay": (lambda c: c.dispatch_delayed("record", 1, float("nan")), ValueError),
    "delayed, infinite delay": (
        lambda c: c.dispatch_delayed("record", 1, float("inf")),
        ValueError,
    ),
    "delayed, delay not a number": (
        lambda c: c.dispatch_delayed("record", 1, "5"),  # type: ignore[call-overload]
        TypeError,
    ),
    "schedule_for, naive datetime": (lambda c: c.schedule_for("record", 1, NAIVE), ValueError),
    "schedule_for, too large": (
        lambda c: c.schedule_for("record", "x" * 3000, AWARE),
        trunner.PayloadTooLarge,
    ),
    "unique, too large (no lock taken)": (
        lambda c: c.dispatch("per_user", {"user": "u", "blob": "x" * 3000}),
        trunner.PayloadTooLarge,
    ),
    "unique, key function raises": (lambda c: c.dispatch("per_user", {}), KeyError),
    "unique, key of a wrong type": (
        lambda c: c.dispatch("per_user", {"user": [1]}),
        TypeError,
    ),
    "unique many, one bad (no lock taken)": (
        lambda c: c.dispatch_many("per_user", [{"user": "a"}, {"user": "b", "x": {1}}]),
        trunner.InvalidPayload,
    ),
    "unique delayed, not serializable": (
        lambda c: c.dispatch_delayed("per_user", {"user": "a", "x": {1}}, 5),
        trunner.InvalidPayload,
    ),
}


@pytest.mark.redis  # starts a redis-server of its own
@pytest.mark.parametrize("kind", list(BAD_CALLS))
async def test_a_refused_dispatch_writes_nothing_to_redis(
    quiet_server: RedisServer, group: str, kind: str
) -> None:
    call, error = BAD_CALLS[kind]
    watch = Watch(quiet_server)
    try:
        async with trunner.open_client(
            quiet_server.url, group, tasks=registry(), max_payload_bytes=2048
        ) as client:
            before = watch.now()
            with pytest.raises(error):
                await call(client)
            after = watch.now()
            await client.dispatch("record", 1)  # the control: a good call is a write
            assert watch.now()[0] > after[0]
    finally:
        watch.close()
    assert after == before, f"{kind}: (writes, connections, keys) changed"


BAD_SETTINGS: dict[str, tuple[Callable[[str, str], Any], type[Exception]]] = {
    "client: max_payload_bytes 0": (
        lambda url, g: trunner.open_client(url, g, max_payload_bytes=0),
        ValueError,
    ),
    "client: negative connect_timeout": (
        lambda url, g: trunner.open_client(url, g, connect_timeout=-1.0),
        ValueError,
    ),
    "client: NaN command_timeout": (
        lambda url, g: trunner.open_client(url, g, command_timeout=float("nan")),
        ValueError,
    ),
    "client: max_connections 0": (
        lambda url, g: trunner.open_client(url, g, max_connections=0),
        ValueError,
    ),
    "client: group with a hash tag": (
        lambda url, g: trunner.open_client(url, g + "{x}"),
        ValueError,
    ),
    "client: empty group": (lambda url, g: trunner.open_client(url, ""), ValueError),
    "client: tasks not a registry": (
        lambda url, g: trunner.open_client(url, g, tasks={}),  # type: ignore[arg-type]
        TypeError,
    ),
    "runner: config not a RunnerConfig": (
        lambda url, g: trunner.open_runner(url, {"consumer_group": g}, registry()),  # type: ignore[arg-type]
        TypeError,
    ),
    "runner: num_workers 0": (
        lambda url, g: trunner.open_runner(
            url, trunner.RunnerConfig(consumer_group=g, num_workers=0), registry()
        ),
        ValueError,
    ),
    "runner: reclaim_delay negative": (
        lambda url, g: trunner.open_runner(
            url, trunner.RunnerConfig(consumer_group=g, reclaim_delay=-1), registry()
        ),
        ValueError,
    ),
    "runner: unsupported URL": (
        lambda url, g: trunner.open_runner(
            url.replace("redis://", "http://"), trunner.RunnerConfig(consumer_group=g), registry()
        ),
        ValueError,
    ),
}


@pytest.mark.redis  # starts a redis-server of its own
@pytest.mark.parametrize("kind", list(BAD_SETTINGS))
async def test_bad_settings_are_refused_before_connecting(
    quiet_server: RedisServer, group: str, kind: str
) -> None:
    opener, error = BAD_SETTINGS[kind]
    watch = Watch(quiet_server)
    try:
        before = watch.now()
        with pytest.raises(error):
            async with opener(quiet_server.url, group):
                pass
        after = watch.now()
        async with trunner.open_client(quiet_server.url, group):  # the control
            assert watch.now()[1] > after[1], "a good client connects"
    finally:
        watch.close()
    assert after == before, f"{kind}: (writes, connections, keys) changed"
