"""Renamed public names: the old ones keep working for one release, and warn."""

from __future__ import annotations

import importlib
import sys

import pytest

import trunner
from trunner import election, serve

from ..conftest import config


def test_stats_is_group_stats() -> None:
    with pytest.warns(
        DeprecationWarning, match=r"trunner\.Stats is deprecated, use trunner\.GroupStats"
    ):
        old = trunner.Stats
    assert old is trunner.GroupStats
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        trunner.NoSuchName  # type: ignore[attr-defined]  # noqa: B018


async def test_stats_calls_group_stats(memory_url: str, group: str) -> None:
    tasks = trunner.TaskRegistry()
    async with (
        trunner.open_runner(memory_url, config(group), tasks) as runner,
        trunner.open_client(memory_url, group) as client,
    ):
        for producer in (runner, client):
            with pytest.warns(
                DeprecationWarning, match=r"stats\(\) is deprecated, use group_stats"
            ):
                old = await producer.stats()
            new = await producer.group_stats()
            assert isinstance(old, trunner.GroupStats)
            assert (old.instances, old.total_capacity) == (new.instances, new.total_capacity)


def test_election_error_is_election_failed() -> None:
    with pytest.warns(DeprecationWarning, match=r"ElectionError is deprecated, use ElectionFailed"):
        old = election.ElectionError
    assert old is election.ElectionFailed
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        election.NoSuchName  # type: ignore[attr-defined]  # noqa: B018


def test_the_worker_module_is_serve() -> None:
    sys.modules.pop("trunner.worker", None)
    try:
        with pytest.warns(DeprecationWarning, match=r"trunner\.worker is deprecated"):
            old = importlib.import_module("trunner.worker")
    finally:
        sys.modules.pop("trunner.worker", None)
    assert old.WorkerSettings is serve.WorkerSettings is trunner.WorkerSettings
    assert old.load_settings is serve.load_settings
    assert old.run_worker is serve.run_worker
    assert old.__all__ == ["WorkerSettings", "load_settings", "run_worker"]


async def test_elector_done_is_stopped(memory_url: str) -> None:
    async with election.open_elector(memory_url, "lease") as elector:
        with pytest.warns(DeprecationWarning, match=r"Elector\.done is deprecated"):
            done = elector.done
        assert done is elector.stopped
    assert elector.stopped.is_set()
