"""The leader's janitor: consumers of gone instances, and trimming finished messages."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
import trio

import trunner
from trunner import step
from trunner import workflows as wf
from trunner._leader.janitor import instance_of
from trunner._redis import SCRIPTS, Broker
from trunner._wire.keys import Keys
from trunner.errors import WorkflowCancelled

from ..conftest import Tally, config, open_checked_runner, parts, redis_state

FAST = {
    "report_interval": 0.1,
    "instance_ttl": 0.3,
    "block_duration": 0.1,
    "janitor_interval": 0.2,
}


def _names(raw: Any, keys: Keys) -> set[str]:
    rows = raw.xinfo_consumers(keys.stream, keys.group)
    return {(r.get("name") or r[b"name"]).decode() for r in rows}


def _trim(raw: Any, keys: Keys, before_ms: int, leader: str = "me") -> list[Any]:
    result: list[Any] = raw.eval(
        SCRIPTS.trim.source, 3, keys.leader, keys.stream, keys.groups, leader, before_ms, 10_000
    )
    return result


def _ids(raw: Any, keys: Keys) -> list[bytes]:
    return [entry_id for entry_id, _ in raw.xrange(keys.stream)]


def test_instance_of_strips_the_fetcher_suffix() -> None:
    assert instance_of("host:1:ab") == "host:1:ab"
    assert instance_of("host:1:ab/3") == "host:1:ab"
    assert instance_of("a/b") == "a/b"


async def test_the_leader_deletes_consumers_of_gone_instances(
    url: str, raw: Any, group: str, keys: Keys
) -> None:
    raw.xgroup_create(keys.stream, group, "0", mkstream=True)
    raw.xadd(keys.stream, {"x": "held by a gone instance"})
    raw.xreadgroup(group, "held:1:aa", {keys.stream: ">"}, count=1)  # pending: keep it
    for gone in ("gone:1:bb", "gone:1:bb/1"):
        raw.execute_command("XGROUP", "CREATECONSUMER", keys.stream, group, gone)
    cfg = config(group, **FAST, num_fetchers=2)
    async with (
        open_checked_runner(url, cfg, trunner.TaskRegistry()) as a,
        open_checked_runner(url, cfg, trunner.TaskRegistry()) as b,
    ):
        assert a.is_leader
        live = {*a.consumers, *b.consumers}
        for name in live:  # as if each had read: live consumers, whatever their idle time
            raw.execute_command("XGROUP", "CREATECONSUMER", keys.stream, group, name)

        async def cleaned() -> bool:
            names = _names(raw, keys)
            return "gone:1:bb" not in names and "gone:1:bb/1" not in names

        await redis_state(cleaned, poll=0.05)
        janitor = parts(a).janitor
        await janitor.wait_rounds(janitor.rounds + 6)  # past the idle bound: live ones stay
        names = _names(raw, keys)
        assert "held:1:aa" in names, "a consumer with pending entries stays"
        assert live <= names, "consumers of live instances stay"
        assert janitor.consumers_deleted == 2
        assert parts(b).janitor.rounds == 0, "followers do no chores"


async def test_no_janitor_when_disabled(url: str, raw: Any, group: str, keys: Keys) -> None:
    raw.xgroup_create(keys.stream, group, "0", mkstream=True)
    raw.execute_command("XGROUP", "CREATECONSUMER", keys.stream, group, "gone:1:cc")
    cfg = config(group, **{**FAST, "janitor_interval": None})
    async with open_checked_runner(url, cfg, trunner.TaskRegistry()) as runner:
        await trio.sleep(1.0)  # several would-be rounds
        assert parts(runner).janitor.rounds == 0
    assert "gone:1:cc" in _names(raw, keys)


# -- trimming -----------------------------------------------------------------------------


async def test_trim_never_passes_an_undelivered_or_pending_message(
    url: str, raw: Any, group: str, keys: Keys
) -> None:
    raw.set(keys.leader, "me")
    ids = [raw.xadd(keys.stream, {"n": i}) for i in range(500)]
    raw.xgroup_create(keys.stream, group, "0")
    finished = raw.xreadgroup(group, "c", {keys.stream: ">"}, count=100)[0][1]
    raw.xack(keys.stream, group, *[entry_id for entry_id, _ in finished])
    raw.xreadgroup(group, "c", {keys.stream: ">"}, count=50)  # 100..149 pending
    future = 2**52  # a cutoff after every message: only the group's state holds them

    trimmed, below = _trim(raw, keys, future)
    assert below == ids[100], "the oldest pending message bounds the trim"
    assert trimmed <= 100
    left = _ids(raw, keys)
    assert left[-400:] == ids[100:], "pending and undelivered messages stay"

    raw.xack(keys.stream, group, *ids[100:150])
    trimmed, below = _trim(raw, keys, future)
    ms, seq = ids[149].decode().split("-")
    assert below.decode() == f"{ms}-{int(seq) + 1}", "bounded by the last delivered"
    assert _ids(raw, keys)[-350:] == ids[150:], "undelivered messages stay"

    raw.xgroup_create(keys.stream, "other", "0")  # another group that has read nothing
    before = _ids(raw, keys)
    trimmed, below = _trim(raw, keys, future)
    assert (trimmed, below) == (0, b"0-1")
    assert _ids(raw, keys) == before

    raw.xgroup_destroy(keys.stream, "other")
    oldest_ms = int(ids[150].decode().split("-")[0])
    trimmed, _ = _trim(raw, keys, oldest_ms)  # a cutoff before the remaining messages
    assert trimmed == 0
    assert _ids(raw, keys) == before


async def test_trim_is_fenced(url: str, raw: Any, group: str, keys: Keys) -> None:
    raw.set(keys.leader, "someone-else")
    raw.xadd(keys.stream, {"n": 1})
    raw.xgroup_create(keys.stream, group, "$")
    with pytest.raises(redis.ResponseError, match="FENCED"):
        _trim(raw, keys, 2**52)
    assert raw.xlen(keys.stream) == 1


async def test_trim_of_a_missing_stream_does_nothing(url: str, raw: Any, keys: Keys) -> None:
    raw.set(keys.leader, "me")
    assert _trim(raw, keys, 2**52) == [0, b"0-0"]


@pytest.mark.deadline(30)
async def test_the_janitor_trims_finished_messages_after_the_retention(
    url: str, raw: Any, group: str, keys: Keys, tally: Tally
) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task()
    async def record(payload: int) -> None:
        tally.record(payload)

    cfg = config(group, **FAST, delete_on_ack=False, stream_retention=0.5)
    async with open_checked_runner(url, cfg, tasks) as runner:
        await runner.dispatch_many("record", range(300))
        await tally.wait(300)

        async def trimmed() -> bool:
            return int(raw.xlen(keys.stream)) <= 100

        await redis_state(trimmed, poll=0.05)
        janitor = parts(runner).janitor
        # Redis is trimmed before the janitor's round counts it: let that round end.
        await janitor.wait_rounds(janitor.rounds + 1)
        assert janitor.entries_trimmed >= 200
        await runner.dispatch("record", 300)  # the stream still works after trimming
        await tally.wait(301)
    assert sorted(tally.payloads) == list(range(301))


async def test_the_janitor_forgets_cancel_marks_and_where_entries_past_their_use(
    url: str, raw: Any, group: str, keys: Keys
) -> None:
    raw.xgroup_create(keys.stream, group, "0", mkstream=True)
    live_entry = raw.xadd(keys.stream, {"x": "a moved task, still in the stream"}).decode()
    raw.xreadgroup(group, "held:1:aa", {keys.stream: ">"}, count=1)  # stays pending there
    raw.hset(
        keys.cancelled,
        mapping={"past": "1", "live": str(2**52), "junk": "soon", "also-past": "1000"},
    )
    raw.hset(
        keys.where,
        mapping={"moved-live": live_entry, "moved-gone": "1-1", "moved-junk": "nowhere"},
    )
    cfg = config(group, **FAST)
    async with open_checked_runner(url, cfg, trunner.TaskRegistry()) as runner:
        janitor = parts(runner).janitor
        await janitor.wait_rounds(janitor.rounds + 2)
        assert set(raw.hkeys(keys.cancelled)) == {b"live"}
        assert raw.hgetall(keys.where) == {b"moved-live": live_entry.encode()}
        assert janitor.forgotten == 5
        set_aside = {(r.source, r.item) for r in await runner.admin.quarantined()}
        assert set_aside == {("cancelled", "junk"), ("where", "moved-junk")}


# -- workflows ----------------------------------------------------------------------------


class ProducerDied(Exception):
    """The producer stopped between two chunks of a workflow's start."""


