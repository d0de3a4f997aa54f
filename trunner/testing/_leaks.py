"""``assert_clean_shutdown``: nothing of trunner's left after a block."""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import threading
import time
from collections.abc import Sequence
from types import TracebackType

import trio

from .._engine.jobhost import JobHost
from .._executors.watchdog import THREAD_NAME as WATCHDOG_THREAD
from .._redis import Probe, redact_url
from .._util import connection_name, process_tag
from .._wire.envelope import PAYLOAD_FIELD
from .._wire.keys import RELEASED_CONSUMER
from .._wire.names import entry_id
from ..runner import Runner
from ..statistics import RunnerState
from ._wire import field as _field
from ._wire import task_name as _task_name

__all__ = ["CleanShutdown", "ShutdownLeak", "assert_clean_shutdown"]

#: Bound on each blocking look at a real Redis server during a leak check.
PROBE_TIMEOUT = 5.0
#: How long a leak check waits for Redis to notice connections closed just before it.
CLOSE_GRACE = 1.0


_TRUNNER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
#: Where the test helpers run: their tasks belong to the test, not to trunner.
_HELPERS = (
    os.path.dirname(os.path.abspath(__file__)) + os.sep,
    os.path.join(_TRUNNER_DIR, "pytest_plugin.py"),
)


def _bridge_dir() -> str | None:
    """The directory of trio-asyncio (trunner's bridge to redis-py), without importing it."""
    spec = importlib.util.find_spec("trio_asyncio")
    locations = spec.submodule_search_locations if spec is not None else None
    return os.path.abspath(next(iter(locations))) + os.sep if locations else None


_CODE_DIRS = tuple(d for d in (_TRUNNER_DIR, _bridge_dir()) if d is not None)
_RUN_CODE = Runner.run.__code__
_HOST_CODE = JobHost._host.__code__


def _coro_file(task: trio.lowlevel.Task) -> str:
    code = getattr(task.coro, "cr_code", None)
    return os.path.abspath(code.co_filename) if code is not None else ""


def _is_trunner_task(task: trio.lowlevel.Task) -> bool:
    path = _coro_file(task)
    return path.startswith(_CODE_DIRS) and not path.startswith(_HELPERS)


def _runner_of(task: trio.lowlevel.Task) -> Runner | None:
    """The runner whose ``run`` the task runs, if it does."""
    coro = task.coro
    if getattr(coro, "cr_code", None) is not _RUN_CODE:
        return None
    frame = getattr(coro, "cr_frame", None)
    runner = frame.f_locals.get("self") if frame is not None else None
    return runner if isinstance(runner, Runner) else None


def _trunner_tasks() -> dict[trio.lowlevel.Task, trio.lowlevel.Task | None]:
    """Live Trio tasks running trunner code, each with its nearest trunner ancestor."""
    found: dict[trio.lowlevel.Task, trio.lowlevel.Task | None] = {}
    try:
        root = trio.lowlevel.current_root_task()
    except RuntimeError:  # not in a Trio run
        return found
    stack: list[tuple[trio.lowlevel.Task, trio.lowlevel.Task | None]] = []
    if root is not None:
        stack.append((root, None))
    while stack:
        task, ancestor = stack.pop()
        if _is_trunner_task(task):
            found[task] = _owner_of(task) or ancestor
            ancestor = task
        for nursery in task.child_nurseries:
            stack.extend((child, ancestor) for child in nursery.child_tasks)
    return found


def _owner_of(task: trio.lowlevel.Task) -> trio.lowlevel.Task | None:
    """For a runner's job host (a system task, outside the runner's tree): the runner's
    task, which it belongs to."""
    coro = task.coro
    if getattr(coro, "cr_code", None) is not _HOST_CODE:
        return None
    frame = getattr(coro, "cr_frame", None)
    host = frame.f_locals.get("self") if frame is not None else None
    return host.owner if isinstance(host, JobHost) else None


def _idle_trio_threads() -> set[threading.Thread]:
    """Threads of Trio's thread cache waiting for work: a pool, not a leak."""
    try:
        from trio._core._thread_cache import THREAD_CACHE  # noqa: PLC0415

        return {worker._thread for worker in list(THREAD_CACHE._idle_workers)}
    except (ImportError, AttributeError):  # another Trio version: count them all
        return set()


class _Spotter(trio.abc.Instrument):
    """Records the runners started (``Runner.run`` spawned) while installed."""

    def __init__(self) -> None:
        self.runners: list[Runner] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        runner = _runner_of(task)
        if runner is not None and runner not in self.runners:
            self.runners.append(runner)


