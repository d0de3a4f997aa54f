"""Pausing a group on Redis Cluster and Sentinel (the bridged transport): the mark and the
scripts live in the group's hash slot, and the notice crosses to every runner's
subscription, whichever node it is connected to."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import trio

import trunner

from ..conftest import config, redis_state
from ..support.topologies import Cluster, SentinelSet

pytestmark = [pytest.mark.slow, pytest.mark.redis]


async def pause_run(url: str, group: str) -> None:
    """Two runners and a client: both runners stop fetching on pause, nothing dispatched
    meanwhile runs, both fetch again on resume."""
    ran: list[Any] = []
    tasks = trunner.TaskRegistry()

    @tasks.task
    async def record(payload: Any) -> None:
        ran.append(payload)

    async with (
        trunner.open_runner(url, config(group), tasks) as a,
        trunner.open_runner(url, config(group), tasks) as b,
        trunner.open_client(url, group) as client,
    ):
        assert await client.admin.pause() is True
        await a.wait_paused()
        await b.wait_paused()
        await client.dispatch_many("record", range(10))
        assert (await client.admin.inspect()).paused
        assert await client.admin.queue_length() == 10
        assert ran == []
        assert await client.admin.resume() is True
        await a.wait_resumed()
        await b.wait_resumed()

        async def all_ran() -> bool:
            await trio.lowlevel.checkpoint()
            return sorted(ran) == list(range(10))

        await redis_state(all_ran)


async def test_pause_on_a_cluster(cluster: Cluster) -> None:
    await pause_run(cluster.url, f"p-{uuid.uuid4().hex[:6]}")


@pytest.mark.deadline(60)
async def test_pause_on_sentinel(group: str) -> None:
    with SentinelSet() as sentinels:
        await pause_run(sentinels.url, group)
