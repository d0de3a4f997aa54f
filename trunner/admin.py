"""Inspection and administration of a consumer group: ``Admin``, and the values it returns.

A runner's ``admin`` and a client's ``admin`` are one; [``open_admin``][trunner.admin.open_admin]
opens one alone (``trunner inspect`` and ``trunner dead-letter`` show what it reads).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from ._discovery import FoundGroup, GroupsFound, discover_groups
from ._producer import admin as queries
from ._producer.opening import check_producer_args, group_keys
from ._producer.workflow_views import WorkflowAdmin
from ._public import fixup_module_metadata
from ._redis import Broker, open_transport
from ._util import connection_name, wall_ms
from ._waiting.calls import Calls, counting
from ._wire.envelope import DEFAULT_MAX_PAYLOAD_BYTES
from ._wire.inspection import (
    CronEntry,
    DeadLetter,
    DelayedTask,
    GroupInfo,
    ReplayResult,
    as_dict,
)
from ._wire.pause import notices_for
from ._wire.quarantine import QuarantineRecord
from ._wire.stats import GroupStats, InstanceInfo, TaskTiming
from ._wire.workflow_views import LiveWorkflow, StepState, WorkflowSteps
from .errors import RunnerNotRunning
from .registry import TaskRegistry

__all__ = [
    "Admin",
    "CronEntry",
    "DeadLetter",
    "DelayedTask",
    "FoundGroup",
    "GroupInfo",
    "GroupStats",
    "GroupsFound",
    "InstanceInfo",
    "LiveWorkflow",
    "QuarantineRecord",
    "ReplayResult",
    "StepState",
    "TaskTiming",
    "WorkflowSteps",
    "as_dict",
    "discover_groups",
    "open_admin",
]


@counting
class Admin(WorkflowAdmin):
    """Inspects and administers one consumer group: its queue, instances, statistics,
    pause, delayed tasks, cron schedules, dead letters, quarantine and workflows.

    Do not create it yourself: a runner's [``admin``][trunner.Runner.admin], a client's
    [``admin``][trunner.Client.admin], or [``open_admin``][trunner.admin.open_admin] gives one
    (as asynq's ``Inspector`` beside its ``Client``). Once its runner, client or
    ``open_admin`` block is closed, its methods raise
    [``RunnerNotRunning``][trunner.errors.RunnerNotRunning]; Redis failures raise
    [``RedisUnavailable``][trunner.RedisUnavailable] or
    [``RedisCommandError``][trunner.errors.RedisCommandError].
    """

    def __init__(
        self,
        broker: Broker,
        *,
        registry: TaskRegistry | None,
        max_payload_bytes: int,
        instance_ttl: float,
        name: str = "Admin",
        calls: Calls | None = None,
    ) -> None:
        self._broker: Broker | None = broker
        self._in_flight = Calls() if calls is None else calls
        self._registry = registry
        self._max_payload_bytes = max_payload_bytes
        self._instance_ttl = instance_ttl
        self._name = name

    def __repr__(self) -> str:
        return f"<Admin group={self.consumer_group!r}>"

    @property
    def consumer_group(self) -> str:
        """The group this admin inspects and administers."""
        return self._broker.group if self._broker is not None else "?"

    def _open_broker(self) -> Broker:
        if self._broker is None:
            raise RunnerNotRunning(f"{self._name} is not open")
        return self._broker

    def _close(self) -> None:
        self._broker = None

    def _calls(self) -> Calls:
        """The calls in flight on its connections (its producer's, if it has one)."""
        return self._in_flight

    async def queue_length(self) -> int:
        """The number of entries in the group's stream (``XLEN``), over its
        [priority lanes](lanes.md).

        Waiting messages, plus delivered ones not yet acknowledged. With
        ``delete_on_ack=False``, acknowledged entries stay in the stream and are counted
        too.
        """
        return await self._open_broker().queue_length()

    async def lane_lengths(self) -> dict[str, int]:
        """[``queue_length``][trunner.admin.Admin.queue_length] per [priority lane](lanes.md):
        the lanes this runner reads (a client: the default lane), then those the queue's
        other runners and clients named."""
        return await self._open_broker().lane_lengths()

    async def pending_count(self) -> int:
        """The number of messages delivered to a consumer and not yet acknowledged.

        Running, released, or abandoned by a dead instance.

        Raises:
            RedisCommandError: The consumer group does not exist yet (no runner of it
                has started).
        """
        return await self._open_broker().pending_count()

    async def delayed_count(self) -> int:
        """The number of tasks waiting in the delayed set (``ZCARD``).

        Delayed tasks ([``dispatch_delayed``][trunner.Runner.dispatch_delayed],
        [``schedule_for``][trunner.Runner.schedule_for]) and scheduled retries that have
        not been moved into the stream yet. Cron ticks are not counted: they are added to
        the stream directly.
        """
        return await self._open_broker().delayed_count()

    async def dead_letter_count(self) -> int:
        """The number of entries in the group's dead-letter stream."""
        return await self._open_broker().dead_count()

    async def waiting_age(self) -> float | None:
        """How long the oldest message not yet delivered has waited (seconds), from its
        stream id's time; None when none waits. The wait of the next pickup, at least."""
        return await queries.waiting_age(self._open_broker())

    async def group_stats(self) -> GroupStats:
        """The group's statistics over the current window, computed now.

        Group-wide and read from Redis, the same from any instance (see
        [Metrics and capacity](metrics-and-capacity.md));
        [``Runner.statistics``][trunner.Runner.statistics] is one instance's own.
        Instances that have not reported for ``instance_ttl`` are not counted.

        Returns:
            The statistics, as the leader computes them at the end of a window.
        """
        return await queries.read_stats(self._open_broker(), self._instance_ttl)

    async def instances(self) -> list[InstanceInfo]:
        """The group's live instances, and which one leads.

        An instance that has not reported for ``instance_ttl`` is not listed.

        Returns:
            One [``InstanceInfo``][trunner.admin.InstanceInfo] per live instance, by id.
        """
        return await queries.read_instances(self._open_broker(), self._instance_ttl)

    async def inspect(self) -> GroupInfo:
        """The group at a glance, as ``trunner inspect`` shows it.

        Returns:
            The queue, pending messages per consumer, delayed tasks, dead letters, live
            instances, leader, capacity decision and the leader's last statistics. A
            group that no runner created yet has no pending messages.
        """
        return await queries.inspect_group(self._open_broker(), self._instance_ttl)

    async def pause(self) -> bool:
        """Pause the group: every runner of it stops fetching new messages.

        Running tasks go on and finish; acknowledgements, heartbeats and the leader's
        chores go on too (the delayed mover keeps moving due tasks into the stream, where
        they wait). A runner started while the group is paused stays paused. The pause
        lasts until [``resume``][trunner.admin.Admin.resume]; see
        [Pausing a group](pause.md) for the guarantee and how fast it holds.

        Returns:
            ``True`` if this call paused the group, ``False`` if it was paused already
            (then nothing changes, and the runners are told again).
        """
        broker = self._open_broker()
        changed, _ = await broker.pause(wall_ms(), notices_for(broker.keys)[0])
        return changed

    async def resume(self) -> bool:
        """Resume a paused group: its runners fetch again at once.

        Returns:
            ``True`` if the group was paused, ``False`` if it was not (then nothing
            changes).
        """
        broker = self._open_broker()
        return await broker.resume(notices_for(broker.keys)[1])

    async def dead_letters(self, count: int = 100, start: str = "-") -> list[DeadLetter]:
        """Read the dead-letter stream, oldest first.

        Args:
            count: The most entries to return.
            start: The dead-letter entry id to start at (included); ``"-"``: the oldest.

        Returns:
            Up to ``count`` entries.
        """
        return await queries.list_dead(self._open_broker(), count, start)

    async def dead_letters_newest(self, count: int = 100, end: str = "+") -> list[DeadLetter]:
        """Read the dead-letter stream, newest first: one page, whatever its length.

        Args:
            count: The most entries to return.
            end: The dead-letter entry id to start at, going back (included; ``"(id"``
                leaves it out, to read the page after one that ended at ``id``);
                ``"+"``: the newest.

        Returns:
            Up to ``count`` entries.
        """
        return await queries.list_dead_newest(self._open_broker(), count, end)

    async def replay_dead_letters(
        self, ids: Sequence[str] | None = None, *, task: str | None = None
    ) -> ReplayResult:
        """Put dead letters back into the stream, as fresh first attempts.

        Each replayed entry leaves the dead-letter stream and enters the task stream in
        one script, with its task id and payload, and attempt 1. A dead letter of a unique
        task takes its key's lock again in the same script; if the key is locked (a task
        of that key is queued or running), it is not replayed and stays in the dead-letter
        stream. An entry whose message cannot be decoded stays too, and ids that are not
        in the dead-letter stream are skipped.

        Args:
            ids: The dead-letter entry ids to replay; ``None`` replays all of them (or,
                with ``task``, all of that task's).
            task: Replay only the dead letters of this task (with ``ids``: those of
                ``ids`` that are of it; without: every one of it, the whole stream read
                500 entries per round trip).

        Returns:
            A [``ReplayResult``][trunner.admin.ReplayResult]: the new stream ids, and why each
            entry that was not replayed was not (it unpacks as ``(new ids, ids not
            replayed)``).
        """
        broker = self._open_broker()
        if task is not None:
            of_task = await queries.dead_ids_of_task(broker, task)
            ids = of_task if ids is None else [i for i in ids if i in set(of_task)]
        return await queries.replay_dead(broker, ids, self._max_payload_bytes, self._unique_for)

    def _unique_for(self, task_name: str) -> float | None:
        """The registry's ``unique_for`` of a task (None without one, or not unique)."""
        registry = self._registry
        if registry is None or task_name not in registry:
            return None
        return registry.get(task_name).unique_for

    async def delete_dead_letters(
        self, ids: Sequence[str] | None = None, *, task: str | None = None
    ) -> int:
        """Delete some dead letters: those of ``ids``, or every one of the task ``task``.

        [``purge_dead_letters``][trunner.admin.Admin.purge_dead_letters] deletes them all.

        Args:
            ids: Dead-letter entry ids (ids that are not entry ids are left out).
            task: A task name: delete every dead letter of that task (the whole stream
                is read, 500 entries per round trip).

        Returns:
            How many dead letters were deleted.

        Raises:
            ValueError: Neither or both of ``ids`` and ``task`` were given.
        """
        broker = self._open_broker()
        if (ids is None) == (task is None):
            raise ValueError("give either ids or task (purge_dead_letters() deletes all)")
        if task is not None:
            ids = await queries.dead_ids_of_task(broker, task)
        assert ids is not None
        return await queries.delete_dead(broker, ids)

    async def purge_dead_letters(self) -> int:
        """Delete every dead-letter entry.

        Returns:
            How many entries there were.
        """
        return await self._open_broker().purge_dead()

    async def delayed_tasks(self, count: int = 50, offset: int = 0) -> list[DelayedTask]:
        """The tasks waiting in the delayed set, soonest due first (one page).

        Args:
            count: The most tasks to return.
            offset: How many of the soonest to skip.

        Returns:
            Up to ``count`` [``DelayedTask``][trunner.admin.DelayedTask]s; one whose message
            cannot be read is listed with its ``problem``. Cancel one with
            ``handle(task.id).cancel()``.
        """
        return await queries.list_delayed(self._open_broker(), count, offset)

    async def cron_entries(self) -> list[CronEntry]:
        """The group's cron schedules, with when each last fired and fires next.

        The schedules come from this producer's registry (``open_client(tasks=...)``);
        the last tick fired of each, from Redis. Names Redis holds a last tick of that the
        registry does not know are listed after, without expression or next tick.

        Returns:
            One [``CronEntry``][trunner.admin.CronEntry] per schedule.
        """
        return await queries.cron_entries(self._open_broker(), self._registry)

    async def quarantined(self, count: int = 100, start: str = "-") -> list[QuarantineRecord]:
        """Up to ``count`` records of bad data the runners set aside, oldest first, from
        record id ``start`` (see [Bad data in Redis](reliability.md#bad-data-in-redis))."""
        return await queries.list_quarantined(self._open_broker(), count, start)

    async def quarantine_count(self) -> int:
        """Records in the group's quarantine stream."""
        return await self._open_broker().quarantine_count()

    async def purge_quarantine(self) -> int:
        """Delete every quarantine record; return how many there were."""
        return await self._open_broker().purge_quarantine()


@asynccontextmanager
async def open_admin(
    redis: str,
    queue: str | None = None,
    *,
    group: str | None = None,
    prefix: str = "trunner",
    tasks: TaskRegistry | None = None,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    connect_timeout: float = 5.0,
    command_timeout: float = 10.0,
    max_connections: int = 20,
    instance_ttl: float = 15.0,
) -> AsyncIterator[Admin]:
    """Open an [``Admin``][trunner.admin.Admin] of a consumer group, for the duration of the block.

    For tools and processes that inspect or administer a group and dispatch nothing. It
    opens connections only, like [``open_client``][trunner.open_client], whose arguments
    it takes (a client has one too: [``client.admin``][trunner.Client.admin]).

    Args:
        redis: The Redis URL, as for [``open_runner``][trunner.open_runner].
        queue: The queue the group reads (a name), as for ``open_client``.
        group: The consumer group (a name); default: the group of the queue's own name.
        prefix: The key prefix. It must match the group's runners.
        tasks: The registry whose cron schedules ``cron_entries`` lists, and whose
            ``unique_for`` a replayed dead letter of a unique task takes when its message
            does not say.
        max_payload_bytes: The group's largest message, for replayed dead letters.
        connect_timeout: Redis must answer a ``PING`` within this time (> 0).
        command_timeout: A command without a reply for this long fails with
            [``RedisUnavailable``][trunner.RedisUnavailable] (> 0).
        max_connections: The size of the connection pool (an int >= 1).
        instance_ttl: The group's
            [``RunnerConfig.instance_ttl``][trunner.RunnerConfig.instance_ttl] (> 0).

    Yields:
        The [``Admin``][trunner.admin.Admin].

    Raises:
        TypeError: A bad argument, before connecting.
        ValueError: A bad argument, before connecting.
        RedisUnavailable: Redis cannot be reached within ``connect_timeout``.

    After the block, the admin's methods raise
    [``RunnerNotRunning``][trunner.errors.RunnerNotRunning].
    """
    keys = group_keys("open_admin", queue, None, group, prefix)
    check_producer_args(
        tasks, max_payload_bytes, connect_timeout, command_timeout, max_connections, instance_ttl
    )
    async with open_transport(
        redis,
        client_name=connection_name(f"trunner-admin:{keys.queue}"),
        max_connections=max_connections,
        connect_timeout=connect_timeout,
        command_timeout=command_timeout,
    ) as transport:
        admin = Admin(
            Broker(transport, keys),
            registry=tasks,
            max_payload_bytes=max_payload_bytes,
            instance_ttl=instance_ttl,
        )
        try:
            yield admin
        finally:
            admin._close()


fixup_module_metadata(__name__, globals())
