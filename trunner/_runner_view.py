"""What a runner shows of itself while it runs: its state and leadership, the Redis handle,
client and admin it serves, its statistics and errors, and its view of the group's pause.

:class:`~trunner.Runner` inherits these members; they read the components
:mod:`trunner._lifecycle.assembly` built for the current run, and raise
:class:`~trunner.errors.RunnerNotRunning` where there is nothing to read yet.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import attrs

from ._engine.counters import Counters
from ._engine.pausing import PauseGate
from ._leader.election import Elector
from ._lifecycle.assembly import Components
from ._lifecycle.statistics import snapshot
from ._util import ErrorLog
from .admin import Admin
from .client import Client
from .config import RunnerConfig
from .errors import RunnerNotRunning
from .redis_handle import RedisHandle
from .statistics import RunnerState, RunnerStatistics, TaskTotals

__all__ = ["RunnerView"]


class RunnerView:
    """The members of a runner that show its run (see :class:`~trunner.Runner`)."""

    config: RunnerConfig
    consumer_name: str
    _state: RunnerState
    _counters: Counters
    _errors: ErrorLog
    _components: Components | None
    _client: Client | None
    _admin: Admin | None

    @property
    def state(self) -> RunnerState:
        """Where the runner is in its life: see [``RunnerState``][trunner.RunnerState]."""
        return self._state

    @property
    def is_leader(self) -> bool:
        """Whether this instance holds the group's leadership lease now."""
        c = self._components
        return c is not None and c.elector.is_leader

    @property
    def redis(self) -> RedisHandle:
        """The [Redis handle][trunner.RedisHandle] for task code, batched across tasks.

        Inside a task it is also ``trunner.current_runner().redis``. Once the runner has
        stopped, its commands raise [``RunnerNotRunning``][trunner.errors.RunnerNotRunning].

        Raises:
            RunnerNotRunning: The runner was never started.
        """
        c = self._components
        if c is None:
            raise RunnerNotRunning(f"{self!r} is not running")
        return c.redis

    @property
    def client(self) -> Client:
        """This runner's [``Client``][trunner.Client]: the dispatch methods, over the
        runner's connections (``runner.dispatch`` is ``runner.client.dispatch``).

        Raises:
            RunnerNotRunning: The runner was never started.
        """
        if self._client is None:
            raise RunnerNotRunning(f"{self!r} is not running")
        return self._client

    @property
    def admin(self) -> Admin:
        """This runner's [``Admin``][trunner.admin.Admin]: the group's inspection and
        administration, over the runner's connections (the deprecated ``runner.pause()``
        is ``runner.admin.pause()``). Once the runner has stopped, its methods raise
        [``RunnerNotRunning``][trunner.errors.RunnerNotRunning].

        Raises:
            RunnerNotRunning: The runner was never started.
        """
        if self._admin is None:
            raise RunnerNotRunning(f"{self!r} is not running")
        return self._admin

    @property
    def elector(self) -> Elector | None:
        """The group's [elector][trunner.election.Elector], from start-up on; ``None`` before.

        Its events, fence number and current leader are the group's leadership.
        """
        c = self._components
        return c.elector if c is not None else None

    @property
    def consumers(self) -> list[str]:
        """The consumer names of this instance's fetchers.

        ``consumer_name``, then ``consumer_name/1``, ``consumer_name/2`` ... up to
        ``num_fetchers`` names.
        """
        return [self._fetcher_consumer(i) for i in range(self.config.num_fetchers)]

    def _fetcher_consumer(self, index: int) -> str:
        return self.consumer_name if index == 0 else f"{self.consumer_name}/{index}"

    def task_totals(self) -> dict[str, TaskTotals]:
        """Outcomes per task on this instance since it started.

        Returns:
            For each task name that ran here, a copy of its totals: the numbers of
            ``succeeded``, ``failed`` and ``retried`` attempts and of ``dead_lettered``
            messages. Messages of no registered task (unknown names, undecodable
            entries) count under the one name ``"(unregistered)"``: names read from
            Redis never get figures of their own, so this, the timings and the
            Prometheus metrics stay bounded by the registry.
        """
        return {name: attrs.evolve(t) for name, t in self._counters.per_task.items()}

    def statistics(self) -> RunnerStatistics:
        """An immutable snapshot of this instance's counters since it started.

        Local and synchronous: it can be called in any state, before the start and after
        the stop included. The group's statistics are
        [``admin.group_stats``][trunner.admin.Admin.group_stats].
        """
        return snapshot(self._state, self._counters, self._errors, self.config, self._components)

    async def wait_paused(self) -> None:
        """Wait until this runner knows its group is paused and its fetch loops have
        stopped: from then on it reads and claims nothing until the group is resumed
        (see [Pausing a group](pause.md)). Returns at once if that is so already.

        Raises:
            RunnerNotRunning: The runner was never started.
        """
        await self._open_gate().wait_halted()

    async def wait_resumed(self) -> None:
        """Wait until this runner knows its group is not paused (its fetch loops fetch).
        Returns at once if that is so already.

        Raises:
            RunnerNotRunning: The runner was never started.
        """
        await self._open_gate().wait_open()

    def _open_gate(self) -> PauseGate:
        c = self._components
        if c is None:
            raise RunnerNotRunning(f"{self!r} was never started")
        return c.gate

    def errors(self) -> AsyncIterator[BaseException]:
        """The errors the runner handled, as they happen.

        It yields:

        - [``TaskFailed``][trunner.TaskFailed], for every attempt that raised;
        - [``MaxRetryExceeded``][trunner.MaxRetryExceeded],
          [``TaskNotFound``][trunner.TaskNotFound] or
          [``InvalidMessage``][trunner.errors.InvalidMessage], for every message given up;
        - the exception raised by a failed-task handler, or by a ``retry_backoff``
          callable;
        - [``ReservationLost``][trunner.errors.ReservationLost], when a running message was
          taken over;
        - [``PayloadTooLarge``][trunner.PayloadTooLarge], when the leader skipped a cron
          tick whose message is larger than this runner's ``max_payload_bytes``;
        - [``BackendError``][trunner.BackendError] subclasses
          ([``RedisUnavailable``][trunner.RedisUnavailable],
          [``RedisCommandError``][trunner.errors.RedisCommandError]), for Redis failures the
          runner retried or gave up on;
        - unexpected internal errors that were contained to one message.

        The runner never waits for the reader: the newest 1000 errors are kept and older
        ones are dropped (``statistics().errors`` counts them all). Each error is yielded
        to one reader only. The iteration ends once the runner has stopped and every kept
        error was read. A cancelled read takes no error: the next read yields it.
        """
        return aiter(self._errors)
