"""Runners for one test, opened by a factory and closed with it; cleaning a test Redis."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from .._redis import delete_prefixed, open_transport
from .._util import connection_name
from ..config import RunnerConfig
from ..registry import TaskRegistry
from ..runner import Runner, open_runner
from ._leaks import PROBE_TIMEOUT, assert_clean_shutdown

__all__ = ["RunnerFactory", "clean_keys", "open_runner_factory"]


async def clean_keys(url: str, prefixes: Iterable[str] = ("trunner",)) -> int:
    """Delete every key named ``<prefix>:...``, for each prefix.

    For the Redis a test suite owns: every group under a prefix is gone afterwards.

    Args:
        url: The Redis URL.
        prefixes: The key prefixes.

    Returns:
        How many keys were deleted.
    """
    deleted = 0
    async with open_transport(
        url,
        client_name=connection_name("trunner-testing"),
        max_connections=2,
        connect_timeout=PROBE_TIMEOUT,
    ) as transport:
        for prefix in sorted(set(prefixes)):
            deleted += await delete_prefixed(transport, prefix)
    return deleted


class RunnerFactory:
    """Opens runners for one test: ``runner = await factory(tasks, **config)``.

    Every runner it opened is stopped (gracefully) when the factory closes; get one from
    [``open_runner_factory``][trunner.testing.open_runner_factory] or the
    ``trunner_runner`` fixture.
    """

    def __init__(
        self, url: str, group: str, nursery: trio.Nursery, tasks: TaskRegistry | None = None
    ) -> None:
        self.url = url
        """The Redis URL of the runners it opens."""
        self.group = group
        """The default consumer group of the runners it opens (unique per factory)."""
        self.tasks = tasks
        """The default registry of the runners it opens (``None``: give one each time)."""
        self.runners: list[Runner] = []
        """Every runner opened, in order."""
        self._nursery = nursery
        self._stop: dict[Runner, trio.Event] = {}
        self._done: dict[Runner, trio.Event] = {}

    def config(self, **overrides: Any) -> RunnerConfig:
        """A [``RunnerConfig``][trunner.RunnerConfig] for this factory's group.

        Args:
            **overrides: Fields of the configuration.
        """
        values: dict[str, Any] = {"consumer_group": self.group, **overrides}
        return RunnerConfig(**values)

    async def __call__(
        self,
        tasks: TaskRegistry | None = None,
        config: RunnerConfig | None = None,
        /,
        **overrides: Any,
    ) -> Runner:
        """Open a runner of ``tasks``, started and ready when this returns.

        Args:
            tasks: The registry; default: the factory's
                [``tasks``][trunner.testing.RunnerFactory.tasks].
            config: The configuration; default: [``config``][trunner.testing.RunnerFactory.config]
                ``(**overrides)``.
            **overrides: Fields that replace those of ``config``.

        Returns:
            The started runner.

        Raises:
            TypeError: No ``tasks``, and the factory has no registry either.
        """
        if tasks is None:
            if self.tasks is None:
                raise TypeError(
                    "no registry: pass one (await trunner_runner(tasks)), or give the factory "
                    "one (override the trunner_tasks fixture, or open_runner_factory(tasks=))"
                )
            tasks = self.tasks
        if config is None:
            config = self.config(**overrides)
        elif overrides:
            config = attrs.evolve(config, **overrides)
        runner: Runner = await self._nursery.start(self._serve, tasks, config)
        return runner

    async def _serve(
        self,
        tasks: TaskRegistry,
        config: RunnerConfig,
        *,
        task_status: trio.TaskStatus[Runner] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        stop, done = trio.Event(), trio.Event()
        try:
            async with open_runner(self.url, config, tasks) as runner:
                self.runners.append(runner)
                self._stop[runner], self._done[runner] = stop, done
                task_status.started(runner)
                await stop.wait()
        finally:
            done.set()

    async def close(self, runner: Runner) -> None:
        """Stop ``runner`` gracefully and wait until it has stopped.

        Raises:
            ValueError: ``runner`` was not opened by this factory.
        """
        if runner not in self._stop:
            raise ValueError(f"{runner!r} was not opened by this factory")
        self._stop[runner].set()
        await self._done[runner].wait()

    def _stop_all(self) -> None:
        for stop in self._stop.values():
            stop.set()


@asynccontextmanager
async def open_runner_factory(
    url: str,
    group: str | None = None,
    *,
    check_shutdown: bool = True,
    tasks: TaskRegistry | None = None,
) -> AsyncIterator[RunnerFactory]:
    """A [``RunnerFactory``][trunner.testing.RunnerFactory] for the block; its runners are
    stopped when it ends.

    Args:
        url: The Redis URL of the runners.
        group: Their default consumer group; default: a fresh name.
        tasks: Their default registry.
        check_shutdown: At the end of the block, also check, like
            [``assert_clean_shutdown``][trunner.testing.assert_clean_shutdown] (without
            threads), that nothing of trunner started in the block is left: its tasks,
            connections, or messages neither acknowledged nor released.

    Yields:
        The factory.

    Raises:
        ShutdownLeak: With ``check_shutdown``, something was left.
    """
    factory_group = group or f"test-{uuid.uuid4().hex[:10]}"
    check = assert_clean_shutdown(url, threads=False)
    async with (
        check if check_shutdown else contextlib.nullcontext(),
        trio.open_nursery() as nursery,
    ):
        factory = RunnerFactory(url, factory_group, nursery, tasks)
        try:
            yield factory
        finally:
            factory._stop_all()
