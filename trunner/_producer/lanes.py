"""Which priority lanes a producer may dispatch to: its own, and those the queue's
registry of lanes names (see [Priority lanes](lanes.md))."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

from .._redis import Broker
from .._task import Task
from .._wire.names import DEFAULT_LANE
from ..registry import TaskRegistry

__all__ = ["LaneBook"]


class LaneBook:
    """The lanes a producer knows are declared, and the check of a dispatch's lane.

    ``registry``: the producer's tasks (their ``priority`` is declared); ``lanes``: a
    runner's ``RunnerConfig.lanes``, when it declares any (with its tasks' lanes, the only
    lanes it dispatches to); None: a client, or a runner of the default lane alone (it
    also accepts the queue's registered lanes).
    """

    def __init__(self, registry: TaskRegistry | None, lanes: Sequence[str] | None) -> None:
        self._registry = registry
        #: The lanes other than the default this producer knows are in the queue's
        #: registry of lanes: it named them there, or read them there (see :meth:`declare`).
        self._declared: set[str] = set()
        self._config_lanes = frozenset(lanes) if lanes is not None else None

    def remember(self, lanes: Iterable[str]) -> None:
        """``lanes`` are in the queue's registry of lanes (a runner named them at start)."""
        self._declared.update(lanes)

    def own(self, task: Task | None = None) -> set[str]:
        """The lanes this producer declares itself: a runner's ``RunnerConfig.lanes``, and
        the ``priority`` of each task of its registry (cron ticks go there too), and of
        ``task`` (a ``Task`` dispatched by a client without a registry)."""
        own = set(self._config_lanes or ())
        own.update(known.priority for known in self._registry or ())
        if task is not None:
            own.add(task.priority)
        return own

    async def check(self, broker: Broker, lane: str, task: Task | None) -> None:
        """Refuse ``lane`` unless it is declared: before the dispatch hooks run or anything
        is written.

        Declared: ``default``; a runner's ``RunnerConfig.lanes``; the ``priority`` of a
        task of this producer's registry, or of ``task`` (the task dispatched); and,
        unless this producer is a runner that declares lanes, a lane the queue's registry
        names (what the runners reading it registered when they started). That registry
        is read only for a lane not known yet (the lanes found there are kept), so a
        dispatch to a known lane costs no round trip."""
        if lane == DEFAULT_LANE or lane in self._declared:
            return
        own = self.own(task)
        if lane in own:
            return  # named in the registry by declare, just before the task is written
        registered: list[str] = []
        if self._config_lanes is None:
            registered = [name for name in await broker.known_lanes() if name != DEFAULT_LANE]
            self._declared.update(registered)
            if lane in registered:
                return
        raise ValueError(self._undeclared(broker, lane, own, registered))

    async def declare(self, broker: Broker, lane: str) -> None:
        """Name ``lane`` (checked by :meth:`check`) in the queue's registry of lanes the
        first time this producer writes to it (just before: a failure writes no task), so
        that ``inspect`` and the queue length count it even before a runner reads it."""
        if lane != DEFAULT_LANE and lane not in self._declared:
            await broker.declare_lanes([lane])
            self._declared.add(lane)

    def _undeclared(self, broker: Broker, lane: str, own: set[str], registered: list[str]) -> str:
        """Why ``lane`` is refused, what is known, and how to declare it."""
        known = [DEFAULT_LANE, *sorted((own | set(registered)) - {DEFAULT_LANE})]
        if self._config_lanes is not None:
            why = "neither this runner's RunnerConfig.lanes nor its tasks' priorities name it"
        elif self._registry is not None:
            why = "no task of this client's registry and no runner of the queue declares it"
        else:
            why = "no runner of the queue registered it (a client without tasks= knows no more)"
        close = difflib.get_close_matches(lane, known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return (
            f"priority {lane!r} is not a declared lane of queue {broker.keys.queue!r}{hint}: "
            f"{why}; the known lanes are {', '.join(map(repr, known))}. A task dispatched "
            f"there would wait for ever. Check the spelling, or declare the lane: in "
            f"RunnerConfig.lanes of the runners that are to read it (they register it when "
            f"they start), or as a task's priority (@tasks.task(priority={lane!r}), in the "
            f"registry of the runner or of open_client(tasks=...); on the command line, "
            f"--tasks MODULE:settings)"
        )
