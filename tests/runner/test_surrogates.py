"""Lone surrogates: a JSON string may hold one (``"\\ud800"``), UTF-8 cannot.

Such a string can never become a Redis key or argument. It is refused at the edge (task
names, unique keys, group names), an entry holding one where the runner needs it as a key
or an argument is undecodable (dead-lettered at once), a dead letter is written whatever
its text holds, and a command argument holding one fails that command only.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
import trio

import trunner
from trunner._redis import as_str, open_transport, pack
from trunner._wire.decode import MessageDecodeError, decode_fields, decode_message
from trunner._wire.envelope import NO_SIZE_LIMIT, encode_message, reencode_for_retry

from ..conftest import Tally, config, redis_state

LONE = "\ud800"


def entry(**body: Any) -> list[bytes]:
    """A stream entry whose JSON may hold lone surrogates (written as ASCII escapes)."""
    return [b"payload", json.dumps(body).encode("ascii")]


# -- the codec ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "body"),
    [
        ("task", {"task": "t" + LONE, "payload": None}),
        ("task", {"task": "\udfff", "payload": None}),
        ("id", {"task": "t", "payload": None, "id": LONE}),
        ("unique_key", {"task": "t", "payload": None, "unique_key": LONE, "unique_token": "x"}),
        ("unique_token", {"task": "t", "payload": None, "unique_key": "k", "unique_token": LONE}),
    ],
)
def test_a_lone_surrogate_in_a_key_field_makes_the_entry_undecodable(
    field: str, body: dict[str, Any]
) -> None:
    fields = entry(attempt=1, enqueued_at=1.5, **body)
    assert decode_fields("1-0", fields, 1, None) is None, "the fast path leaves it"
    with pytest.raises(MessageDecodeError, match=f"'{field}' cannot be sent to Redis") as info:
        decode_message("1-0", fields)
    assert "lone surrogate" in info.value.reason
    # The reason itself can be written anywhere.
    info.value.reason.encode("utf-8")


def test_surrogate_pairs_and_payload_surrogates_still_decode_and_survive_a_retry() -> None:
    body = {"task": "t\U0001f600", "payload": {"s": LONE, "n": 1}, "attempt": 1}
    fields = [b"payload", json.dumps({**body, "enqueued_at": 1.5}).encode("ascii")]
    found = decode_fields("1-0", fields, 1, None)
    assert found is not None
    assert found[0] == "t\U0001f600"
    assert found[1]["s"] == LONE
    again = reencode_for_retry(decode_message("1-0", fields), 2, NO_SIZE_LIMIT)
    assert decode_message("2-0", [b"payload", again]).payload == {"s": LONE, "n": 1}
    # A payload holding one is encoded as JSON escapes, as before.
    data = encode_message("t", {"s": LONE}, enqueued_at=1.0, max_bytes=NO_SIZE_LIMIT)
    assert b"\\ud800" in data


# -- the edge -------------------------------------------------------------------------------


def test_task_names_group_names_and_cron_keys_that_cannot_be_sent_are_refused() -> None:
    async def action(_: Any) -> None:
        pass

    tasks = trunner.TaskRegistry()
    with pytest.raises(ValueError, match="cannot be sent to Redis"):
        tasks.task("send" + LONE)(action)
    with pytest.raises(ValueError, match="cannot be sent to Redis"):
        trunner.RunnerConfig(consumer_group="g" + LONE)
    with pytest.raises(ValueError, match="cannot be sent to Redis"):
        trunner.RunnerConfig(consumer_group="g", consumer_name="c" + LONE)
    with pytest.raises(ValueError, match="cannot be sent to Redis"):
        tasks.cron("* * * * *", "c" + LONE)
    tasks.task("lock", unique=True, unique_for=5, unique_key=lambda p: p)(action)
    with pytest.raises(trunner.InvalidPayload, match="unique key of task 'lock'"):
        tasks.cron("* * * * *", "lock", LONE)
    with pytest.raises(trunner.InvalidPayload, match="unique_key of task 't'"):
        encode_message("t", None, enqueued_at=0.0, unique_key=LONE, unique_token="x", max_bytes=9)


async def test_dispatches_refuse_names_and_unique_keys_that_cannot_be_sent(
    url: str, group: str, raw: Any
) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task(unique=True, unique_for=5, unique_key=lambda p: p)
    async def lock(_: Any) -> None:
        pass

    when = datetime.datetime.now(datetime.UTC)
    async with trunner.open_client(url, group) as anything:
        for call in (
            anything.dispatch("t" + LONE, 1),
            anything.dispatch_many("t" + LONE, [1]),
            anything.dispatch_delayed("t" + LONE, 1, 5),
            anything.schedule_for("t" + LONE, 1, when),
        ):
            with pytest.raises(ValueError, match=r"task_name cannot be sent to Redis.*\\ud800"):
                await call
    async with trunner.open_client(url, group, tasks=tasks) as client:
        for call in (
            client.dispatch("lock", LONE),
            client.dispatch_many("lock", ["fine", LONE]),
            client.dispatch_delayed("lock", "a" + LONE, 5),
            client.schedule_for("lock", LONE, when),
        ):
            with pytest.raises(trunner.InvalidPayload, match=r"unique key .*\\ud800"):
                await call
        assert await client.admin.queue_length() == 0
        assert await client.admin.delayed_count() == 0
    assert raw.keys(f"*{group}*") == [], "nothing was written"


# -- the runner -----------------------------------------------------------------------------


def registry(tally: Tally) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.task(unique=True, unique_for=30, unique_key=lambda p: p["key"])
    async def charge(payload: Any) -> None:
        tally.record(payload)

    @tasks.task
    async def plain(payload: Any) -> None:
        tally.record(payload)

    @tasks.task(max_retry=0)
    async def fail_with_text(payload: Any) -> None:
        raise ValueError(f"bad input {LONE} here")

    return tasks


async def test_an_entry_with_a_lone_surrogate_key_is_dead_lettered_once_and_the_runner_serves_on(
    url: str, group: str, raw: Any, tally: Tally
) -> None:
    stream = f"trunner:{{{group}}}:stream"
    async with trunner.open_runner(url, config(group), registry(tally)) as runner:
        bad: list[dict[str, Any]] = [
            {"task": "charge", "payload": {"key": 1}, "unique_key": "6:charge:" + LONE},
            {"task": "charge", "payload": {"key": 2}, "unique_key": "k", "unique_token": LONE},
            {"task": "plain" + LONE, "payload": 3},
            {"task": "plain", "payload": 4, "id": LONE},
        ]
        for body in bad:
            if "unique_key" in body:
                body.setdefault("unique_token", "tok")
            raw.xadd(stream, dict(zip(*[iter(entry(attempt=1, **body))] * 2, strict=True)))

        async def all_dead() -> bool:
            return await runner.admin.dead_letter_count() == len(bad)

        await redis_state(all_dead)
        await runner.dispatch("plain", "after")
        await tally.wait(1)
        assert tally.payloads == ["after"], "none of the bad entries ran"
        letters = await runner.admin.dead_letters()
        assert {d.reason for d in letters} == {"undecodable"}
        assert all("lone surrogate" in d.error for d in letters)
        assert runner.state is trunner.RunnerState.STARTED

        async def none_pending() -> bool:  # none is left to be redelivered
            return await runner.admin.pending_count() == 0

        await redis_state(none_pending)


async def test_a_dead_letter_is_written_whatever_its_error_text_holds(
    url: str, group: str, tally: Tally
) -> None:
    async with trunner.open_runner(url, config(group), registry(tally)) as runner:
        await runner.dispatch("fail_with_text", None)

        async def dead() -> bool:
            return await runner.admin.dead_letter_count() == 1

        await redis_state(dead)
        [letter] = await runner.admin.dead_letters()
        assert "bad input \\ud800 here" in letter.cause


# -- RESP and the transports ----------------------------------------------------------------


def test_pack_refuses_a_lone_surrogate_and_round_trips_what_as_str_read() -> None:
    with pytest.raises(trunner.errors.InvalidArgument, match="lone surrogate"):
        pack(["SET", "k" + LONE, "v"])
    with pytest.raises(ValueError, match="lone surrogate"):  # InvalidArgument is a ValueError
        pack(["SET", "k", LONE])
    stored = b"caf\xe9 \xff\xfe"  # not UTF-8: as Redis may hold it
    assert pack(["GET", as_str(stored)]) == pack([b"GET", stored])


@pytest.mark.parametrize("bridge", [False, True])
async def test_every_transport_refuses_a_lone_surrogate_and_round_trips_bytes(
    url: str, bridge: bool
) -> None:
    if bridge and url.startswith("memory://"):
        pytest.skip("memory:// has one transport")
    async with open_transport(
        url, client_name="t", max_connections=2, connect_timeout=5, bridge=bridge
    ) as transport:
        for call in (
            transport.execute("SET", "k" + LONE, 1),
            transport.pipeline([("SET", "a", 1), ("SET", "b", LONE)]),
        ):
            with pytest.raises(trunner.errors.InvalidArgument):
                await call
        assert await transport.execute("EXISTS", "a") == 0, "nothing of the pipeline ran"
        name = as_str(b"surrogate-test:\xff")
        await transport.execute("SET", name, b"v")
        assert await transport.execute("GET", b"surrogate-test:\xff") == b"v"
        await transport.execute("DEL", name)


async def test_a_task_sending_a_lone_surrogate_fails_alone(
    url: str, group: str, tally: Tally
) -> None:
    tasks = trunner.TaskRegistry()
    errors: list[BaseException] = []

    @tasks.task
    async def careless(_: Any) -> None:
        try:
            await trunner.current_runner().redis.set("k" + LONE, 1)
        except trunner.errors.InvalidArgument as exc:
            errors.append(exc)
            raise

    @tasks.task
    async def careful(payload: Any) -> None:
        await trunner.current_runner().redis.set(f"careful:{payload}", 1)
        tally.record(payload)

    async with trunner.open_runner(url, config(group), tasks) as runner:
        for i in range(5):
            await runner.dispatch("careless", i)
            await runner.dispatch("careful", i)
        await tally.wait(5)

        async def done() -> bool:
            return await runner.admin.dead_letter_count() == 5

        await redis_state(done)
        assert len(errors) == 5
        assert runner.state is trunner.RunnerState.STARTED
    await trio.lowlevel.checkpoint()
