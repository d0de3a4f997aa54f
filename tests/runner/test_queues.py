"""Queues and consumer groups as two things: several groups reading one queue each get
every message once (fan-out), what is a group's own (retries, replays, cron ticks, results,
pause) stays its own, and nothing a group has not read is deleted; a group reading the
queue of its own name keeps the layout trunner always had.

Crosses keys.py (the two layouts), ensure_group.lua (the registry of groups), ack.lua,
retry.lua, dead_letter.lua and cancel_task.lua (no deletion on a shared stream), the pool
(another group's message is skipped), the mover (a group's own retries), the janitor
(trimming what every group finished) and _wire/pause.py (notices naming the group).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
import trio

import trunner
from trunner import TaskState
from trunner._wire.envelope import encode_message
from trunner._wire.keys import hash_tag
from trunner.keys import Keys

from ..conftest import config, open_checked_runner, parts, redis_state

QUEUE_GROUPS = ("audit", "email", "billing")


def recording(ran: list[tuple[str, Any]], group: str, *, fail_once: set[Any] | None = None):  # type: ignore[no-untyped-def]
    """A registry whose task ``record`` notes (group, payload); with ``fail_once``, the
    first attempt of each payload in it fails (and is retried at once)."""
    tasks = trunner.TaskRegistry()
    failed: set[Any] = set()

    @tasks.task(max_retry=2, retry_backoff=0.01)
    async def record(payload: Any) -> None:
        if fail_once is not None and payload in fail_once and payload not in failed:
            failed.add(payload)
            ran.append((group, ("failed", payload)))
            raise RuntimeError("first attempt fails")
        ran.append((group, payload))

    return tasks


def _queue(name: str) -> str:
    return f"q-{name}"


def test_a_group_of_its_own_queue_keeps_every_key_where_it_was() -> None:
    """The default queue is the group: the names are the ones trunner always wrote (an
    existing deployment needs no migration)."""
    keys = Keys("trunner", "emails")
    assert keys == Keys("trunner", "emails", "emails")
    assert keys.own_queue
    assert keys.stream == "trunner:{emails}:stream"
    assert keys.dead == "trunner:{emails}:dead"
    assert keys.delayed == keys.retries == "trunner:{emails}:delayed"
    assert keys.delayed_messages == keys.retry_messages == "trunner:{emails}:delayed:messages"
    assert keys.unique("6:charge:1") == "trunner:{emails}:unique:6:charge:1"
    assert keys.task("7-0") == "trunner:{emails}:task:7-0"
    assert keys.leader == "trunner:{emails}:leader"
    assert keys.cancel_channel == "trunner:{emails}:cancel"
    assert keys.groups == "trunner:{emails}:groups"


def test_a_group_of_another_queue_keeps_its_own_keys_in_the_queues_slot() -> None:
    keys = Keys("trunner", "audit", "events")
    assert not keys.own_queue
    assert keys.stream == "trunner:{events}:stream"
    assert keys.delayed == "trunner:{events}:delayed"
    assert keys.unique("k") == "trunner:{events}:unique:k"
    assert keys.cancelled == "trunner:{events}:cancelled"
    assert keys.dead == "trunner:{events}:group:audit:dead"
    assert keys.retries == "trunner:{events}:group:audit:delayed"
    assert keys.task("1-0") == "trunner:{events}:group:audit:task:1-0"
    assert keys.leader == "trunner:{events}:group:audit:leader"
    assert keys.paused == "trunner:{events}:group:audit:paused"
    # cancel_task.lua names another group's record and channel so (Keys._key)
    assert keys.task("1-0") == f"{keys.queue_base}group:audit:task:1-0"
    assert keys.done == f"{keys.queue_base}group:audit:done"
    assert Keys("trunner", "events").task("1-0") == f"{keys.queue_base}task:1-0"
    every = [*keys.fixed(), keys.fence, keys.done, keys.delayed_wake, keys.task("x")]
    assert {hash_tag(key) for key in every} == {"events"}, "one Cluster slot for all"
    other = keys.for_group("email")
    assert set(keys.group_keys()).isdisjoint(other.group_keys())
    assert keys.queue_keys() == other.queue_keys()
    with pytest.raises(ValueError, match="queue"):
        Keys("trunner", "audit", "ev{ents}")
    with pytest.raises(ValueError, match="queue"):
        trunner.RunnerConfig(consumer_group="audit", queue="")


async def test_a_runner_opens_a_group_written_by_the_earlier_layout(
    url: str, group: str, raw: Any
) -> None:
    """A stream and group created as trunner always created them (no registry of groups):
    the runner runs what waits there, and acknowledging still deletes (one group)."""
    keys = Keys("trunner", group)
    raw.xgroup_create(keys.stream, group, "0", mkstream=True)
    raw.xadd(keys.stream, {"payload": b'{"task":"record","payload":1}'})
    raw.xadd(keys.stream, {"payload": b'{"task":"record","payload":2}'})
    ran: list[tuple[str, Any]] = []
    async with open_checked_runner(url, config(group), recording(ran, group)) as runner:
        await redis_state(lambda: _count(ran, 2))
        await runner.dispatch("record", 3)
        await redis_state(lambda: _count(ran, 3))
        await redis_state(lambda: _acked(runner, 3))
    assert sorted(p for _, p in ran) == [1, 2, 3]
    assert raw.xlen(keys.stream) == 0, "one group: acknowledged entries are deleted"
    assert raw.smembers(keys.groups) == {group.encode()}


async def _count(ran: list[Any], n: int) -> bool:
    await trio.lowlevel.checkpoint()
    return len(ran) >= n


async def _acked(runner: trunner.Runner, n: int) -> bool:
    await trio.lowlevel.checkpoint()
    return runner.statistics().acked >= n


async def test_every_group_of_a_queue_gets_every_message_once(
    url: str, group: str, raw: Any
) -> None:
    queue = _queue(group)
    ran: list[tuple[str, Any]] = []
    async with (
        open_checked_runner(url, config("audit", queue=queue), recording(ran, "audit")),
        open_checked_runner(url, config("email", queue=queue), recording(ran, "email")),
        open_checked_runner(url, config("billing", queue=queue), recording(ran, "billing")),
        trunner.open_client(url, queue) as client,
    ):
        await client.dispatch_many("record", list(range(100)))
        await redis_state(lambda: _count(ran, 300))
        keys = Keys("trunner", "audit", queue)
        assert raw.smembers(keys.groups) == {b"audit", b"email", b"billing"}
        # Several groups: an acknowledgement deletes nothing (the janitor trims).
        assert raw.xlen(keys.stream) > 0
    per_group = Counter(g for g, _ in ran)
    assert per_group == {"audit": 100, "email": 100, "billing": 100}
    for name in QUEUE_GROUPS:
        assert sorted(p for g, p in ran if g == name) == list(range(100))


async def test_a_groups_retry_goes_to_that_group_alone(url: str, group: str, raw: Any) -> None:
    queue = _queue(group)
    ran: list[tuple[str, Any]] = []
    async with (
        open_checked_runner(
            url, config("audit", queue=queue), recording(ran, "audit", fail_once={7})
        ) as audit,
        open_checked_runner(url, config("email", queue=queue), recording(ran, "email")) as email,
        trunner.open_client(url, queue) as client,
    ):
        await client.dispatch("record", 7)
        await redis_state(lambda: _has(ran, ("audit", 7)))
        await redis_state(lambda: _has(ran, ("email", 7)))
        # email's runner skips audit's retry (acknowledged for email, not run).
        await redis_state(lambda: _skipped(email, 1))
        assert audit.statistics().skipped == 0
    assert sorted(ran, key=repr) == sorted(
        [("audit", ("failed", 7)), ("audit", 7), ("email", 7)], key=repr
    )
    assert email.statistics().succeeded == 1
    assert audit.statistics().retried == 1


async def _has(ran: list[Any], item: Any) -> bool:
    await trio.lowlevel.checkpoint()
    return item in ran


async def _skipped(runner: trunner.Runner, n: int) -> bool:
    await trio.lowlevel.checkpoint()
    return runner.statistics().skipped >= n


async def test_nothing_a_group_has_not_read_is_trimmed(
    url: str, group: str, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """audit finishes everything and its leader trims; email, paused, has read nothing:
    every message stays until email has run it; then the trim takes them."""
    monkeypatch.setattr("trunner._leader.janitor.SHARED_TRIM_INTERVAL", 0.05)
    queue = _queue(group)
    keys = Keys("trunner", "audit", queue)
    ran: list[tuple[str, Any]] = []
    async with trunner.open_client(url, queue, group="email") as email_client:
        async with (
            open_checked_runner(url, config("email", queue=queue), recording(ran, "email")),
        ):
            pass  # the group exists (registered); it is stopped now
        assert await email_client.admin.pause() is True
        async with (
            open_checked_runner(
                url, config("audit", queue=queue), recording(ran, "audit")
            ) as audit,
            trunner.open_client(url, queue) as client,
        ):
            await client.dispatch_many("record", list(range(300)))
            await redis_state(lambda: _count(ran, 300))
            janitor = parts(audit).janitor
            passes = janitor.shared_passes
            await redis_state(lambda: _passes(janitor, passes + 3))
            assert raw.xlen(keys.stream) == 300, "email read none of them: none trimmed"
            # Each group's queue length is its own backlog, not the shared stream's length.
            assert await audit.admin.queue_length() == 0
            assert await email_client.admin.queue_length() == 300
            assert {g for g, _ in ran} == {"audit"}
            async with open_checked_runner(
                url, config("email", queue=queue), recording(ran, "email")
            ) as email:
                assert await email_client.admin.resume() is True
                await redis_state(lambda: _count(ran, 600))
                await redis_state(lambda: _acked(email, 300))
                # Both groups finished them all: the leaders trim them (a stream keeps
                # its last node: Redis trims whole nodes of up to 100 entries).
                await redis_state(lambda: _shorter(raw, keys.stream, 101))
    assert sorted(p for g, p in ran if g == "email") == list(range(300))


async def _passes(janitor: Any, n: int) -> bool:
    await trio.lowlevel.checkpoint()
    return bool(janitor.shared_passes >= n)


async def _shorter(raw: Any, stream: str, n: int) -> bool:
    await trio.lowlevel.checkpoint()
    return bool(raw.xlen(stream) < n)


async def test_pausing_one_group_of_a_queue_leaves_the_others_running(url: str, group: str) -> None:
    queue = _queue(group)
    ran: list[tuple[str, Any]] = []
    async with (
        open_checked_runner(url, config("audit", queue=queue), recording(ran, "audit")) as audit,
        open_checked_runner(url, config("email", queue=queue), recording(ran, "email")) as email,
        trunner.open_client(url, queue, group="audit") as audit_client,
        trunner.open_client(url, queue) as client,
    ):
        assert (await audit_client.admin.inspect()).queue == queue
        assert await audit_client.admin.pause() is True
        await audit.wait_paused()
        await client.dispatch("record", "x")
        await redis_state(lambda: _has(ran, ("email", "x")))
        assert email.statistics().paused is False
        assert ("audit", "x") not in ran
        assert await audit_client.admin.resume() is True
        await redis_state(lambda: _has(ran, ("audit", "x")))


async def test_a_queued_task_cancelled_on_a_shared_queue_runs_nowhere(
    url: str, group: str, raw: Any
) -> None:
    queue = _queue(group)
    ran: list[tuple[str, Any]] = []
    keys = Keys("trunner", "audit", queue)
    async with trunner.open_client(url, queue) as client:
        for name in ("audit", "email"):  # both groups exist, stopped
            async with open_checked_runner(url, config(name, queue=queue), recording(ran, name)):
                pass
        handle = await client.dispatch("record", "doomed")
        kept = await client.dispatch("record", "kept")
        assert await handle.cancel() is trunner.CancelOutcome.REMOVED
        assert raw.xlen(keys.stream) == 1
        async with (
            open_checked_runner(url, config("audit", queue=queue), recording(ran, "audit")),
            open_checked_runner(url, config("email", queue=queue), recording(ran, "email")),
        ):
            await redis_state(lambda: _count(ran, 2))
    assert sorted(ran) == [("audit", "kept"), ("email", "kept")]
    assert kept.id != handle.id


async def test_a_task_cancelled_on_a_shared_queue_is_cancelled_for_every_group(
    url: str, group: str
) -> None:
    """A task cancelled through one group's client before the other groups read it (a
    queued entry, deleted from the shared stream; a delayed dispatch, every group's) was
    'never dispatched' to them: each such group reads it cancelled, and a group that ran
    it already keeps its own outcome."""
    queue = _queue(group)
    ran: list[tuple[str, Any]] = []
    for name in ("audit", "billing"):  # both groups exist, stopped
        async with open_checked_runner(url, config(name, queue=queue), recording(ran, name)):
            pass
    async with (
        trunner.open_client(url, queue, group="audit") as audit,
        trunner.open_client(url, queue, group="email") as email,
        trunner.open_client(url, queue, group="billing") as billing,
    ):
        async with open_checked_runner(url, config("email", queue=queue), recording(ran, "email")):
            queued = await audit.dispatch("record", "x", keep_result=60)
            assert await email.handle(queued.id).result(timeout=10) is None
        delayed = await audit.dispatch_delayed("record", "y", 3600, keep_result=60)
        assert await queued.cancel() is trunner.CancelOutcome.REMOVED
        assert await delayed.cancel() is trunner.CancelOutcome.REMOVED
        for client in (audit, billing):
            for handle in (queued, delayed):
                mine = client.handle(handle.id)
                assert (await mine.status()).state is TaskState.CANCELLED
                with pytest.raises(trunner.TaskCancelled):
                    await mine.result(timeout=0)
        assert (await email.handle(queued.id).status()).state is TaskState.SUCCEEDED
        assert (await email.handle(delayed.id).status()).state is TaskState.CANCELLED
    assert ran == [("email", "x")]


@pytest.mark.parametrize("where", ["delayed", "queued"])
async def test_cancelling_one_groups_own_message_leaves_the_others_outcomes(
    url: str, group: str, raw: Any, where: str
) -> None:
    """A message of one group for itself (a retry, say: the others skip it) cancelled on a
    shared queue is that group's alone: the other groups' outcomes of the task stay. (The
    retries of the group of the queue's own name wait in the queue's delayed set.)"""
    queue = _queue(group)
    ran: list[tuple[str, Any]] = []
    keys = Keys("trunner", queue)
    async with open_checked_runner(url, config(queue, queue=queue), recording(ran, queue)):
        pass
    async with (
        trunner.open_client(url, queue) as own,
        trunner.open_client(url, queue, group="email") as email,
    ):
        async with open_checked_runner(url, config("email", queue=queue), recording(ran, "email")):
            task = await email.dispatch("record", "x", keep_result=60)
            assert await task.result(timeout=10) is None
        retry = encode_message(
            "record", "x", attempt=2, enqueued_at=1.0, task_id=task.id, group=queue,
            max_bytes=1 << 20,
        )  # fmt: skip
        if where == "delayed":
            raw.zadd(keys.delayed, {task.id: 10**13})
            raw.hset(keys.delayed_messages, task.id, retry)
        else:  # moved into the stream, not read by any group yet
            raw.hset(keys.where, task.id, raw.xadd(keys.stream, {"payload": retry}))
        assert await own.handle(task.id).cancel() is trunner.CancelOutcome.REMOVED
        assert (await own.handle(task.id).status()).state is TaskState.CANCELLED
        assert (await email.handle(task.id).status()).state is TaskState.SUCCEEDED


async def test_results_are_each_groups_own(url: str, group: str) -> None:
    queue = _queue(group)
    tasks_a, tasks_b = trunner.TaskRegistry(), trunner.TaskRegistry()

    @tasks_a.task(name="shout", keep_result=60)
    async def shout_a(payload: str) -> str:
        return payload.upper()

    @tasks_b.task(name="shout", keep_result=60)
    async def shout_b(payload: str) -> str:
        return payload * 2

    async with (
        open_checked_runner(url, config("audit", queue=queue), tasks_a),
        open_checked_runner(url, config("email", queue=queue), tasks_b),
        trunner.open_client(url, queue, group="audit") as audit,
        trunner.open_client(url, queue, group="email") as email,
    ):
        handle = await audit.dispatch("shout", "hi")
        assert await handle.result(timeout=10) == "HI"
        assert await email.handle(handle.id).result(timeout=10) == "hihi"


async def test_a_group_destroyed_by_hand_is_forgotten_and_acks_delete_again(
    url: str, group: str, raw: Any
) -> None:
    queue = _queue(group)
    keys = Keys("trunner", "audit", queue)
    ran: list[tuple[str, Any]] = []
    async with open_checked_runner(url, config("email", queue=queue), recording(ran, "email")):
        pass
    raw.xgroup_destroy(keys.stream, "email")
    async with (
        open_checked_runner(
            url, config("audit", queue=queue, janitor_interval=0.2), recording(ran, "audit")
        ) as audit,
        trunner.open_client(url, queue) as client,
    ):
        assert raw.smembers(keys.groups) == {b"audit", b"email"}
        janitor = parts(audit).janitor
        await janitor.wait_rounds(janitor.rounds + 1)
        assert raw.smembers(keys.groups) == {b"audit"}
        await client.dispatch("record", 1)
        await redis_state(lambda: _acked(audit, 1))
        assert raw.xlen(keys.stream) == 0, "one group again: the ack deleted it"


async def test_a_cancelled_tasks_retry_is_dropped_when_it_is_fetched(
    url: str, group: str, raw: Any
) -> None:
    """A retry (a message for one group) held by an instance that died is cancelled: the
    runner that reclaims it drops it before it starts, as it drops a dispatch."""
    keys = Keys("trunner", group)
    ran: list[tuple[str, Any]] = []
    body = {"task": "record", "payload": "retried", "attempt": 2, "id": "1-0", "group": group}
    async with open_checked_runner(url, config(group), recording(ran, group)):
        pass  # the group exists
    entry = raw.xadd(keys.stream, {"payload": json.dumps(body)})
    raw.hset(keys.where, "1-0", entry)  # where the mover records a moved task
    raw.xreadgroup(group, "ghost", {keys.stream: ">"}, count=1)  # a dead instance's
    async with trunner.open_client(url, group) as client:
        outcome = await client.handle("1-0").cancel()
        assert outcome is trunner.CancelOutcome.CANCELLING
        cfg = config(group, reclaim_delay=0.2, reclaim_interval=0.1)
        async with open_checked_runner(url, cfg, recording(ran, group)) as runner:

            async def dropped() -> bool:
                await trio.lowlevel.checkpoint()
                return runner.statistics().cancelled == 1

            await redis_state(dropped)
    assert ran == []


async def test_a_group_of_a_shared_queue_lost_between_janitor_rounds_runs_nothing_again(
    url: str, group: str, raw: Any
) -> None:
    """On a queue that several groups read, acknowledging deletes nothing: a group lost
    and recreated from a floor recorded only by the janitor's rounds (60 s apart by
    default) ran again what it had finished since. The leader keeps the floor current."""
    queue = _queue(group)
    keys = Keys("trunner", "audit", queue)
    ran: list[tuple[str, Any]] = []
    async with open_checked_runner(url, config("email", queue=queue), recording(ran, "email")):
        pass  # a second group, which reads nothing: the queue is shared
    cfg = config("audit", queue=queue, janitor_interval=3600.0)
    async with (
        open_checked_runner(url, cfg, recording(ran, "audit")) as audit,
        trunner.open_client(url, queue) as client,
    ):
        ids = [str(await client.dispatch("record", i)) for i in range(3)]
        await redis_state(lambda: _acked(audit, 3))

        async def floor_past_the_last() -> bool:
            floor = raw.get(keys.floor)
            return floor is not None and _stream_id(floor) > _stream_id(ids[-1])

        await redis_state(floor_past_the_last)
        assert parts(audit).janitor.rounds == 0
        assert raw.xlen(keys.stream) == 3, "shared: nothing was deleted"
        raw.xgroup_destroy(keys.stream, "audit")
        await client.dispatch("record", "after")
        await redis_state(lambda: _acked(audit, 4))
    assert sorted(map(str, [p for g, p in ran if g == "audit"])) == ["0", "1", "2", "after"]


def _stream_id(entry_id: str | bytes) -> tuple[int, int]:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, _, seq = text.partition("-")
    return int(ms), int(seq)
