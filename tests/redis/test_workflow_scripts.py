"""The workflow scripts on their own (workflows.lua, workflow_start.lua, and the step ends
of ack.lua, dead_letter.lua and retry.lua): chains, fan-in once, fail-fast, blocked
branches, fencing, bad data set aside, chunked starts (design/workflows.md §3). Both
tiers."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import pytest

from trunner._redis import Broker, StepEnd, WorkflowSweep
from trunner._wire.envelope import encode_message, message_template
from trunner._wire.keys import Keys
from trunner._wire.message import MessageOptions
from trunner._wire.workflow import Literal, Results, StepRef, workflow_mark

from .test_broker import C1, deliver, owned

W = "wtest"
KEEP_MS = 60_000
LIFE_MS = 3_600_000


def root(
    keys: Keys,
    node: int,
    payload: Any,
    nxt: str = "",
    keep: bool = True,
    keep_result: float | None = None,
) -> bytes:
    ref = StepRef(W, node, nxt, keep)
    return encode_message(
        "t", payload, enqueued_at=1.0, task_id=f"{W}.{node}",
        options=MessageOptions(keep_result=keep_result, workflow=ref), group=keys.group,
        max_bytes=1 << 20,
    )  # fmt: skip


def template(
    keys: Keys, node: int, parts: Sequence[Any], nxt: str = "", keep: bool = True
) -> bytes:
    ref = StepRef(W, node, nxt, keep)
    return message_template(
        "t", parts, task_id=f"{W}.{node}", options=MessageOptions(workflow=ref), group=keys.group
    )


async def start(
    broker: Broker,
    n: int,
    plan: Sequence[tuple[str, Any]],
    roots: Sequence[tuple[int, bytes]],
    **options: Any,
) -> str:
    return await broker.start_workflow(
        W, n, plan, roots, keep_ms=KEEP_MS, max_life_ms=LIFE_MS, **options
    )


def step_of(raw: Any, keys: Keys, entry_id: str) -> dict[str, Any]:
    ((_, fields),) = raw.xrange(keys.stream, entry_id, entry_id)
    message: dict[str, Any] = json.loads(fields[b"payload"])
    return message


async def ack_steps(
    broker: Broker, ends: dict[str, StepEnd], owner: Any = C1
) -> tuple[int, list[str]]:
    ids = list(ends)
    return await broker.ack(ids, steps=ends, owners=owned(ids, owner))


def state(raw: Any, keys: Keys) -> dict[str, str]:
    wf = keys._workflow(W).wf
    return {k.decode(): v.decode() for k, v in raw.hgetall(wf).items()}


async def test_a_chain_passes_each_result_on_and_settles(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    flow = keys._workflow(W)
    plan = [
        ("t:1", template(keys, 1, [Results(0, 0)], "2")),
        ("w:1", 1),
        ("t:2", template(keys, 2, [Literal(b"["), Results(1, 1), Literal(b"]")])),
        ("w:2", 1),
    ]
    assert await start(broker, 3, plan, [(0, root(keys, 0, "url", "1"))], out="2") == "ok"
    assert state(raw, keys)["live"] == "1"
    assert state(raw, keys)["adding"] == "0"
    (first,) = await deliver(broker, "c1", 1)
    assert step_of(raw, keys, first)["wf"] == [W, 0, "1", True]

    assert await ack_steps(broker, {first: StepEnd(W, 0, "ok", "1", b'"page"')}) == (1, [])
    (second,) = await deliver(broker, "c1", 1)
    message = step_of(raw, keys, second)
    assert message["payload"] == "page", "the result, byte for byte"
    assert message["id"] == f"{W}.1"
    assert message["wf"] == [W, 1, "2", True]
    assert message["enqueued_at"] > 1_000_000_000, "the time it was added"
    assert raw.hget(keys.where, f"{W}.1") == second.encode(), "status and cancel find it"
    assert raw.hlen(flow.res) == 0, "node 0's result went into its one reader's message"
    assert not raw.hexists(flow.plan, "t:1")

    await ack_steps(broker, {second: StepEnd(W, 1, "ok", "2", b'{"n":1}')})
    (third,) = await deliver(broker, "c1", 1)
    assert step_of(raw, keys, third)["payload"] == [{"n": 1}]
    await ack_steps(broker, {third: StepEnd(W, 2, "ok", "", b"42")})

    look = await broker.workflow_look(W)
    assert look.fields["state"] == "succeeded"
    assert look.fields["ok"] == "3"
    assert look.fields["live"] == "0"
    assert look.results == {2: b"42"}, "the output stays"
    assert not raw.exists(flow.plan)
    assert 0 < raw.pttl(flow.wf) <= KEEP_MS
    assert 0 < raw.pttl(flow.marks) <= KEEP_MS
    assert raw.zscore(keys.workflows, W) is None


async def test_a_chord_fans_in_once_whatever_the_order_and_the_redeliveries(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    children = 5
    plan = [
        ("t:5", template(keys, 5, [Literal(b"["), Results(0, 4, b","), Literal(b"]")])),
        ("w:5", children),
    ]
    roots = [(i, root(keys, i, i, "5")) for i in range(children)]
    assert await start(broker, children + 1, plan, roots) == "ok"
    ids = await deliver(broker, "c1", children)
    by_node = {step_of(raw, keys, i)["wf"][1]: i for i in ids}
    # Node 3 is claimed by another consumer (a reclaim): c1's late end is fenced out.
    await broker.transport.execute("XCLAIM", keys.stream, keys.group, "c2", 0, by_node[3])
    assert await ack_steps(broker, {by_node[3]: StepEnd(W, 3, "ok", "5", b"30")}) == (
        0,
        [by_node[3]],
    )
    assert state(raw, keys)["ok"] == "0", "a fenced attempt writes nothing"
    for node in (4, 0, 2):
        await ack_steps(broker, {by_node[node]: StepEnd(W, node, "ok", "5", b"%d" % (node * 10))})
    assert await deliver(broker, "c1", 1) == [], "one input still missing"
    c2 = type(C1)("c2", 2)
    await ack_steps(broker, {by_node[3]: StepEnd(W, 3, "ok", "5", b"31")}, owner=c2)
    assert await deliver(broker, "c1", 1) == [], "still node 1"
    await ack_steps(broker, {by_node[1]: StepEnd(W, 1, "ok", "5", b"10")})
    (callback,) = await deliver(broker, "c1", 1)
    assert step_of(raw, keys, callback)["payload"] == [0, 10, 20, 31, 40], "in node order"
    # A duplicate end of a child (a replay, a second delivery) changes nothing.
    await broker.enqueue(root(keys, 2, 2, "5"))
    (again,) = await deliver(broker, "c1", 1)
    await ack_steps(broker, {again: StepEnd(W, 2, "ok", "5", b"99")})
    assert await deliver(broker, "c1", 1) == [], "the callback started once"
    assert state(raw, keys)["ok"] == str(children)
    await ack_steps(broker, {callback: StepEnd(W, 5, "ok", "", b'"merged"')})
    look = await broker.workflow_look(W)
    assert look.fields["state"] == "succeeded"
    assert look.results == {5: b'"merged"'}, "the children's results were released"


async def test_fail_fast_marks_the_workflow_and_no_later_step_starts(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    flow = keys._workflow(W)
    plan = [
        ("t:3", template(keys, 3, [Literal(b"["), Results(0, 2, b","), Literal(b"]")])),
        ("w:3", 3),
    ]
    roots = [(i, root(keys, i, i, "3")) for i in range(3)]
    assert await start(broker, 4, plan, roots) == "ok"
    a, b, c = await deliver(broker, "c1", 3)
    failure = json.dumps({"type": "Boom", "message": "no"})
    fields: list[tuple[str, str | bytes]] = [("reason", "failed")]
    step = StepEnd(W, 1, "failed", "3", error=failure)
    assert await broker.dead_letter(b, fields, 10, None, f"{W}.1", step=step, owner=C1)
    s = state(raw, keys)
    assert s["state"] == "failing"
    assert s["failures"] == "1"
    mark = workflow_mark(keys.group, W)
    assert raw.hget(keys.cancelled, mark) is not None, "one cancel mark for every step"
    assert json.loads(raw.hget(flow.err, "1")) == {"type": "Boom", "message": "no"}
    # A sibling that finishes anyway, and one cancelled by the workflow (absorbed).
    await ack_steps(broker, {a: StepEnd(W, 0, "ok", "3", b"0")})
    assert await deliver(broker, "c1", 1) == []
    await ack_steps(broker, {c: StepEnd(W, 2, "cancelled", "3")})
    look = await broker.workflow_look(W)
    assert look.fields["state"] == "failed", "a failure is never lost"
    assert (look.fields["ok"], look.fields["failures"], look.fields["cancelled"]) == ("1", "1", "1")
    assert raw.hget(keys.cancelled, workflow_mark(keys.group, W)) is None, "its steps are all over"
    assert look.failures == {1: failure}


async def test_without_fail_fast_a_failure_blocks_only_its_descendants(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    # 0 -> 2, 1 -> 3: node 0 fails, node 1's branch runs to its end.
    plan = [
        ("t:2", template(keys, 2, [Results(0, 0)])),
        ("w:2", 1),
        ("t:3", template(keys, 3, [Results(1, 1)])),
        ("w:3", 1),
    ]
    roots = [(0, root(keys, 0, 0, "2")), (1, root(keys, 1, 1, "3"))]
    assert await start(broker, 4, plan, roots, fail_fast=False) == "ok"
    zero, one = await deliver(broker, "c1", 2)
    fields: list[tuple[str, str | bytes]] = [("reason", "failed")]
    step = StepEnd(W, 0, "failed", "2", error="{}")
    assert await broker.dead_letter(zero, fields, 10, None, f"{W}.0", step=step, owner=C1)
    assert state(raw, keys)["state"] == "running"
    assert raw.hget(keys.cancelled, workflow_mark(keys.group, W)) is None
    await ack_steps(broker, {one: StepEnd(W, 1, "ok", "3", b"1")})
    (three,) = await deliver(broker, "c1", 1)
    assert step_of(raw, keys, three)["wf"][1] == 3
    await ack_steps(broker, {three: StepEnd(W, 3, "ok", "", b"3")})
    look = await broker.workflow_look(W)
    assert look.fields["state"] == "failed"
    assert (look.fields["ok"], look.fields["failures"]) == ("2", "1"), "node 2 never started"


async def test_a_retry_of_a_step_of_a_failing_workflow_ends_it_cancelled(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    roots = [(i, root(keys, i, i)) for i in range(2)]
    assert await start(broker, 2, [], roots) == "ok"
    zero, one = await deliver(broker, "c1", 2)
    fields: list[tuple[str, str | bytes]] = [("reason", "failed")]
    step = StepEnd(W, 0, "failed", error="{}")
    assert await broker.dead_letter(zero, fields, 10, None, f"{W}.0", step=step, owner=C1)
    record = (keys.task(f"{W}.1"), 60_000, [("state", "retrying"), ("error", "E: no")])
    retried = await broker.retry(
        one, f"{W}.1", 5000, b"next", record, step=StepEnd(W, 1, "failed"), owner=C1
    )
    assert retried == "cancelled", "not scheduled again"
    stored = raw.hgetall(keys.task(f"{W}.1"))
    assert (stored[b"state"], stored[b"error"]) == (b"cancelled", b"E: no")
    assert raw.zcard(keys.retries) == 0
    assert await broker.pending_count() == 0
    look = await broker.workflow_look(W)
    assert (look.fields["state"], look.fields["cancelled"]) == ("failed", "1")


async def test_a_retry_of_a_step_of_a_running_workflow_is_scheduled(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    assert await start(broker, 1, [], [(0, root(keys, 0, 0))]) == "ok"
    (zero,) = await deliver(broker, "c1", 1)
    step = StepEnd(W, 0, "failed")
    assert await broker.retry(zero, f"{W}.0", 5000, b"next", step=step, owner=C1) is True
    assert raw.zcard(keys.retries) == 1
    assert state(raw, keys)["live"] == "1", "still live: retries are inside the step"


async def test_a_message_over_the_limit_fails_its_node_when_it_would_start(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    broker.max_message_bytes = 300
    plan = [("t:1", template(keys, 1, [Results(0, 0)])), ("w:1", 1)]
    assert await start(broker, 2, plan, [(0, root(keys, 0, 0, "1"))]) == "ok"
    (zero,) = await deliver(broker, "c1", 1)
    await ack_steps(broker, {zero: StepEnd(W, 0, "ok", "1", b'"' + b"x" * 400 + b'"')})
    assert await deliver(broker, "c1", 1) == [], "never written to a stream"
    look = await broker.workflow_look(W)
    assert look.fields["state"] == "failed"
    assert json.loads(look.failures[1])["type"] == "PayloadTooLarge"
    assert look.results == {}, "the result it would have read is released"


async def test_a_bad_template_fails_its_node_and_a_bad_workflow_is_set_aside(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    flow = keys._workflow(W)
    plan = [("t:1", b"L99:short"), ("w:1", 1)]
    assert await start(broker, 2, plan, [(0, root(keys, 0, 0, "1"))]) == "ok"
    (zero,) = await deliver(broker, "c1", 1)
    await ack_steps(broker, {zero: StepEnd(W, 0, "ok", "1", b"0")})
    look = await broker.workflow_look(W)
    assert look.fields["state"] == "failed"
    assert json.loads(look.failures[1])["type"] == "BadData"
    # A workflow whose counts trunner did not write: the acknowledgement stands, the step
    # end is set aside with its reason.
    raw.delete(flow.wf, flow.marks)
    assert await start(broker, 1, [], [(0, root(keys, 0, 0))]) == "ok"
    (again,) = await deliver(broker, "c1", 1)
    raw.hset(flow.wf, "live", "inf")
    assert await ack_steps(broker, {again: StepEnd(W, 0, "ok")}) == (1, [])
    assert await broker.pending_count() == 0
    (aside,) = raw.xrange(keys.quarantine)
    assert aside[1][b"item"] == flow.wf.encode()
    assert b"live" in aside[1][b"reason"]


async def test_a_big_group_starts_in_chunks_and_its_callback_gets_every_result(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    children = 1500
    plan = [
        (
            f"t:{children}",
            template(
                keys, children, [Literal(b"["), Results(0, children - 1, b","), Literal(b"]")]
            ),
        ),
        (f"w:{children}", children),
    ]
    roots = [(i, root(keys, i, i, str(children))) for i in range(children)]
    assert await start(broker, children + 1, plan, roots) == "ok"
    assert state(raw, keys)["live"] == str(children)
    ids = await deliver(broker, "c1", children)
    nodes = [step_of(raw, keys, i)["wf"][1] for i in ids]
    ends = {
        i: StepEnd(W, node, "ok", str(children), b"%d" % node)
        for i, node in zip(ids, nodes, strict=True)
    }
    assert await ack_steps(broker, ends) == (children, [])
    (callback,) = await deliver(broker, "c1", 1)
    message = raw.xrange(keys.stream, callback, callback)[0][1][b"payload"]
    assert json.loads(message)["payload"] == list(range(children))
    assert raw.hlen(keys._workflow(W).res) == 0


async def test_a_workflow_id_is_taken_once(broker: Broker, raw: Any, keys: Keys) -> None:
    assert await start(broker, 1, [], [(0, root(keys, 0, 0))]) == "ok"
    assert await start(broker, 1, [], [(0, root(keys, 0, 0))]) == "exists"
    assert len(raw.xrange(keys.stream)) == 1, "nothing written the second time"


@pytest.mark.parametrize("how", ["a root fails", "cancelled"])
async def test_a_workflow_stopped_between_its_start_chunks_settles(
    broker: Broker, raw: Any, keys: Keys, how: str
) -> None:
    """A root that fails for good (fail-fast), or a cancel, after the first chunk of roots
    and before the next: the next chunks add nothing, and the workflow settles once what
    was added has ended (its 'adding' flag, set until the last chunk, holds nothing back)."""
    children = 1500  # two chunks of roots
    roots = [(i, root(keys, i, i)) for i in range(children)]
    script = broker._script
    chunks = 0

    async def between_chunks(name: str, keys_: Any, args: Any) -> Any:
        nonlocal chunks
        reply = await script(name, keys_, args)
        if name == "workflow_start":
            chunks += 1
            if chunks == 1 and how == "cancelled":
                assert await broker.cancel_workflow(W) == "cancelling"
            elif chunks == 1:
                (first,) = await deliver(broker, "c1", 1)
                node = step_of(raw, keys, first)["wf"][1]
                step = StepEnd(W, node, "failed", error="{}")
                fields: list[tuple[str, str | bytes]] = [("reason", "failed")]
                assert await broker.dead_letter(
                    first, fields, 10, None, f"{W}.{node}", step=step, owner=C1
                )
        return reply

    broker._script = between_chunks  # type: ignore[method-assign,assignment]
    assert await start(broker, children, [], roots) != "ok", "the second chunk added nothing"
    broker._script = script  # type: ignore[method-assign]
    added = await deliver(broker, "c1", children)
    assert len(added) < children
    ends = {i: StepEnd(W, step_of(raw, keys, i)["wf"][1], "cancelled") for i in added}
    await ack_steps(broker, ends)
    look = await broker.workflow_look(W)
    assert look.fields["state"] == ("cancelled" if how == "cancelled" else "failed")
    assert look.fields["live"] == "0"
    assert raw.zscore(keys.workflows, W) is None, "out of the index of live workflows"


async def test_a_successor_named_twice_is_set_aside_not_counted_twice(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    """A step end whose successors name a node twice (no message trunner writes: a
    tampered one) would count one input twice and start a join before its other input."""
    flow = keys._workflow(W)
    plan = [
        ("t:2", template(keys, 2, [Literal(b"["), Results(0, 1, b","), Literal(b"]")])),
        ("w:2", 2),
    ]
    roots = [(i, root(keys, i, i, "2")) for i in range(2)]
    assert await start(broker, 3, plan, roots) == "ok"
    zero, _ = await deliver(broker, "c1", 2)
    await ack_steps(broker, {zero: StepEnd(W, 0, "ok", "2,2", b"0")})
    assert raw.hget(flow.plan, "w:2") == b"2", "not counted"
    assert await deliver(broker, "c1", 1) == [], "the join did not start"
    (aside,) = raw.xrange(keys.quarantine)
    assert b"successors" in aside[1][b"reason"]


async def test_a_cancel_sweeps_the_steps_no_runner_holds_each_ended_once(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    """Steps queued, in a retry's backoff and waiting for a concurrency slot are taken out
    by the cancel's sweep (cancel_steps.lua, in pages) and end 'cancelled' once each; the
    running one is left to the mark, and the workflow settles when it ends."""
    flow = keys._workflow(W)
    roots = [(i, root(keys, i, i, keep_result=60.0 if i == 3 else None)) for i in range(5)]
    assert await start(broker, 5, [], roots) == "ok"
    running, waiting, retrying = await deliver(broker, "c1", 3)
    assert [step_of(raw, keys, i)["wf"][1] for i in (running, waiting, retrying)] == [0, 1, 2]
    slot = (keys.concurrency_holders("1:t"), keys.concurrency_waiting("1:t"), 1)
    assert await broker.admit(running, f"{W}.0", 1.0, roots[0][1], None, slot) == ("run", 0)
    assert await broker.admit(waiting, f"{W}.1", 1.0, roots[1][1], None, slot) == ("wait", 1)
    step = StepEnd(W, 2, "failed")
    assert await broker.retry(retrying, f"{W}.2", 60_000, roots[2][1], step=step, owner=C1)
    # Nodes 3 and 4 are queued: never delivered.

    assert await broker.cancel_workflow(W) == "cancelling"
    swept = await broker.sweep_workflow(W, page=2)
    assert (swept.state, swept.removed, swept.left) == ("cancelling", 4, 1)
    s = state(raw, keys)
    assert (s["live"], s["cancelled"], s["failures"], s["ok"]) == ("1", "4", "0", "0")
    assert raw.zcard(keys.retries) == 0
    assert raw.llen(slot[1]) == 0
    assert raw.hlen(keys.concurrency_waiters) == 0
    assert [json.loads(f[b"payload"])["wf"][1] for _, f in raw.xrange(keys.stream)] == [0]
    assert raw.hget(keys.task(f"{W}.3"), "state") == b"cancelled", "it keeps its outcome"
    record = raw.hgetall(keys.task(f"{W}.3"))
    assert (record[b"task"], record[b"attempt"], record[b"enqueued_at"], record[b"keep"]) == (
        b"t",
        b"1",
        b"1.000000",
        b"60",
    )
    assert 0 < raw.pttl(keys.task(f"{W}.3")) <= 60_000
    assert not raw.exists(keys.task(f"{W}.4")), "it keeps none: the workflow's keys tell"
    again = await broker.sweep_workflow(W)
    assert (again.removed, again.left) == (0, 1), "idempotent: each ends once"
    assert state(raw, keys)["cancelled"] == "4"

    await broker.ack(
        [running], slots={running: slot}, steps={running: StepEnd(W, 0, "cancelled")},
        owners=owned([running]),
    )  # fmt: skip
    assert await deliver(broker, "c1", 1) == [], "the freed slot grants nothing: no waiter"
    look = await broker.workflow_look(W)
    assert (look.fields["state"], look.fields["cancelled"], look.fields["live"]) == (
        "cancelled",
        "5",
        "0",
    )
    assert raw.bitcount(flow.marks) == 10, "every node started and ended, once"
    assert raw.zscore(keys.workflows, W) is None


async def test_a_cancelled_workflow_with_nothing_running_settles_with_its_sweep(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    plan = [("t:2", template(keys, 2, [Results(0, 1, b",")])), ("w:2", 2)]
    roots = [(i, root(keys, i, i, "2")) for i in range(2)]
    assert await start(broker, 3, plan, roots) == "ok"
    assert await broker.sweep_workflow(W) == WorkflowSweep("running", 0, 0), "not cancelled"
    assert await broker.cancel_workflow(W) == "cancelling"
    swept = await broker.sweep_workflow(W)
    assert swept == WorkflowSweep("cancelled", 2, 0)
    assert raw.xlen(keys.stream) == 0
    look = await broker.workflow_look(W)
    assert (look.fields["cancelled"], look.fields["live"]) == ("2", "0")
    assert await broker.sweep_workflow(W) == WorkflowSweep("cancelled", 0, 0)
    raw.delete(keys._workflow(W).wf)
    assert await broker.sweep_workflow(W) == WorkflowSweep("gone", 0, 0)


async def test_a_big_workflows_sweep_goes_in_pages_over_its_bitmap(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    """1500 steps, every third ended before the cancel: the sweep takes the other 1000 out
    in pages of at most 200, each call bounded, and the workflow settles with the last."""
    children = 1500
    roots = [(i, root(keys, i, i)) for i in range(children)]
    assert await start(broker, children, [], roots) == "ok"
    ids = await deliver(broker, "c1", children)
    ended = {i: StepEnd(W, n, "ok") for n, i in enumerate(ids) if n % 3 == 0}
    assert await ack_steps(broker, ended) == (500, [])
    for n, i in enumerate(ids):
        if n % 3:
            await broker.transport.execute("XACK", keys.stream, keys.group, i)
            await broker.transport.execute("XDEL", keys.stream, i)
            again = await broker.enqueue(root(keys, n, n))  # queued again, as a grant is
            raw.hset(keys.where, f"{W}.{n}", again)
    script, pages = broker._script, []

    async def counted(name: str, keys_: Any, args: Any) -> Any:
        reply = await script(name, keys_, args)
        pages.append((name, reply[2] if name == "cancel_steps" else None))
        return reply

    assert await broker.cancel_workflow(W) == "cancelling"
    broker._script = counted  # type: ignore[method-assign,assignment]
    swept = await broker.sweep_workflow(W)
    assert swept == WorkflowSweep("cancelled", 1000, 0)
    assert [taken for _, taken in pages] == [200] * 5, "pages of 200, the last settles"
    look = await broker.workflow_look(W)
    assert (look.fields["ok"], look.fields["cancelled"], look.fields["live"]) == (
        "500",
        "1000",
        "0",
    )
    assert raw.bitcount(keys._workflow(W).marks) == 2 * children


async def test_the_janitors_look_at_the_index_and_its_cancel_of_an_abandoned_start(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    """tidy_workflows.lua names a workflow still adding its first steps since before the
    cutoff, and takes out of the index those gone, settled or not trunner's; the janitor's
    cancel (cancel_workflow.lua with a cutoff) checks it again in the same call."""
    flow = keys._workflow(W)
    script = broker._script

    async def first_chunk_only(name: str, keys_: Any, args: Any) -> Any:
        reply = await script(name, keys_, args)
        if name == "workflow_start":
            raise ConnectionError("the producer stopped")
        return reply

    broker._script = first_chunk_only  # type: ignore[method-assign,assignment]
    with pytest.raises(ConnectionError):
        await start(broker, 1001, [], [(i, root(keys, i, i)) for i in range(1001)])
    broker._script = script  # type: ignore[method-assign]
    created = int(raw.hget(flow.wf, "created")) - 600_000  # dispatched 10 minutes ago
    raw.hset(flow.wf, "created", created)
    for name in ("bad", "gone"):
        raw.zadd(keys.workflows, {name: created})
    raw.hset(keys._workflow("bad").wf, mapping={**state(raw, keys), "live": "inf"})
    hour, minutes = 3_600_000, 300_000  # ages, by Redis's clock (which wrote 'created')
    assert await broker.tidy_workflows([W, "bad", "gone"], hour) == [
        "live",
        "live: a string that is not an integer in decimal digits",
        "gone",
    ]
    assert raw.zrange(keys.workflows, 0, -1) == [W.encode()]
    assert await broker.cancel_workflow(W, abandoned_for_ms=hour) == "running"
    assert state(raw, keys)["state"] == "running", "not adding for an hour yet: left alone"
    assert await broker.tidy_workflows([W], minutes) == ["abandoned"]
    assert await broker.cancel_workflow(W, abandoned_for_ms=minutes) == "cancelling"
    assert await broker.sweep_workflow(W) == WorkflowSweep("cancelled", 1000, 0)
    assert await broker.tidy_workflows([W], minutes) == ["gone"], "settled: out of the index"


TOKEN = "a" * 32


def unique_template(keys: Keys, node: int, parts: Sequence[Any], key: str) -> bytes:
    """A step's template carrying its lock as a unique dispatch's message does."""
    ref = StepRef(W, node, "", True)
    return message_template(
        "t", parts, task_id=f"{W}.{node}", options=MessageOptions(workflow=ref),
        group=keys.group, unique=(key, TOKEN, 60.0),
    )  # fmt: skip


def unique_root(keys: Keys, node: int, key: str) -> bytes:
    return encode_message(
        "t", node, enqueued_at=1.0, task_id=f"{W}.{node}", unique_key=key,
        unique_token=TOKEN, unique_for=60.0,
        options=MessageOptions(workflow=StepRef(W, node, "", True)), group=keys.group,
        max_bytes=1 << 20,
    )  # fmt: skip


def lock_field(keys: Keys, node: int, key: str) -> tuple[str, str]:
    return f"u:{node}", f"60000 {TOKEN} {keys.unique(key)}"


def unique_chain(keys: Keys) -> list[tuple[str, Any]]:
    """Node 1, unique of key ``k``, after root 0."""
    return [
        ("t:1", unique_template(keys, 1, [Results(0, 0)], "k")),
        ("w:1", 1),
        lock_field(keys, 1, "k"),
    ]


async def test_a_unique_step_takes_its_lock_as_it_starts_and_its_ack_releases_it(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    lock = keys.unique("k")
    assert await start(broker, 2, unique_chain(keys), [(0, root(keys, 0, 0, "1"))]) == "ok"
    assert not raw.exists(lock), "not before the step starts"
    (zero,) = await deliver(broker, "c1", 1)
    await ack_steps(broker, {zero: StepEnd(W, 0, "ok", "1", b"7")})
    assert raw.get(lock) == TOKEN.encode()
    assert 0 < raw.pttl(lock) <= 60_000
    assert not raw.hexists(keys._workflow(W).plan, "u:1"), "taken once"
    (one,) = await deliver(broker, "c1", 1)
    message = step_of(raw, keys, one)
    assert (message["unique_key"], message["unique_token"]) == ("k", TOKEN)
    assert message["payload"] == 7
    locks = {one: (lock, TOKEN)}
    ends = {one: StepEnd(W, 1, "ok", "", b"1")}
    assert await broker.ack([one], steps=ends, owners=owned([one]), locks=locks) == (1, [])
    assert not raw.exists(lock), "released as any unique task's"
    assert (await broker.workflow_look(W)).fields["state"] == "succeeded"


async def test_a_unique_step_whose_lock_is_held_fails_without_starting(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    lock = keys.unique("k")
    raw.set(lock, "another", px=60_000)
    assert await start(broker, 2, unique_chain(keys), [(0, root(keys, 0, 0, "1"))]) == "ok"
    (zero,) = await deliver(broker, "c1", 1)
    added = raw.xinfo_stream(keys.stream)["last-generated-id"]
    await ack_steps(broker, {zero: StepEnd(W, 0, "ok", "1", b"7")})
    assert raw.xinfo_stream(keys.stream)["last-generated-id"] == added, "nothing added"
    assert await deliver(broker, "c1", 1) == []
    assert raw.get(lock) == b"another", "the holder's lock is left as it is"
    assert raw.hget(keys.where, f"{W}.1") is None
    look = await broker.workflow_look(W)
    counts = [look.fields[name] for name in ("state", "ok", "failures", "cancelled", "live")]
    assert counts == ["failed", "1", "1", "0", "0"]
    failure = json.loads(look.failures[1])
    assert (failure["type"], failure["task"]) == ("TaskAlreadyDispatched", "t")
    assert lock in failure["message"]
    assert look.results == {}, "the result it would have read is released"


async def test_a_unique_root_takes_its_lock_or_fails_the_workflow_at_its_start(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    roots = [(0, unique_root(keys, 0, "r")), (1, root(keys, 1, 1))]
    assert await start(broker, 2, [lock_field(keys, 0, "r")], roots) == "ok"
    assert raw.get(keys.unique("r")) == TOKEN.encode()
    assert len(await deliver(broker, "c1", 2)) == 2
    # Held: with fail-fast the root fails, the roots after it are not added.
    raw.delete(keys._workflow(W).wf, keys._workflow(W).marks)
    raw.set(keys.unique("s"), "another", px=60_000)
    roots = [(0, unique_root(keys, 0, "s")), (1, root(keys, 1, 1))]
    assert await start(broker, 2, [lock_field(keys, 0, "s")], roots) == "ok"
    assert await deliver(broker, "c1", 2) == []
    look = await broker.workflow_look(W)
    assert [look.fields[name] for name in ("state", "failures", "live")] == ["failed", "1", "0"]
    assert json.loads(look.failures[0])["type"] == "TaskAlreadyDispatched"


async def test_a_lock_key_of_bad_data_is_set_aside_and_a_bad_lock_field_fails_the_node(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    lock = keys.unique("k")
    raw.hset(lock, "not", "a lock")
    assert await start(broker, 2, unique_chain(keys), [(0, root(keys, 0, 0, "1"))]) == "ok"
    (zero,) = await deliver(broker, "c1", 1)
    await ack_steps(broker, {zero: StepEnd(W, 0, "ok", "1", b"7")})
    assert raw.get(lock) == TOKEN.encode(), "nobody's lock: set aside, the lock taken"
    ((_, aside),) = raw.xrange(keys.quarantine)
    assert (aside[b"source"], aside[b"item"]) == (b"unique", lock.encode())
    assert len(await deliver(broker, "c1", 1)) == 1
    # A lock field naming a key of another slot (or none) fails the node, not the script.
    raw.delete(keys._workflow(W).wf, keys._workflow(W).marks)
    plan = [*unique_chain(keys)[:2], ("u:1", f"60000 {TOKEN} elsewhere:k")]
    assert await start(broker, 2, plan, [(0, root(keys, 0, 0, "1"))]) == "ok"
    (zero,) = await deliver(broker, "c1", 1)
    assert await ack_steps(broker, {zero: StepEnd(W, 0, "ok", "1", b"7")}) == (1, [])
    assert not raw.exists("elsewhere:k")
    look = await broker.workflow_look(W)
    assert json.loads(look.failures[1])["type"] == "BadData"


async def test_a_unique_step_not_retried_as_its_workflow_fails_releases_its_lock(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    lock = keys.unique("r")
    roots = [(0, unique_root(keys, 0, "r")), (1, root(keys, 1, 1))]
    assert await start(broker, 2, [lock_field(keys, 0, "r")], roots) == "ok"
    zero, one = await deliver(broker, "c1", 2)
    fields: list[tuple[str, str | bytes]] = [("reason", "failed")]
    step = StepEnd(W, 1, "failed", error="{}")
    assert await broker.dead_letter(one, fields, 10, None, f"{W}.1", step=step, owner=C1)
    assert raw.get(lock) == TOKEN.encode()
    retried = await broker.retry(
        zero, f"{W}.0", 5000, b"next", step=StepEnd(W, 0, "failed"), owner=C1,
        lock=(lock, TOKEN),
    )  # fmt: skip
    assert retried == "cancelled"
    assert not raw.exists(lock), "its end released it, as an acknowledgement does"
    assert (await broker.workflow_look(W)).fields["state"] == "failed"


async def test_a_unique_step_the_cancel_takes_out_releases_its_lock(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    """A unique step in its retry's backoff and a queued unique root hold their locks; the
    cancel's sweep takes them out and releases each lock it holds (only its own: its
    token)."""
    roots = [(0, unique_root(keys, 0, "q")), (1, unique_root(keys, 1, "r"))]
    fields = [lock_field(keys, 0, "q"), lock_field(keys, 1, "r")]
    assert await start(broker, 2, fields, roots) == "ok"
    assert raw.get(keys.unique("q")) == raw.get(keys.unique("r")) == TOKEN.encode()
    (retrying,) = await deliver(broker, "c1", 1)
    assert step_of(raw, keys, retrying)["wf"][1] == 0
    step = StepEnd(W, 0, "failed")
    assert await broker.retry(retrying, f"{W}.0", 60_000, roots[0][1], step=step, owner=C1)
    raw.set(keys.unique("r"), "another holder's", px=60_000)  # no longer the queued root's
    assert await broker.cancel_workflow(W) == "cancelling"
    swept = await broker.sweep_workflow(W)
    assert (swept.state, swept.removed) == ("cancelled", 2)
    assert raw.get(keys.unique("q")) is None, "the retrying step's lock is released"
    assert raw.get(keys.unique("r")) == b"another holder's", "only its own lock"


async def test_a_step_cancelled_on_its_own_then_swept_leaves_no_mark(
    broker: Broker, raw: Any, keys: Keys
) -> None:
    """A queued step cancelled on its own gets a mark (it is not removed: its end is
    recorded when fetched); the workflow's cancel then takes it out, and its mark goes with
    it, told to the runners, so that a workflow of that id dispatched later is not hit."""
    roots = [(i, root(keys, i, i)) for i in range(2)]
    assert await start(broker, 2, [], roots) == "ok"
    until = int(time.time() * 1000) + 60_000
    assert await broker.cancel_task(f"{W}.1", until, None, None) == "running"
    assert raw.hexists(keys.cancelled, f"{W}.1")
    assert await broker.cancel_workflow(W) == "cancelling"
    swept = await broker.sweep_workflow(W)
    assert (swept.state, swept.removed) == ("cancelled", 2)
    assert not raw.hexists(keys.cancelled, f"{W}.1"), "its own mark went with it"
