from __future__ import annotations

import functools
import inspect
import math
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
import trio

import trunner
from trunner._lifecycle.assembly import Components
from trunner._redis import forget_memory_server, memory_server_client
from trunner.keys import Keys
from trunner.testing import open_runner_factory

from .support.servers import RedisServer
from .support.topologies import Cluster, TlsServer

#: The repository's root: the working directory of subprocesses that run ``-m tests...``.
REPO = Path(__file__).resolve().parent.parent

#: Default Trio-clock deadline of every async test (override: @pytest.mark.deadline(s)).
DEFAULT_DEADLINE = 30.0


#: Where a test called ``pytest.skip``, and why: pytest-trio re-raises a skip from inside
#: ``trio.run`` without its reason (the summary said ``python.py:187: Skipped``).
SKIPPED_BECAUSE = pytest.StashKey[tuple[str, int, str]]()


def _with_deadline(
    item: pytest.Item, func: Callable[..., Awaitable[Any]], seconds: float
) -> Callable[..., Any]:
    @functools.wraps(func)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with trio.fail_after(seconds):
                return await func(*args, **kwargs)
        except trio.Cancelled as stray:
            # pytest-trio reports a test that a Cancelled ended as passed. One that no
            # scope around the test asked for is a stray: fail the test on it.
            if trio.current_effective_deadline() != -math.inf:
                raise AssertionError(
                    "a trio.Cancelled that no scope around the test asked for ended it"
                ) from stray
            raise
        except pytest.skip.Exception as skip:
            item.stash[SKIPPED_BECAUSE] = (*_caller(skip), f"Skipped: {skip.msg}")
            raise

    return wrapper


def _caller(error: BaseException) -> tuple[str, int]:
    """The file and line, outside pytest, that raised ``error``."""
    where = ("?", 0)
    tb = error.__traceback__
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename
        if f"{os.sep}_pytest{os.sep}" not in path:
            where = (path, tb.tb_lineno)
        tb = tb.tb_next
    return where


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item,
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A skip inside an async test keeps its reason and place in the summary."""
    report = yield
    if report.skipped and SKIPPED_BECAUSE in item.stash:
        report.longrepr = item.stash[SKIPPED_BECAUSE]
    return report


#: Fixtures that are real Redis deployments the suite starts itself: a test using one,
#: directly or through another fixture, is marked ``redis``.
REAL_REDIS_FIXTURES = frozenset({"redis_server", "tls", "cluster"})
#: Parameters whose value puts a test on a real redis-server (the ``redis`` tier of ``url``,
#: the socket transports, the ``redis`` tier of a test's own): such a test is marked ``redis``.
REAL_REDIS_PARAMS: dict[str, frozenset[str]] = {
    "url": frozenset({"redis"}),
    "transport": frozenset({"native", "bridged"}),
    "tier": frozenset({"redis"}),
}


def _needs_real_redis(item: pytest.Item) -> bool:
    """Whether ``item`` needs a real redis-server through a fixture or a parameter (tests
    that start servers of their own carry ``@pytest.mark.redis`` themselves)."""
    if REAL_REDIS_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    params: dict[str, object] = callspec.params if callspec is not None else {}
    return any(params.get(name) in values for name, values in REAL_REDIS_PARAMS.items())


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _needs_real_redis(item):
            item.add_marker(pytest.mark.redis)
        if isinstance(item, pytest.Function) and inspect.iscoroutinefunction(item.obj):
            marker = item.get_closest_marker("deadline")
            seconds = float(marker.args[0]) if marker else DEFAULT_DEADLINE
            item.obj = _with_deadline(item, item.obj, seconds)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real redis-server for the session (tests use their own groups)."""
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="module")
def tls() -> Iterator[TlsServer]:
    """A redis-server that speaks TLS only, for the tests of one module."""
    with TlsServer() as server:
        yield server


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A Redis Cluster of three masters with a replica each, for the tests of one module."""
    with Cluster(masters=3, replicas=1) as deployment:
        yield deployment


@pytest.fixture
def memory_url() -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:12]}"
    yield f"memory://{name}"
    forget_memory_server(name)


@pytest.fixture(params=["memory", "redis"])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each test using this runs on both tiers: in-process fakeredis, and real Redis."""
    if request.param == "memory":
        yield request.getfixturevalue("memory_url")
    else:
        yield request.getfixturevalue("redis_server").url


@pytest.fixture
def group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def keys(group: str) -> Keys:
    """The Redis key names of the test's group, under the default prefix."""
    return Keys("trunner", group)


def raw_client(url: str) -> Any:
    """A synchronous client on the same data, to look at Redis from the outside."""
    if url.startswith("memory://"):
        return memory_server_client(url[len("memory://") :])
    return redis.Redis.from_url(url)


@pytest.fixture
def raw(url: str) -> Iterator[Any]:
    client = raw_client(url)
    yield client
    client.close()


