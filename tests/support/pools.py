"""A pool and its parts on their own, without a runner: for tests of one part at a time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

import trunner
from trunner._engine.acks import AckBuffer
from trunner._engine.counters import Counters
from trunner._engine.heartbeat import Heartbeater
from trunner._engine.holdings import Holdings, Job
from trunner._engine.outcomes import Outcomes
from trunner._engine.pool import WorkerPool
from trunner._engine.release import Releaser
from trunner._redis import Broker, RawEntry, Transport, open_transport
from trunner._util import ErrorLog
from trunner._wire.decode import decode_fields
from trunner._wire.envelope import encode_message
from trunner._wire.keys import Keys

from ..conftest import config

__all__ = ["PoolParts", "bare_pool", "entry", "job_of", "pool_parts", "pool_running_one"]


@attrs.frozen
class PoolParts:
    """The components a runner wires around its pool."""

    broker: Broker
    holdings: Holdings
    counters: Counters
    errors: ErrorLog
    acks: AckBuffer
    outcomes: Outcomes
    pool: WorkerPool
    releaser: Releaser
    heartbeater: Heartbeater


def pool_parts(broker: Broker, tasks: trunner.TaskRegistry, cfg: trunner.RunnerConfig) -> PoolParts:
    """Every part, wired as a runner wires them (retries wake nobody)."""
    holdings, counters, errors = Holdings(), Counters(), ErrorLog()
    acks = AckBuffer(broker, cfg, holdings, counters, errors)
    outcomes = Outcomes(broker, cfg, holdings, acks, counters, errors, lambda _due: None)
    pool = WorkerPool(tasks, cfg, holdings, outcomes, counters)
    releaser = Releaser(broker, holdings, counters)
    heartbeater = Heartbeater(broker, holdings, pool.min_beat_interval, counters, errors)
    return PoolParts(
        broker, holdings, counters, errors, acks, outcomes, pool, releaser, heartbeater
    )


@asynccontextmanager
async def bare_pool(
    url: str, group: str, tasks: trunner.TaskRegistry, **overrides: Any
) -> AsyncIterator[PoolParts]:
    """A pool on its own (no fetcher; heartbeats and acks not running), over a fresh group."""
    async with open_transport(url, client_name="t", max_connections=2, connect_timeout=5) as t:
        broker = Broker(t, Keys("trunner", group))
        await broker.ensure_group()
        yield pool_parts(broker, tasks, config(group, **overrides))


@asynccontextmanager
async def pool_running_one(
    transport: Transport, group: str, tasks: trunner.TaskRegistry, cfg: trunner.RunnerConfig
) -> AsyncIterator[Counters]:
    """A pool with its ack buffer and heartbeater, running one message of the registry's
    only task (delivered to consumer "c"); the block ends once it is acknowledged."""
    broker = Broker(transport, Keys("trunner", group))
    await broker.ensure_group()
    [name] = tasks.names
    await broker.enqueue_many([encode_message(name, None, enqueued_at=0.0, max_bytes=1000)])
    reader = broker.open_reader()
    entries = await broker.read(reader, "c", 1, 0.1)
    await reader.aclose()
    parts = pool_parts(broker, tasks, cfg)
    pool = parts.pool
    async with trio.open_nursery() as nursery:
        pool.bind(nursery)
        await nursery.start(parts.acks.run)
        await nursery.start(parts.heartbeater.run)
        pool.submit(entries, pool.slots.take_nowait(1), "c")
        yield parts.counters
        while await broker.pending_count():  # noqa: ASYNC110 - acknowledged soon
            await trio.sleep(0.05)
        nursery.cancel_scope.cancel()


def entry(index: int, task_name: str) -> RawEntry:
    """A stream entry ``<index>-0`` as a read returns it, of one task with no payload."""
    data = encode_message(task_name, None, enqueued_at=0.0, max_bytes=1000)
    return RawEntry(f"{index}-0", [b"payload", data])


def job_of(message_id: str, data: bytes, consumer: str = "c") -> Job:
    """A job of an encoded message, as the pool makes it (no registered task)."""
    fields = decode_fields(message_id, [b"payload", data], 1, None)
    assert fields is not None
    return Job(consumer, 1.0, trio.current_time() + 1.0, message_id, 1, None, fields)
