"""Renamed public names: the old ones keep working for one release, and warn."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from typing import Any

import pytest

import trunner
from trunner import election, serve

from ..conftest import config

#: The names that left trunner's top level for a namespace, each with its new home (the top
#: keeps what daily code types).
MOVED = {
    **dict.fromkeys(
        [
            "BadData",
            "CommandNotAllowed",
            "Crashed",
            "ElectorCrashed",
            "InvalidArgument",
            "InvalidHeaders",
            "InvalidMessage",
            "InvalidResult",
            "LeadershipLost",
            "MiddlewareError",
            "RedisCommandError",
            "RemoteFailure",
            "ReservationLost",
            "ResultExpired",
            "ResultNotKept",
            "RunnerAlreadyStarted",
            "RunnerCrashed",
            "RunnerNotRunning",
            "SelfWait",
        ],
        "trunner.errors",
    ),
    **dict.fromkeys(
        [
            "CronEntry",
            "DeadLetter",
            "DelayedTask",
            "FoundGroup",
            "GroupInfo",
            "GroupStats",
            "GroupsFound",
            "InstanceInfo",
            "QuarantineRecord",
            "ReplayResult",
            "TaskTiming",
            "discover_groups",
        ],
        "trunner.admin",
    ),
    **dict.fromkeys(["AttemptInfo", "AttemptOutcome", "DispatchInfo"], "trunner.middleware"),
    "Keys": "trunner.keys",
    "forget_memory_server": "trunner.testing",
}


@pytest.mark.parametrize(("name", "home"), sorted(MOVED.items()))
def test_a_moved_name_resolves_with_a_warning_naming_its_home(name: str, home: str) -> None:
    message = f"trunner.{name} is deprecated, use {home}.{name}"
    with pytest.warns(DeprecationWarning, match=re.escape(message)) as caught:
        old = getattr(trunner, name)
    assert [str(w.message) for w in caught] == [message]
    assert caught[0].filename == __file__, "the warning points at the user's line"
    assert old is getattr(importlib.import_module(home), name)
    assert name not in trunner.__all__
    assert name in importlib.import_module(home).__all__


def test_the_moved_names_are_all_tested() -> None:
    deprecated = set(vars(trunner)["__deprecated_attributes__"])
    assert deprecated == {*MOVED, "Stats"}


def test_a_moved_name_imports_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match=r"use trunner\.errors\.RunnerNotRunning"):
        from trunner import RunnerNotRunning  # noqa: PLC0415 - the import is the test
    assert RunnerNotRunning is trunner.errors.RunnerNotRunning


def test_stats_is_group_stats() -> None:
    with pytest.warns(
        DeprecationWarning, match=r"trunner\.Stats is deprecated, use trunner\.admin\.GroupStats"
    ):
        old = trunner.Stats
    assert old is trunner.admin.GroupStats
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        trunner.NoSuchName  # type: ignore[attr-defined]  # noqa: B018


async def test_stats_calls_group_stats(memory_url: str, group: str) -> None:
    tasks = trunner.TaskRegistry()
    async with (
        trunner.open_runner(memory_url, config(group), tasks) as runner,
        trunner.open_client(memory_url, group) as client,
    ):
        for producer, word in ((runner, "runner"), (client, "client")):
            with pytest.warns(
                DeprecationWarning,
                match=rf"{word}\.stats\(\) is deprecated, use {word}\.admin\.group_stats\(\)",
            ):
                old = await producer.stats()
            new = await producer.admin.group_stats()
            assert isinstance(old, trunner.admin.GroupStats)
            assert (old.instances, old.total_capacity) == (new.instances, new.total_capacity)


#: The arguments of a call of each admin method (none: its defaults).
ADMIN_CALL_ARGS: dict[str, tuple[Any, ...]] = {"delete_dead_letters": ([],)}
#: The admin methods whose answer changes from one call to the next.
CHANGING = {"pause", "resume", "inspect", "instances", "group_stats", "waiting_age"}
ADMIN_METHODS = sorted(
    name
    for name, value in vars(trunner.admin.Admin).items()
    if not name.startswith("_") and inspect.iscoroutinefunction(value)
)


def test_every_admin_method_is_kept_on_runners_and_clients() -> None:
    assert len(ADMIN_METHODS) == 21
    for cls in (trunner.Runner, trunner.Client):
        for name in ADMIN_METHODS:
            old = inspect.signature(getattr(cls, name))
            assert old == inspect.signature(getattr(trunner.admin.Admin, name)), (cls, name)


@pytest.mark.parametrize("name", ADMIN_METHODS)
async def test_an_admin_method_of_a_runner_or_a_client_warns_and_is_the_admin_s(
    memory_url: str, group: str, name: str
) -> None:
    args = ADMIN_CALL_ARGS.get(name, ())
    async with (
        trunner.open_runner(memory_url, config(group), trunner.TaskRegistry()) as runner,
        trunner.open_client(memory_url, group) as client,
    ):
        for called, producer in (("runner", runner), ("client", client)):
            warning = rf"^{called}\.{name}\(\) is deprecated, use {called}\.admin\.{name}\(\)$"
            with pytest.warns(DeprecationWarning, match=warning) as caught:
                old = await getattr(producer, name)(*args)
            assert [w.filename for w in caught] == [__file__], "the caller's line"
            new = await getattr(producer.admin, name)(*args)
            assert type(old) is type(new)
            if name not in CHANGING:
                assert old == new


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