def config(group: str, **overrides: Any) -> trunner.RunnerConfig:
    """A runner config with test-friendly timings."""
    values: dict[str, Any] = {
        "consumer_group": group,
        "block_duration": 1.0,
        "drain_timeout": 5.0,
    }
    values.update(overrides)
    return trunner.RunnerConfig(**values)


@asynccontextmanager
async def open_checked_runner(
    url: str, cfg: trunner.RunnerConfig, tasks: trunner.TaskRegistry
) -> AsyncIterator[trunner.Runner]:
    """``trunner.open_runner``, through the test kit (``trunner.testing``): leaving the
    block stops the runner gracefully, then fails the test if trunner left a Trio task, a
    Redis connection, or a fetched message neither acknowledged nor released.

    For tests that only use a runner; tests of the shutdown itself, or of a runner that
    crashes, open theirs with ``trunner.open_runner``.
    """
    try:
        async with open_runner_factory(url, cfg.consumer_group) as runners:
            yield await runners(tasks, cfg)
    except BaseExceptionGroup as group:
        # The factory runs the runner in a nursery: the block's own failure comes wrapped.
        if len(group.exceptions) == 1 and isinstance(group.exceptions[0], Exception):
            raise group.exceptions[0] from None
        raise


def parts(runner: trunner.Runner) -> Components:
    """The components of a started runner (its janitor, cron scheduler, pool ...)."""
    assert runner._components is not None, f"{runner!r} was never started"
    return runner._components


async def redis_state(predicate: Callable[[], Awaitable[bool]], poll: float = 0.02) -> None:
    """Wait until a condition on Redis holds (the test's Trio deadline bounds the wait).

    Redis state has no event to await, so this polls; in-process conditions use events.
    """
    while not await predicate():  # noqa: ASYNC110 - polling state outside the process
        await trio.sleep(poll)


def run_python(
    *args: str,
    env: dict[str, str] | None = None,
    stdin: int | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``python *args`` in a subprocess (60 s at most); its output as text."""
    return subprocess.run(
        [sys.executable, *args],
        stdin=stdin,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )


class Tally:
    """Records task executions; tests await counts instead of sleeping."""

    def __init__(self) -> None:
        self.runs: list[tuple[Any, int, str]] = []  # (payload, attempt, message id)
        self._lot = trio.lowlevel.ParkingLot()

    def record(self, payload: Any) -> None:
        message = trunner.current_message()
        self.runs.append((payload, message.attempt, message.message_id))
        self._lot.unpark_all()

    async def wait(self, count: int) -> None:
        while len(self.runs) < count:
            await self._lot.park()

    @property
    def payloads(self) -> list[Any]:
        return [payload for payload, _, _ in self.runs]


@pytest.fixture
def tally() -> Tally:
    return Tally()


class Timeline:
    """Records (payload, wall time, task id) of each run; tests await counts."""

    def __init__(self) -> None:
        self.runs: list[tuple[Any, float, str]] = []
        self._lot = trio.lowlevel.ParkingLot()

    def record(self, payload: Any) -> None:
        self.runs.append((payload, time.time(), trunner.current_message().task_id))
        self._lot.unpark_all()

    async def wait(self, count: int) -> None:
        while len(self.runs) < count:
            await self._lot.park()


@pytest.fixture
def timeline() -> Timeline:
    return Timeline()


class Gate:
    """Tasks that record when they start and wait for the test to let them finish.

    ``registry()`` holds two tasks: ``gated`` records its payload in ``started``, waits
    until ``open`` is set (or for ``seconds``, if given), and then records it in
    ``finished`` (in ``cancelled`` if it was cancelled instead); ``noop`` does nothing.
    Tasks of a registry of the test's own record their start with :meth:`enter`.
    """

    def __init__(self) -> None:
        self.started: list[Any] = []
        self.finished: list[Any] = []
        self.cancelled: list[Any] = []
        self.open = trio.Event()
        self._lot = trio.lowlevel.ParkingLot()

    def enter(self, payload: Any) -> None:
        """Record that a task started with ``payload``."""
        self.started.append(payload)
        self._lot.unpark_all()

    async def wait_started(self, count: int = 1) -> None:
        """Wait until ``count`` tasks have started."""
        while len(self.started) < count:
            await self._lot.park()

    def registry(self, seconds: float | None = None) -> trunner.TaskRegistry:
        tasks = trunner.TaskRegistry()

        @tasks.task
        async def gated(payload: Any) -> None:
            self.enter(payload)
            try:
                if seconds is None:
                    await self.open.wait()
                else:
                    await trio.sleep(seconds)
            except trio.Cancelled:
                self.cancelled.append(payload)
                raise
            self.finished.append(payload)

        @tasks.task
        async def noop(_: Any) -> None:
            pass

        return tasks
