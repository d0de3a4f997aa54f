"""The task Redis handle never lets one task's command change or hold a connection that
other tasks and the runner use.

Connection-state commands (SELECT, CLIENT REPLY, MULTI, SUBSCRIBE ...) are refused with a
clear error; blocking commands (BLPOP, XREAD ... BLOCK ...) run on connections of their own,
so that they delay no other task's commands and no acknowledgement.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import trio

import trunner
from trunner._redis import Transport, open_transport
from trunner.redis_handle import check_command

from ..conftest import config, redis_state

REFUSED = [
    ("SELECT", 1),
    ("select", 1),
    (b"SeLeCt", 1),
    ("CLIENT", "REPLY", "OFF"),
    ("client", "setname", "x"),
    ("CLIENT", "TRACKING", "on"),
    ("CLIENT", "NO-EVICT", "on"),
    ("MULTI",),
    ("exec",),
    ("DISCARD",),
    ("WATCH", "k"),
    ("UNWATCH",),
    ("SUBSCRIBE", "c"),
    ("psubscribe", "c*"),
    ("SSUBSCRIBE", "c"),
    ("UNSUBSCRIBE",),
    ("RESET",),
    ("HELLO", 3),
    ("AUTH", "pw"),
    ("QUIT",),
    ("READONLY",),
    ("READWRITE",),
    ("MONITOR",),
]


@pytest.mark.parametrize("command", REFUSED, ids=lambda c: " ".join(map(str, c)))
def test_connection_state_commands_are_refused_in_any_case(command: tuple[Any, ...]) -> None:
    with pytest.raises(trunner.errors.CommandNotAllowed, match="does not send") as info:
        check_command(command)
    assert isinstance(info.value, ValueError)


def test_the_refusal_says_what_to_use_instead() -> None:
    hints = {
        ("SELECT", 2): "open_redis",
        ("MULTI",): "pipeline(transaction=True)",
        ("WATCH", "k"): "eval()",
        ("SUBSCRIBE", "c"): "client of your own",
        ("AUTH", "pw"): "another URL",
    }
    for command, hint in hints.items():
        with pytest.raises(trunner.errors.CommandNotAllowed, match=re.escape(hint)):
            check_command(command)


@pytest.mark.parametrize(
    ("command", "blocks"),
    [
        (("BLPOP", "k", 0), True),
        (("brpop", "k", 0), True),
        (("BLMOVE", "a", "b", "LEFT", "RIGHT", 0), True),
        (("BLMPOP", 0, 1, "k", "LEFT"), True),
        (("BZPOPMIN", "z", 0), True),
        (("bzpopmax", "z", 0), True),
        (("BZMPOP", 0, 1, "z", "MIN"), True),
        (("BRPOPLPUSH", "a", "b", 0), True),
        (("WAIT", 0, 0), True),
        (("WAITAOF", 0, 0, 0), True),
        (("XREAD", "BLOCK", 0, "STREAMS", "s", "$"), True),
        (("xread", "count", 1, "block", 10, "streams", "s", "0"), True),
        (("XREADGROUP", "GROUP", "g", "c", "BLOCK", 0, "STREAMS", "s", ">"), True),
        (("XREAD", "STREAMS", "block", "0"), False),  # a stream named "block"
        (("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"), False),
        (("CLIENT", "ID"), False),
        (("CLIENT", "INFO"), False),
        (("GET", "k"), False),
    ],
)
def test_blocking_commands_are_recognized(command: tuple[Any, ...], blocks: bool) -> None:
    assert check_command(command) is blocks


async def test_pipelines_refuse_state_commands_and_blocking_ones_outside_a_transaction(
    url: str,
) -> None:
    async with trunner.open_redis(url) as redis:
        with pytest.raises(trunner.errors.CommandNotAllowed):
            redis.pipeline().add("SELECT", 1)
        with pytest.raises(trunner.errors.CommandNotAllowed, match="transaction"):
            redis.pipeline(transaction=True).add("MULTI")
        with pytest.raises(trunner.errors.CommandNotAllowed, match="execute"):
            redis.pipeline().add("BLPOP", "k", 0)
        # Inside MULTI/EXEC, Redis never blocks: allowed there.
        await redis.rpush("iso:list", "a")
        async with redis.pipeline(transaction=True) as tx:
            tx.add("BLPOP", "iso:list", 0)
        assert tx.results == [[b"iso:list", b"a"]]


async def test_a_refused_command_leaves_dispatches_and_acks_in_their_database(
    url: str, group: str
) -> None:
    """A SELECT through the handle used to move a shared connection to another database:
    later dispatches and acknowledgements went there, and tasks stayed pending."""
    refused: list[BaseException] = []
    ran = 0
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def meddle(_: Any) -> None:
        redis = trunner.current_runner().redis
        for command in (("SELECT", 1), ("CLIENT", "REPLY", "OFF"), ("MULTI",)):
            try:
                await redis.execute(*command)
            except trunner.errors.CommandNotAllowed as exc:
                refused.append(exc)

    @tasks.task
    async def plain(_: Any) -> None:
        nonlocal ran
        await trunner.current_runner().redis.incr(f"iso:{group}")
        ran += 1

    async with trunner.open_runner(url, config(group), tasks) as runner:
        await runner.dispatch("meddle", None)
        for i in range(30):
            await runner.dispatch("plain", i)

        async def all_done() -> bool:
            return ran == 30 and await runner.admin.pending_count() == 0

        await redis_state(all_done)
        assert len(refused) == 3
        assert await runner.redis.get(f"iso:{group}") == b"30"
        assert await runner.admin.queue_length() == 0


async def test_blocked_tasks_delay_no_other_command_nor_any_acknowledgement(
    url: str, group: str, raw: Any
) -> None:
    """Two tasks in BLPOP key 0 and one in XREAD BLOCK 0 hold no connection of the pool
    (two connections here) and no batch: other tasks' commands and the acks flow."""
    blocked = 0
    unblocked = trio.Event()
    woke: list[Any] = []
    ran = 0
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def pop(_: Any) -> None:
        nonlocal blocked
        redis = trunner.current_runner().redis
        blocked += 1
        woke.append(await redis.execute("BLPOP", f"iso:{group}:list", 0))

    @tasks.task
    async def tail(_: Any) -> None:
        nonlocal blocked
        redis = trunner.current_runner().redis
        blocked += 1
        read = ("XREAD", "BLOCK", 0, "STREAMS", f"iso:{group}:events", "$")
        woke.append(await redis.execute(*read))

    @tasks.task
    async def plain(_: Any) -> None:
        nonlocal ran
        redis = trunner.current_runner().redis
        await redis.incr(f"iso:{group}:count")
        async with redis.pipeline() as pipe:
            pipe.add("INCR", f"iso:{group}:piped")
        ran += 1

    # Far longer than the test's deadline: a command held up behind a blocked one fails it.
    cfg = config(group, max_connections=2, command_timeout=120.0, num_workers=10)
    async with trunner.open_runner(url, cfg, tasks) as runner:
        for name in ("pop", "pop", "tail"):
            await runner.dispatch(name, None)

        async def all_blocked() -> bool:
            return blocked == 3 and (url.startswith("memory://") or _blocked_clients(raw) >= 3)

        await redis_state(all_blocked)
        for i in range(40):
            await runner.dispatch("plain", i)

        async def all_done() -> bool:
            return ran == 40 and await runner.admin.pending_count() == 3  # the blocked three

        await redis_state(all_done)
        assert await runner.redis.get(f"iso:{group}:count") == b"40"
        # Wake them: they get their replies, as from any client.
        await runner.redis.rpush(f"iso:{group}:list", "a", "b")
        await runner.redis.execute("XADD", f"iso:{group}:events", "*", "f", "v")

        async def woken() -> bool:
            return len(woke) == 3 and await runner.admin.pending_count() == 0

        await redis_state(woken)
        unblocked.set()
    assert sorted(str(w[0][0] if isinstance(w[0], list) else w[0]) for w in woke) == sorted(
        [f"b'iso:{group}:events'", f"b'iso:{group}:list'", f"b'iso:{group}:list'"]
    )