class ShutdownLeak(AssertionError):
    """[``assert_clean_shutdown``][trunner.testing.assert_clean_shutdown] found something
    left behind (an ``AssertionError``)."""

    def __init__(self, leaks: list[str]) -> None:
        lines = "\n".join(f"  - {leak}" for leak in leaks)
        super().__init__(
            f"trunner did not shut down cleanly: {len(leaks)} thing(s) left after the "
            f"block:\n{lines}"
        )
        self.leaks = leaks
        """What was left, one description each."""


def _is_ours(client: dict[str, str]) -> bool:
    """Whether trunner opened the connection in this process: other processes on the
    same server (another test run, a worker) tag their names with their own process."""
    name = client.get("name", "")
    return name.startswith("trunner") and name.endswith("@" + process_tag())


class CleanShutdown:
    """The context manager [``assert_clean_shutdown``][trunner.testing.assert_clean_shutdown]
    returns, sync and async."""

    def __init__(self, redis: Sequence[str], *, threads: bool) -> None:
        self._urls = list(redis)
        self._check_threads = threads
        self._tasks: set[trio.lowlevel.Task] = set()
        self._threads: set[threading.Thread] = set()
        self._clients: dict[str, set[str]] = {}  # url -> connection ids before the block
        self._owners: dict[str, set[str]] = {}  # url -> trunner connection names before it
        self._spotter: _Spotter | None = None
        self.runners: list[Runner] = []
        """The runners started in the block (found while the block ran in a Trio run)."""

    # -- entering ---------------------------------------------------------------------------

    def __enter__(self) -> CleanShutdown:
        self._threads = set(threading.enumerate())
        self._tasks = set(_trunner_tasks())
        for url in self._urls:
            probe = Probe(url, timeout=PROBE_TIMEOUT)
            try:
                clients = probe.client_list()
            finally:
                probe.close()
            self._clients[url] = {c.get("id", "") for c in clients}
            self._owners[url] = {c.get("name", "") for c in clients if _is_ours(c)}
        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            return self  # around trio.run: no Trio task to look at, no runner to find
        self._spotter = _Spotter()
        trio.lowlevel.add_instrument(self._spotter)
        return self

    async def __aenter__(self) -> CleanShutdown:
        await trio.lowlevel.checkpoint()
        return self.__enter__()

    # -- leaving ----------------------------------------------------------------------------

    def _stop_spotting(self) -> None:
        if self._spotter is not None:
            self.runners = list(self._spotter.runners)
            with contextlib.suppress(KeyError, ValueError):  # already removed
                trio.lowlevel.remove_instrument(self._spotter)
            self._spotter = None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop_spotting()
        if exc_type is not None:
            return  # the block's own error says more
        leaks = self._leaks_but_connections()
        deadline = time.monotonic() + CLOSE_GRACE
        connections = self._connection_leaks()
        while connections and time.monotonic() < deadline:
            time.sleep(0.02)  # a sync exit; a server's view of closed sockets has no event
            connections = self._connection_leaks()
        if leaks or connections:
            raise ShutdownLeak(leaks + connections)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop_spotting()
        if exc_type is not None:
            return
        await trio.lowlevel.checkpoint()
        leaks = self._leaks_but_connections()
        connections = self._connection_leaks()
        with trio.move_on_after(CLOSE_GRACE):
            while connections:
                await trio.sleep(0.02)  # a server's view of closed sockets has no event
                connections = self._connection_leaks()
        if leaks or connections:
            raise ShutdownLeak(leaks + connections)

    # -- what is left -----------------------------------------------------------------------

    def _leaks_but_connections(self) -> list[str]:
        """What is left that does not need waiting for (connections may close late)."""
        tasks = self._task_leaks()
        # A runner still running keeps its watchdog thread: the runner is the leak.
        runner_left = any(" of <Runner " in text for text in tasks)
        return tasks + self._thread_leaks(runner_left) + self._pending_leaks()

    def _task_leaks(self) -> list[str]:
        now = _trunner_tasks()
        tops: dict[trio.lowlevel.Task, int] = {}
        for task in now:
            top = self._new_top(task, now)
            if top is not None:
                tops[top] = tops.get(top, -1) + 1
        leaks = []
        for task, under in tops.items():
            runner = _runner_of(task)
            text = f"Trio task {task.name!r}" + (f" of {runner!r}" if runner else "")
            text += " is still running"
            if under:
                text += f", with {under} more trunner task(s) under it"
            leaks.append(text)
        return leaks

    def _new_top(
        self, task: trio.lowlevel.Task, now: dict[trio.lowlevel.Task, trio.lowlevel.Task | None]
    ) -> trio.lowlevel.Task | None:
        """The outermost trunner task above ``task`` (itself included) started in the
        block; None when ``task`` or a trunner task above it is older than the block."""
        top = task
        while top not in self._tasks:
            above = now.get(top)
            if above is None:
                return top
            top = above
        return None

    def _thread_leaks(self, runner_left: bool) -> list[str]:
        if not self._check_threads:
            return []
        idle = _idle_trio_threads()
        return [
            f"thread {t.name!r} (ident {t.ident}) started during the block is still alive"
            for t in threading.enumerate()
            if t not in self._threads
            and t not in idle
            and t.is_alive()
            and not (runner_left and t.name == WATCHDOG_THREAD)
        ]

    def _stopped_runners(self) -> list[Runner]:
        # A runner still running is reported as a task; its connections and messages are
        # legitimately in use.
        return [r for r in self.runners if r.state is RunnerState.STOPPED]

    def _connection_leaks(self) -> list[str]:
        names: dict[str, set[str]] = {url: set() for url in self._urls}
        for runner in self._stopped_runners():
            name = connection_name(f"trunner:{runner.consumer_name}")
            names.setdefault(runner._url, set()).add(name)
        leaks = []
        for url, runner_names in names.items():
            probe = Probe(url, timeout=PROBE_TIMEOUT)
            try:
                clients = probe.client_list()
            finally:
                probe.close()
            before, owners = self._clients.get(url), self._owners.get(url, set())
            for c in clients:
                name = c.get("name", "")
                # A new connection of an owner older than the block (a pool growing) is not
                # the block's: owners are told apart by name (a runner's is unique).
                new = before is not None and c.get("id") not in before and name not in owners
                if _is_ours(c) and (new or name in runner_names):
                    leaks.append(
                        f"Redis connection id={c.get('id')} name={c.get('name')!r} "
                        f"(addr {c.get('addr')}, last command {c.get('cmd')}) opened "
                        f"during the block is still open on {redact_url(url)}"
                    )
        return leaks

    def _pending_leaks(self) -> list[str]:
        leaks = []
        for runner in self._stopped_runners():
            probe = Probe(runner._url, timeout=PROBE_TIMEOUT)
            try:
                leaks += _pending_of(probe, runner)
            finally:
                probe.close()
        return leaks


