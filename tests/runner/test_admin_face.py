"""A runner holds a client and an admin, it is neither; ``open_admin`` opens an admin
alone; the methods a runner and a client had before keep working through them, and warn."""

from __future__ import annotations

from typing import Any

import pytest

import trunner
from trunner.keys import Keys

from ..conftest import config, open_checked_runner
from ..support.seeding import seed_dead


async def test_a_runner_binds_its_client_and_admin_when_started(url: str, group: str) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task(keep_result=60)
    async def double(n: int) -> int:
        return n * 2

    runner = trunner.Runner(url, config(group), tasks)
    assert trunner.Client not in type(runner).__mro__, "a runner holds a client"
    with pytest.raises(trunner.errors.RunnerNotRunning):
        runner.client  # noqa: B018 - the access raises
    with pytest.raises(trunner.errors.RunnerNotRunning):
        runner.admin  # noqa: B018 - the access raises
    with (
        pytest.raises(trunner.errors.RunnerNotRunning),
        pytest.warns(DeprecationWarning, match=r"runner\.admin\.pause\(\)"),
    ):
        await runner.pause()
    async with open_checked_runner(url, config(group), tasks) as started:
        assert isinstance(started.client, trunner.Client)
        assert isinstance(started.admin, trunner.admin.Admin)
        assert started.client.admin is started.admin
        assert started.client.redis is started.redis
        handle = await started.client.dispatch(double, 4)
        assert await handle.result(timeout=10) == 8
        assert await started.admin.pause() is True
        with pytest.warns(DeprecationWarning, match=r"runner\.admin\.resume\(\)"):
            assert await started.resume() is True, "the runner's own call is the admin's"
        assert (await started.admin.inspect()).group == group
    with pytest.raises(trunner.errors.RunnerNotRunning):
        await started.admin.inspect()
    with pytest.raises(trunner.errors.RunnerNotRunning):
        await started.client.dispatch(double, 1)


async def test_open_admin_inspects_and_administers_a_group(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    ids = seed_dead(raw, keys, 2, task="job")
    async with trunner.admin.open_admin(url, group) as admin:
        assert admin.consumer_group == group
        assert [d.id for d in await admin.dead_letters()] == ids
        assert await admin.dead_letter_count() == 2
        assert list((await admin.replay_dead_letters([ids[0]])).new_ids) == [ids[0]]
        assert await admin.queue_length() == 1
    with pytest.raises(trunner.errors.RunnerNotRunning, match="Admin is not open"):
        await admin.queue_length()


async def test_a_client_s_admin_is_its_admin_methods(url: str, group: str) -> None:
    async with trunner.open_client(url, group) as client:
        assert isinstance(client.admin, trunner.admin.Admin)
        await client.dispatch("anything", 1)
        with pytest.warns(DeprecationWarning, match=r"client\.admin\.queue_length\(\)"):
            assert await client.admin.queue_length() == await client.queue_length() == 1
    with pytest.raises(trunner.errors.RunnerNotRunning, match="Client is not open"):
        await client.admin.queue_length()


async def test_open_admin_checks_its_arguments_before_connecting(url: str) -> None:
    with pytest.raises(TypeError, match="needs the queue"):
        async with trunner.admin.open_admin(url):
            pass
    with pytest.raises(ValueError, match="instance_ttl"):
        async with trunner.admin.open_admin(url, "q", instance_ttl=0):
            pass