async def test_the_janitor_cancels_abandoned_dispatches_and_tidies_the_workflow_index(
    url: str, raw: Any, group: str, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workflow whose producer stopped between its start chunks (still 'adding') is
    cancelled once it is older than ABANDONED_DISPATCH, its queued steps taken out; a
    younger one is left to its producer; index entries of workflows that are gone leave the
    index, and bad ones are set aside with their reason."""
    tasks = trunner.TaskRegistry()

    @tasks.task()
    async def noop(number: int) -> int:
        return number

    def workflow() -> Any:
        return wf.group(step(noop, n) for n in range(1001))  # two chunks of first steps

    script = Broker._script

    async def dies_after_a_chunk(self: Broker, name: str, keys_: Any, args: Any) -> Any:
        reply = await script(self, name, keys_, args)
        if name == "workflow_start":
            raise ProducerDied
        return reply

    async with trunner.open_client(url, group, tasks=tasks) as client:
        assert await client.admin.pause(), "nothing runs: the first steps stay queued"
        monkeypatch.setattr(Broker, "_script", dies_after_a_chunk)
        for workflow_id in ("old", "young"):
            with pytest.raises(ProducerDied):
                await client.dispatch(workflow(), workflow_id=workflow_id)
        monkeypatch.undo()
        old = await client.dispatch(workflow(), workflow_id="old")  # a handle: it exists
        past = int(time.time() * 1000) - 600_000  # dispatched 10 minutes ago
        raw.hset(keys._workflow("old").wf, "created", past)
        bad = {"has space": past, "expired": past, "junk": past, b"\xff": past}
        raw.zadd(keys.workflows, {"old": past, **bad})
        raw.set(keys._workflow("junk").wf, "not a workflow hash")

        async with open_checked_runner(url, config(group, **FAST), tasks) as runner:
            with pytest.raises(WorkflowCancelled):
                await old.result()
            janitor = parts(runner).janitor
            await janitor.wait_rounds(janitor.rounds + 2)
            assert raw.zrange(keys.workflows, 0, -1) == [b"young"]
            assert (await client.dispatch(workflow(), workflow_id="young")).id == "young"
            young = raw.hgetall(keys._workflow("young").wf)
            assert (young[b"state"], young[b"adding"]) == (b"running", b"1"), "too young"
            assert (janitor.workflows.abandoned, janitor.workflows.forgotten) == (1, 1)
            aside = {(r.source, r.item) for r in await runner.admin.quarantined()}
        status = await old.status()
        assert (status.cancelled, status.live, status.succeeded) == (1000, 0, 0)
        assert raw.xlen(keys.stream) == 1000, "only the young workflow's first steps"
    assert aside == {
        ("workflows", "has space"),
        ("workflows", "\\xff"),
        ("workflow", keys._workflow("junk").wf),
    }
