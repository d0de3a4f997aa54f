"""A Hypothesis state machine: random interleavings of dispatch, delivery, admission,
finish (ack, retry or dead letter) and crash + reclaim of a concurrency-limited task,
run against the real scripts (memory://) and checked against a model of the limit: never
more than N slots held, a slot held by every running message, none by anything else,
waiters granted in order, and no task lost or duplicated."""

from __future__ import annotations

import json
from collections.abc import Coroutine, Sequence
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from trunner._redis import Broker, Owner, Script, forget_memory_server
from trunner._redis import memory_server_client as server_client
from trunner._wire.envelope import encode_message
from trunner._wire.keys import Keys

LIMIT = 2
GROUP = "model"


class SyncTransport:
    """The part of a transport the Broker's scripts use, on a fakeredis client directly
    (its coroutines never suspend)."""

    description = "model"

    def __init__(self, client: Any) -> None:
        self.client = client

    async def evalsha(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return self.client.eval(script.source, len(keys), *keys, *args)

    async def execute(self, *args: Any) -> Any:
        return self.client.execute_command(*args)


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the transport suspended")


class LimitModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.name = f"model-{id(self)}"
        self.client = server_client(self.name)
        self.keys = Keys("trunner", GROUP)
        self.broker = Broker(SyncTransport(self.client), self.keys)  # type: ignore[arg-type]
        self.client.xgroup_create(self.keys.stream, GROUP, "0", mkstream=True)
        self.slot = (
            self.keys.concurrency_holders("1:t"),
            self.keys.concurrency_waiting("1:t"),
            LIMIT,
        )
        self.count = 0
        # The model: task id -> where it is.
        self.delivered: dict[str, str] = {}  # entry id -> task id, delivered, not admitted
        self.running: dict[str, str] = {}  # entry id -> task id, admitted (holds a slot)
        self.queued: set[str] = set()  # task ids in the stream, not delivered yet
        self.waiting: list[str] = []  # task ids, in order
        self.finished: list[str] = []
        self.holders_of_queued: set[str] = set()  # task ids granted, in the stream

    def teardown(self) -> None:
        self.client.close()
        forget_memory_server(self.name)

    def _task_of(self, entry_id: str) -> str:
        entry = self.client.xrange(self.keys.stream, entry_id, entry_id)
        return str(json.loads(entry[0][1][b"payload"])["id"])

    @rule()
    def dispatch(self) -> None:
        self.count += 1
        task_id = f"task-{self.count}"
        data = encode_message("t", self.count, enqueued_at=1.0, task_id=task_id, max_bytes=1 << 20)
        self.client.xadd(self.keys.stream, {"payload": data})
        self.queued.add(task_id)

    @precondition(lambda self: self.queued)
    @rule()
    def deliver(self) -> None:
        reply = self.client.xreadgroup(GROUP, "c1", {self.keys.stream: ">"}, count=1)
        ((_, ((entry_id, _),)),) = reply
        entry = entry_id.decode()
        task_id = self._task_of(entry)
        self.queued.discard(task_id)
        self.delivered[entry] = task_id

    @precondition(lambda self: self.delivered)
    @rule(data=st.data())
    def admit(self, data: st.DataObject) -> None:
        entry = data.draw(st.sampled_from(sorted(self.delivered)))
        task_id = self.delivered.pop(entry)
        holds = task_id in self.holders_of_queued
        room = len(self._model_holders()) < LIMIT and not self.waiting
        verdict, _ = run(
            self.broker.admit(entry, task_id, 1.0, self._message(task_id), None, self.slot)
        )
        if holds or room:
            assert verdict == "run", (verdict, task_id)
            self.holders_of_queued.discard(task_id)
            self.running[entry] = task_id
        else:
            assert verdict == "wait", (verdict, task_id)
            self.waiting.append(task_id)

    @precondition(lambda self: self.running)
    @rule(data=st.data(), how=st.sampled_from(["ack", "retry", "dead"]))
    def finish(self, data: st.DataObject, how: str) -> None:
        entry = data.draw(st.sampled_from(sorted(self.running)))
        task_id = self.running.pop(entry)
        owner = self._owner(entry)  # the live delivery's attempt ends it
        if how == "ack":
            acked = run(self.broker.ack([entry], slots={entry: self.slot}, owners={entry: owner}))
            assert acked == (1, [])
        elif how == "retry":
            slot = self.slot
            assert run(self.broker.retry(entry, task_id, 10**12, b"{}", None, slot, owner=owner))
        else:
            fields: list[tuple[str, Any]] = [("task_id", task_id)]
            dead = self.broker.dead_letter(
                entry, fields, 0, None, task_id, None, self.slot, owner=owner
            )
            assert run(dead)
        self.finished.append(task_id)
        self._granted()

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def crash_and_reclaim(self, data: st.DataObject) -> None:
        """The consumer running it died: another claims it and admits it again."""
        entry = data.draw(st.sampled_from(sorted(self.running)))
        self.client.xclaim(self.keys.stream, GROUP, "c2", 0, [entry])
        task_id = self.running[entry]
        verdict, _ = run(
            self.broker.admit(entry, task_id, 2.0, self._message(task_id), None, self.slot)
        )
        assert verdict == "run", "a reclaimed holder keeps its slot"

    def _owner(self, entry: str) -> Owner:
        """The delivery of ``entry`` now pending: its consumer and count."""
        (pending,) = self.client.xpending_range(self.keys.stream, GROUP, entry, entry, 1)
        return Owner(pending["consumer"].decode(), pending["times_delivered"])

    def _message(self, task_id: str) -> bytes:
        n = int(task_id.split("-")[1])
        return encode_message("t", n, enqueued_at=1.0, task_id=task_id, max_bytes=1 << 20)

    def _granted(self) -> None:
        """The model of a release: the oldest waiters take the free slots, in order."""
        while self.waiting and len(self._model_holders()) < LIMIT:
            task_id = self.waiting.pop(0)
            self.holders_of_queued.add(task_id)
            self.queued.add(task_id)

    def _holders(self) -> set[str]:
        return {h.decode() for h in self.client.zrange(self.slot[0], 0, -1)}

    def _model_holders(self) -> set[str]:
        return set(self.running.values()) | self.holders_of_queued

    @invariant()
    def slots_match_the_model(self) -> None:
        holders = self._holders()
        assert len(holders) <= LIMIT
        assert {self._task_of(h) for h in holders} == self._model_holders()
        waiting = [json.loads(m)["id"] for m in self.client.lrange(self.slot[1], 0, -1)]
        assert waiting == self.waiting

    @invariant()
    def no_task_lost_or_doubled(self) -> None:
        places = [
            *self.delivered.values(),
            *self.running.values(),
            *self.queued,
            *self.waiting,
            *self.finished,
        ]
        assert sorted(places) == sorted(f"task-{n}" for n in range(1, self.count + 1))


LimitModel.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestLimitModel = LimitModel.TestCase