def _pending_of(probe: Probe, runner: Runner) -> list[str]:
    """Messages still pending for the consumers of a stopped runner (neither acknowledged
    nor released), in every lane it reads."""
    group = runner.config.consumer_group
    leaks = []
    for consumer, (lane, _) in itertools.product(runner.consumers, runner.config.lanes):
        stream = runner.keys.lane_stream(lane)
        for stream_id in probe.pending_ids(stream, group, consumer, 100):
            fields = probe.entry_fields(stream, stream_id)
            name = _task_name(_field(fields, PAYLOAD_FIELD)) if fields is not None else "(deleted)"
            message_id = entry_id(stream_id, lane)
            leaks.append(
                f"message {message_id} of task {name!r} is still pending for consumer "
                f"{consumer!r} of {runner!r}: fetched, and neither acknowledged nor "
                f"released (released ones belong to {RELEASED_CONSUMER!r})"
            )
    return leaks


def assert_clean_shutdown(
    redis: str | Sequence[str] = (), *, threads: bool = True
) -> CleanShutdown:
    """Fail, naming the culprit, if the block left trunner things running.

    Use it as ``with assert_clean_shutdown(): ...`` or ``async with ...``. After the block
    (when it raised nothing) it raises [``ShutdownLeak``][trunner.testing.ShutdownLeak] if
    any of these is left:

    * a Trio task running trunner code (or trio-asyncio's) that was started in the block,
      except under tasks that existed before it (a runner opened earlier keeps running);
    * a thread started in the block (``threads=False`` skips this; idle workers of Trio's
      thread cache are not leaks);
    * a Redis connection opened by trunner in this process in the block: for every
      real-Redis URL in ``redis`` (compared by CLIENT LIST id; trunner's connection names
      start with ``trunner`` and end with ``@<pid>.<tag>`` of the process that opened
      them, so other processes on the same server are never blamed), and, on the server
      of every runner started in the block, that runner's connections;
    * a message fetched by a runner started in the block that is still pending for one of
      its consumers: neither acknowledged nor released.

    Runners are found while the block runs inside a Trio run (a Trio instrument watches
    for ``Runner.run``); around ``trio.run(...)`` only threads and the ``redis`` URLs are
    checked. The Redis look is a short blocking call, even in the async form.

    Args:
        redis: Real-Redis URLs whose connections to check (``memory://`` URLs are
            ignored).
        threads: Check for threads left.

    Returns:
        A [``CleanShutdown``][trunner.testing.CleanShutdown] context manager.
    """
    urls = [redis] if isinstance(redis, str) else list(redis)
    return CleanShutdown([u for u in urls if not u.startswith("memory://")], threads=threads)
