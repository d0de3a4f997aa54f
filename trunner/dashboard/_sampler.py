"""What a group page shows, read from Redis once per interval for everyone watching.

One :class:`Sampler` per group reads a snapshot (counts, instances, per-task timings,
running and delayed tasks, live workflows) through the public calls of the client's admin,
keeps the last samples of throughput and pickup latency in a ring buffer for the charts,
and wakes the event streams of the pages that watch. Each part of a snapshot is read on its
own: one that cannot be read (Redis down, bad data) is shown as unreadable, with why, and
the others still show.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from trunner import Client
from trunner.admin import GroupStats, LiveWorkflow

__all__ = ["Sampler"]

T = TypeVar("T")

logger = logging.getLogger("trunner.dashboard")

#: Samples kept for the charts (with a 1 s interval: the last 5 minutes).
HISTORY = 300
#: Running and delayed tasks shown (the oldest and the soonest), and live workflows (the
#: oldest).
SHOWN = 20


class Sampler:
    """Reads one group's snapshot every ``interval`` seconds (the standard lifecycle:
    ``run`` until cancelled)."""

    def __init__(self, client: Client, interval: float = 1.0, history: int = HISTORY) -> None:
        self.client = client
        self.admin = client.admin
        """What the snapshots are read through: the client's ``Admin``."""
        self.group = client.consumer_group
        self.queue = client.keys.queue
        self.interval = interval
        self.latest: dict[str, Any] = {
            "group": self.group, "queue": self.queue, "version": 0, "loading": True,
        }  # fmt: skip
        self.version = 0
        self._series: collections.deque[tuple[float, float | None, float | None]] = (
            collections.deque(maxlen=history)
        )
        self._finished: tuple[float, int] | None = None
        self._changed = trio.Event()
        self.closed = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await self.sample()
            task_status.started()
            while True:
                await trio.sleep(self.interval)
                await self.sample()
        finally:
            self.closed = True
            self._changed.set()

    async def wait_newer(self, version: int) -> bool:
        """Wait until a snapshot newer than ``version`` exists; False once closed."""
        while self.version <= version and not self.closed:
            await self._changed.wait()
        return self.version > version

    async def sample(self) -> None:
        """Read a snapshot now and tell the watchers."""
        errors: dict[str, str] = {}

        async def part(name: str, read: Callable[[], Awaitable[T]]) -> T | None:
            try:
                return await read()
            # Bad data in Redis, or Redis down, must never break a page: the part shows
            # as unreadable, with why, and is read again at the next interval.
            except Exception as exc:  # noqa: BLE001
                errors[name] = f"{type(exc).__name__}: {exc}"[:300]
                return None

        admin = self.admin
        now = time.time()
        info = await part("overview", admin.inspect)
        stats = await part("timings", admin.group_stats)
        age = await part("pickup latency", admin.waiting_age)
        delayed = await part("delayed", lambda: admin.delayed_tasks(SHOWN))
        workflows = await part("workflows", lambda: admin.workflows(SHOWN))
        snapshot: dict[str, Any] = {
            "group": self.group, "queue": self.queue, "at": now, "errors": errors,
        }  # fmt: skip
        if info is not None:
            snapshot.update(_overview(info))
        snapshot["timings"] = _timings(stats) if stats is not None else None
        snapshot["delayed_tasks"] = [
            {"id": d.id, "task": d.task, "due_at": d.due_at, "attempt": d.attempt,
             "problem": d.problem}
            for d in delayed or ()
        ]  # fmt: skip
        snapshot["workflows"] = [_workflow(w) for w in workflows or ()]
        self._series.append((now, self._throughput(now, stats), age))
        snapshot["series"] = {
            "t": [t for t, _, _ in self._series],
            "throughput": [r for _, r, _ in self._series],
            "pickup": [a for _, _, a in self._series],
        }
        self.version += 1
        snapshot["version"] = self.version
        self.latest = snapshot
        self._changed.set()
        self._changed = trio.Event()

    def _throughput(self, now: float, stats: GroupStats | None) -> float | None:
        """Tasks finished per second since the previous sample, from the window's counts
        (a new window starts its counts from 0: the count then is all new)."""
        if stats is None:
            return None
        finished = sum(t.count for t in stats.tasks.values())
        previous, self._finished = self._finished, (now, finished)
        if previous is None or now <= previous[0]:
            return None
        done = finished - previous[1] if finished >= previous[1] else finished
        return done / (now - previous[0])


def _overview(info: Any) -> dict[str, Any]:
    pending = dict(info.pending)

    def in_flight(instance: str) -> int:
        return sum(n for c, n in pending.items() if c == instance or c.startswith(instance + "/"))

    return {
        "counts": {
            "queue": info.queue_length,
            "pending": sum(pending.values()),
            "delayed": info.delayed,
            "dead": info.dead_letters,
            "quarantined": info.quarantined,
            "workflows": info.workflows,
        },
        "oldest_workflow_at": info.oldest_workflow_at,
        "lanes": dict(info.lanes),
        "leader": info.leader,
        "paused_since": info.paused_since,
        "capacity_decision": info.capacity.get("value"),
        "instances": [
            {
                "id": i.id,
                "host": i.host,
                "pid": i.pid,
                "capacity": i.capacity,
                "in_flight": in_flight(i.id),
                "leader": i.leader,
                "last_seen": i.last_seen,
            }
            for i in info.instances
        ],
        "running": [
            {
                "id": r.id,
                "task": r.task,
                "instance": r.instance,
                "attempt": r.attempt,
                "progress": r.progress,
                "message": r.progress_message,
                "started_at": r.started_at,
            }
            for r in info.running
        ],
    }


def _workflow(live: LiveWorkflow) -> dict[str, Any]:
    """A live workflow as the group page lists it (what cannot be read: with why)."""
    shown: dict[str, Any] = {
        "id": live.id, "dispatched_at": live.dispatched_at, "problem": live.problem,
    }  # fmt: skip
    status = live.status
    if status is not None:
        shown.update(
            name=status.name, state=status.state.value, steps=status.steps,
            ended=status.succeeded + status.failed + status.cancelled, live=status.live,
            failed=status.failed,
        )  # fmt: skip
    return shown


def _timings(stats: GroupStats) -> dict[str, Any]:
    return {
        "window": stats.window,
        "throughput": stats.throughput,
        "tasks": [
            {
                "name": name,
                "count": t.count,
                "average": t.average,
                "p50": t.p50,
                "p95": t.p95,
                "p99": t.p99,
            }
            for name, t in sorted(stats.tasks.items())
        ],
    }
