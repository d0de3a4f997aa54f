"""The runner: its face (state, statistics, errors, stop) and its lifecycle (``run``,
``open_runner``, and ``current_runner`` for task code).

``Runner.run`` connects, prepares Redis and wires the components
(:mod:`trunner._lifecycle.assembly`), runs them in their nursery tree under a watcher that
turns an outer cancellation into ``stop()``, and shuts them down in order
(:mod:`trunner._lifecycle.shutdown`, where the tree and the steps are drawn). Leaving
``open_runner`` (normally, by an exception, or by cancellation) runs that shutdown:
fetchers stop, unstarted messages are released, running tasks drain, the services stop one
by one, and what is still held is released. Every step that talks to Redis is shielded
and bounded.

Supervision: a runner ends with :class:`~trunner.errors.RunnerCrashed` only for a defect of
trunner itself, and never the next instance for the same data. Errors caused by data (a
stream entry, a stored value, a registered cron expression, a task's payload) are
contained to that item by the loop that read it: the item is dead-lettered (messages) or
set aside in the quarantine (:mod:`trunner._engine.quarantine`), counted, reported through
:meth:`Runner.errors`, logged once, and the loop goes on. A leader chore that fails
anyway is restarted after a backoff (:mod:`trunner._leader.leadership`); Redis errors are retried
with backoff by every loop.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import cast

import trio

from ._admin_calls import AdminCalls
from ._context import _current_runner, running_runner
from ._engine.counters import Counters
from ._engine.holdings import Job
from ._engine.reporter import LocalTimings
from ._leader.leadership import Chore
from ._lifecycle import shutdown
from ._lifecycle.assembly import Components, build, log_started, open_broker, prepare
from ._producer.dispatch import Producer
from ._producer.dispatching import DispatchCalls
from ._producer.scheduling import ScheduleCalls
from ._redis import Broker, check_url
from ._runner_view import RunnerView
from ._util import ErrorLog, instance_id, logger, run_in_background
from ._wire.keys import Keys
from ._wire.names import DEFAULT_LANE
from .admin import Admin
from .client import Client
from .config import RunnerConfig
from .errors import RunnerAlreadyStarted, RunnerCrashed, RunnerNotRunning
from .registry import TaskRegistry
from .statistics import RunnerState

__all__ = ["Runner", "current_runner", "open_runner"]


def current_runner() -> Runner:
    """The runner executing the current task.

    Inside a task, this is the runner running it: dispatch a follow-up task with
    ``await trunner.current_runner().dispatch(...)``, or use its
    [``redis``][trunner.Runner.redis] handle. It also works inside a failed-task handler.

    Returns:
        The [``Runner``][trunner.Runner] running the current task.

    In a task run eagerly ([``TaskRegistry.call``][trunner.TaskRegistry.call],
    [``trunner.testing.call_task``][trunner.testing.call_task]), it is the runner given
    to ``call_task(..., runner=runner)``.

    Raises:
        RunnerNotRunning: Outside of a task run by a runner, and in a task run eagerly
            without ``runner=`` (then the eager call raises it at once, saying how to
            give the task a runner, instead of retrying).
    """
    return cast(Runner, running_runner())  # only a Runner is ever set


class Runner(RunnerView, DispatchCalls, ScheduleCalls, AdminCalls):
    """One runner instance of a consumer group.

    [``open_runner``][trunner.open_runner] creates and runs one for you. To manage it
    yourself, create it and start it in a nursery with ``await nursery.start(runner.run)``
    ([``run``][trunner.Runner.run] follows Trio's ``task_status`` convention), and end it
    with [``stop``][trunner.Runner.stop]. The constructor checks its arguments like
    ``open_runner`` does, and connects to nothing.

    Besides the members below, a runner has every [dispatch method][dispatch-methods]; its
    [``admin``][trunner.Runner.admin] inspects and administers the group (the runner's
    own admin methods, such as ``runner.pause()``, are the admin's, and deprecated).

    Args:
        redis: The Redis URL, as for [``open_runner``][trunner.open_runner].
        config: The configuration of this instance.
        tasks: The registry whose tasks this instance runs.

    Raises:
        TypeError: ``config`` is not a [``RunnerConfig``][trunner.RunnerConfig], ``tasks``
            is not a [``TaskRegistry``][trunner.TaskRegistry], or ``redis`` is not a
            string.
        ValueError: ``redis`` has an unsupported scheme or is not a valid URL, or is
            ``memory://`` without a name.
        TaskNotFound: A cron schedule of ``tasks`` names a task that is not registered
            ([``TaskRegistry.check``][trunner.TaskRegistry.check]).
    """

    _called = "runner"

    def __init__(self, redis: str, config: RunnerConfig, tasks: TaskRegistry) -> None:
        if not isinstance(config, RunnerConfig):
            raise TypeError(f"config must be a RunnerConfig, got {type(config).__name__}")
        if not isinstance(tasks, TaskRegistry):
            raise TypeError(f"tasks must be a TaskRegistry, got {type(tasks).__name__}")
        tasks.check()
        check_url(redis)
        self._dispatcher = Producer(
            registry=tasks,
            max_payload_bytes=config.max_payload_bytes,
            middleware=config.middleware,
            lanes=config.lane_names if len(config.lanes) > 1 else None,
            on_scheduled=self._scheduled,
            name="Runner",
        )
        self._broker: Broker | None = None
        self._client: Client | None = None
        self._admin: Admin | None = None
        self._url = redis
        self.config = config
        """The configuration."""
        self.tasks = tasks
        """The registry whose tasks this instance runs."""
        self.keys = Keys(
            config.prefix, config.consumer_group, config.queue or config.consumer_group
        )
        """The Redis key names of the group."""
        self.consumer_name = config.consumer_name or instance_id(config.host)
        """This instance's consumer name: ``config.consumer_name``, or
        ``<host>:<pid>:<6 hex digits>``. It is also the instance's id in the leadership
        lease and in [``instances``][trunner.admin.Admin.instances]."""
        self._state = RunnerState.INIT
        self._counters = Counters()
        self._errors = ErrorLog()
        self._stop = shutdown.StopRequest()
        self._components: Components | None = None
        self.timings = LocalTimings()
        """This instance's execution-time histograms per task, cumulative since it started
        (what the Prometheus exporter publishes)."""
        #: Leader-only work: each runs in a nursery opened on promotion, cancelled on demotion.
        self._leader_chores: list[Chore] = []

    def __repr__(self) -> str:
        return (
            f"<Runner group={self.config.consumer_group!r} consumer={self.consumer_name!r} "
            f"state={self._state.name}>"
        )

    # -- control ----------------------------------------------------------------------------

    def stop(self, *, drain: bool = True) -> None:
        """Ask for a graceful shutdown; returns at once.

        [``run``][trunner.Runner.run] returns when the shutdown is done (see
        [Shutdown](concepts.md#shutdown)). Calling it again does nothing, except with
        ``drain=False``.

        Args:
            drain: With ``False`` (also when called again with it during a drain), running
                tasks are cancelled at once instead of being given up to
                ``drain_timeout`` to finish; their messages are released for immediate
                reclaim, never acknowledged.
        """
        self._stop.ask(drain=drain)

    # -- what components call back ----------------------------------------------------------

    async def _record_progress(self, job: Job) -> None:
        """Write a task's progress (``trunner.report_progress``)."""
        c = self._components
        if c is None:
            raise RunnerNotRunning(f"{self!r} is not running")
        await c.outcomes.progress(job)

    def _scheduled(self, due_ms: int) -> None:
        if self._components is not None:
            self._components.mover.due_at(due_ms)

    # -- life -------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start, report readiness through ``task_status.started()``, serve, shut down.

        It serves until [``stop``][trunner.Runner.stop] or cancellation. A runner runs
        once. Started with ``nursery.start``, its errors arrive inside exception groups;
        [``open_runner``][trunner.open_runner] unwraps them.

        Cancellation: cancelling ``run`` does not cut the shutdown short. It stops the
        runner gracefully, like ``stop()``: running tasks still get up to
        ``drain_timeout`` to finish, and each shutdown step that talks to Redis is shielded
        and bounded (5 s). The cancellation then propagates.

        Raises:
            RunnerAlreadyStarted: The runner was started before.
            RedisUnavailable: Redis cannot be reached or did not answer within
                ``connect_timeout``, or start-up took longer than that again.
            RedisCommandError: Redis refused a start-up command.
        """
        if self._state is not RunnerState.INIT:
            raise RunnerAlreadyStarted(f"{self!r} was already started; create a new Runner")
        self._state = RunnerState.STARTING
        try:
            async with open_broker(self._url, self.config, self.keys, self.consumer_name) as broker:
                await prepare(
                    broker,
                    self.config,
                    self._counters,
                    self._errors,
                    self.consumer_name,
                    self._declare_task_lanes,
                )
                self._components = build(
                    broker,
                    config=self.config,
                    tasks=self.tasks,
                    keys=self.keys,
                    consumer_name=self.consumer_name,
                    consumers=self.consumers,
                    counters=self._counters,
                    errors=self._errors,
                    timings=self.timings,
                    leader_chores=self._leader_chores,
                    url=self._url,
                )
                async with trio.open_nursery() as watcher:
                    watcher.start_soon(self._stop_on_cancel)
                    with trio.CancelScope(shield=True):
                        await self._serve(self._components, task_status)
                    watcher.cancel_scope.cancel()
        finally:
            self._broker = None
            self._dispatcher.close()
            if self._admin is not None:
                self._admin._close()
            self._state = RunnerState.STOPPED
            self._errors.close()
            if self._components is not None:
                logger.info("runner stopped: %s", shutdown.stop_summary(self.statistics()))
                self._components.elector._close()

    async def _stop_on_cancel(self) -> None:
        try:
            await trio.sleep_forever()
        finally:
            self.stop()

    async def _declare_task_lanes(self, broker: Broker) -> None:
        """Name the lanes of its tasks' ``priority`` (other than those it reads, which
        ``ensure_group`` named) in the queue's registry of lanes: their cron ticks go
        there, and a lane nobody reads shows up in ``inspect`` and in the leader's
        warning (see [Priority lanes](lanes.md))."""
        lanes = self._dispatcher.lanes.own() - {DEFAULT_LANE}
        extra = sorted(lanes - set(self.config.lane_names))
        if extra:
            await broker.declare_lanes(extra)
        self._dispatcher.lanes.remember(lanes)

    async def _serve(self, c: Components, task_status: trio.TaskStatus[None]) -> None:
        _current_runner.set(self)  # inherited by every task the nurseries below start
        started = functools.partial(self._started, c.broker)
        await shutdown.serve(c, self._stop, started, self._stopping, task_status)

    def _started(self, broker: Broker) -> None:
        self._broker = broker
        c = self._components
        self._dispatcher.open(broker, c.waiters if c is not None else None)
        self._admin = Admin(
            broker,
            registry=self.tasks,
            max_payload_bytes=self.config.max_payload_bytes,
            instance_ttl=self.config.instance_ttl,
            name="Runner",
        )
        if c is not None:
            self._client = Client(self._dispatcher, self._admin, c.redis, self.keys)
        self._state = RunnerState.STARTED
        log_started(self.config, self.keys, self.consumer_name, broker, self.tasks)

    def _stopping(self) -> None:
        self._state = RunnerState.STOPPING


@asynccontextmanager
async def open_runner(
    redis: str, config: RunnerConfig, tasks: TaskRegistry
) -> AsyncIterator[Runner]:
    """Run one runner instance of ``config.consumer_group`` for the duration of the block.

    When the block starts, the runner is ``STARTED`` and ready: Redis answered, the scripts
    are loaded, the consumer group exists, every component runs, and the first attempt to
    take the group's leadership lease was made (``is_leader`` tells its outcome). Leaving
    the block, in any way, shuts the runner down in order (see
    [Shutdown](concepts.md#shutdown)), and the exit waits for the shutdown to finish.

    Cancellation: a cancellation of the block shuts the runner down gracefully, like any
    other exit: running tasks get up to ``drain_timeout`` to finish, and every shutdown
    step that talks to Redis is shielded and bounded. The cancellation then propagates.

    Args:
        redis: The Redis URL: ``redis://``, ``rediss://``, ``unix://``,
            ``redis+cluster://``, ``redis+sentinel://`` (and their ``rediss+`` forms), or
            ``memory://NAME``, an in-process server shared by name (see
            [Deployment](deployment.md#connecting)).
        config: The configuration of this instance.
        tasks: The registry whose tasks this instance runs.

    Yields:
        The started [``Runner``][trunner.Runner].

    Raises:
        TypeError: ``config`` is not a [``RunnerConfig``][trunner.RunnerConfig], ``tasks``
            is not a [``TaskRegistry``][trunner.TaskRegistry], or ``redis`` is not a
            string. Raised before anything starts.
        ValueError: An unsupported URL scheme, an invalid URL, or ``memory://`` without a
            name. Raised before anything starts.
        TaskNotFound: A cron schedule of ``tasks`` names a task that is not registered
            ([``TaskRegistry.check``][trunner.TaskRegistry.check]). Raised before
            anything starts.
        RedisUnavailable: Redis cannot be reached or did not answer within
            ``config.connect_timeout`` (wrong credentials also end up here), or start-up
            (loading the scripts, creating the group) took longer than that again.
        RedisCommandError: Redis refused a start-up command (ACL, out of memory ...).
        RunnerCrashed: A component of the runner failed; ``__cause__`` is the exception
            group. See [Exceptions](concepts.md#exceptions).

    An exception raised in the block leaves as itself, after the shutdown.
    """
    runner = Runner(redis, config, tasks)

    def crashed(what: str) -> RunnerCrashed:
        return RunnerCrashed(f"the runner failed: {what}")

    async with run_in_background(runner.run, runner.stop, crashed):
        yield runner