def _blocked_clients(raw: Any) -> int:
    return sum(1 for c in raw.client_list() if c.get("cmd") in ("blpop", "xread"))


# -- the transports -------------------------------------------------------------------------


@pytest.fixture(params=["native", "bridged"])
def transport_kind(request: pytest.FixtureRequest, url: str) -> str:
    # A synchronous fixture: a skip here is reported with its reason (one raised inside
    # an async fixture loses it).
    kind: str = request.param
    if kind == "bridged" and url.startswith("memory://"):
        pytest.skip("memory:// has one transport")
    return kind


@pytest.fixture
async def any_transport(transport_kind: str, url: str) -> Any:
    async with open_transport(
        url,
        client_name="iso",
        max_connections=1,
        connect_timeout=5,
        command_timeout=60,
        bridge=transport_kind == "bridged",
    ) as transport:
        yield transport


async def test_a_blocking_command_has_a_connection_of_its_own(
    any_transport: Transport, group: str
) -> None:
    transport = any_transport
    key = f"iso:{group}:t"
    got: list[Any] = []
    async with trio.open_nursery() as nursery:

        async def pop() -> None:
            got.append(await transport.execute_blocking("BLPOP", key, 0, key=key))

        nursery.start_soon(pop)
        # The pool has one connection: these would wait behind the BLPOP if it held it.
        for _ in range(20):
            await transport.execute("PING")
        await transport.pipeline([("SET", f"{key}:x", 1), ("GET", f"{key}:x")])
        await transport.execute("RPUSH", key, "v")
    assert got == [[key.encode(), b"v"]]
    await transport.execute("DEL", key, f"{key}:x")


async def test_a_cancelled_blocking_command_leaves_nothing_blocked(
    any_transport: Transport, group: str, raw: Any, url: str
) -> None:
    transport = any_transport
    key = f"iso:{group}:c"
    with trio.move_on_after(0.2) as scope:
        await transport.execute_blocking("BLPOP", key, 0, key=key)
    assert scope.cancelled_caught

    async def none_blocked() -> bool:
        await trio.lowlevel.checkpoint()
        return url.startswith("memory://") or _blocked_clients(raw) == 0

    await redis_state(none_blocked)
    await transport.execute("RPUSH", key, "kept")
    assert await transport.execute("LRANGE", key, 0, -1) == [b"kept"], "nobody swallowed it"
    # Blocking again works, and returns at once now.
    assert await transport.execute_blocking("BLPOP", key, 0) == [key.encode(), b"kept"]
    assert await transport.execute_blocking("BLPOP", key, 0.01) is None
