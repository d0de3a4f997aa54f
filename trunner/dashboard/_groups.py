"""The groups a dashboard shows: found on Redis (and found again now and then), each
watched by a client and a sampler for the app's lifetime."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from urllib.parse import quote

import trio

from trunner import TaskRegistry, TrunnerError, open_client, redact_url
from trunner.admin import FoundGroup, GroupsFound, discover_groups
from trunner.errors import RedisCommandError

from ._sampler import Sampler

__all__ = ["DISCOVER_INTERVAL", "MAX_GROUPS", "Dashboard", "label_of", "path_of"]

logger = logging.getLogger("trunner.dashboard")

#: Seconds between two discoveries of the groups (a ``SCAN`` of the database: see
#: ``trunner._discovery`` for its cost).
DISCOVER_INTERVAL = 60.0
#: The most groups a dashboard shows (each has a client and a sampler).
MAX_GROUPS = 100


def path_of(target: FoundGroup) -> str:
    """The path of a group's page: ``/group/<group>`` for a group reading the queue of its
    own name, else ``/queue/<queue>/group/<group>`` (quoted as the pages' links are)."""
    if target.own_queue:
        return f"/group/{quote(target.group)}"
    return f"/queue/{quote(target.queue)}/group/{quote(target.group)}"


def _narrowed(found: Sequence[FoundGroup], names: Sequence[str]) -> list[FoundGroup]:
    """The groups of ``found`` named in ``names`` (on whichever queue), and, for each name
    found on none, the group of that name on the queue of its own name."""
    shown: list[FoundGroup] = []
    for name in names:
        shown.extend([f for f in found if f.group == name] or [FoundGroup(name, name)])
    return shown


def label_of(target: FoundGroup) -> str:
    """How the pages name a group: its name, and the queue it reads if another's."""
    return target.group if target.own_queue else f"{target.group} (queue {target.queue})"


class Dashboard:
    """The state of one dashboard app: the groups it shows, their clients and samplers."""

    def __init__(
        self,
        redis_url: str,
        groups: Sequence[str],
        *,
        prefix: str,
        tasks: TaskRegistry | None,
        interval: float,
        discover_interval: float = DISCOVER_INTERVAL,
    ) -> None:
        self.redis_url = redis_url
        self.shown_url = redact_url(redis_url)
        self.names = list(dict.fromkeys(groups))
        """The groups named (``--group``); none: every group found."""
        self.prefix = prefix
        self.tasks = tasks
        self.interval = interval
        self.discover_interval = discover_interval
        self.samplers: dict[FoundGroup, Sampler] = {}
        self.found: GroupsFound | None = None
        """The last discovery's result (None before the first, or when it failed)."""
        self.found_at: float | None = None
        self.discovery_error: str | None = None
        self.left_out = 0
        """Groups found but not shown: beyond :data:`MAX_GROUPS`."""
        self._nursery: trio.Nursery | None = None
        self.started = False
        """Whether its startup (the lifespan's: finding the groups, opening their clients)
        is done and the app not stopped."""
        self._discovering = trio.Lock()

    @property
    def in_lifespan(self) -> bool:
        """Whether its lifespan runs (its startup may not be done: see ``started``)."""
        return self._nursery is not None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Find the groups, and open a client and a sampler per group, for the app's
        lifetime; look for new groups every ``discover_interval`` seconds."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                await self.discover(starting=True)
                nursery.start_soon(self._rediscover)
                self.started = True
                yield
            finally:
                self.started = False
                nursery.cancel_scope.cancel()
                self._nursery = None
                self.samplers.clear()

    async def _rediscover(self) -> None:
        while True:
            await trio.sleep(self.discover_interval)
            await self.discover()

    async def discover(self, *, starting: bool = False) -> list[FoundGroup]:
        """Look for the groups now (``SCAN``, see ``trunner._discovery``) and start showing
        those not shown yet; return them. A group shown stays shown.

        The groups named (``--group``) are narrowed to: each on the queues it was found
        reading, else on the queue of its own name. When discovery fails, the groups
        named are shown on their own queues; with none named, it raises at start and is
        logged later.
        """
        async with self._discovering:
            try:
                found = await discover_groups(self.redis_url, prefix=self.prefix)
            except TrunnerError as exc:
                self.discovery_error = f"{type(exc).__name__}: {exc}"
                if starting and not self.names:
                    if isinstance(exc, RedisCommandError):  # SCAN refused (an ACL ...)
                        raise RedisCommandError(
                            f"cannot list the groups on {self.shown_url}: {exc}; name them "
                            "(--group, or create_app's groups)"
                        ) from exc
                    raise
                logger.warning("dashboard: looking for groups failed: %s", exc)
                wanted = [FoundGroup(name, name) for name in self.names]
            else:
                self.found, self.found_at, self.discovery_error = found, time.time(), None
                if not found.complete:
                    logger.warning(
                        "dashboard: the scan for groups stopped at its bound: some may be "
                        "missing (name them with --group)"
                    )
                wanted = _narrowed(found.groups, self.names) if self.names else found.groups
            new = [w for w in wanted if w not in self.samplers]
            room = max(0, MAX_GROUPS - len(self.samplers))
            self.left_out = max(0, len(new) - room)
            for target in new[:room]:
                await self._show(target, starting=starting)
            return new[:room]

    async def _show(self, target: FoundGroup, *, starting: bool) -> None:
        assert self._nursery is not None
        try:
            sampler = await self._nursery.start(self._watch, target)
        except TrunnerError as exc:  # Redis gone meanwhile: tried again at the next round
            if starting:
                raise
            logger.warning("dashboard: cannot show group %s: %s", label_of(target), exc)
            return
        self.samplers[target] = sampler

    async def _watch(self, target: FoundGroup, *, task_status: trio.TaskStatus[Sampler]) -> None:
        async with open_client(
            self.redis_url, target.queue, group=target.group, prefix=self.prefix, tasks=self.tasks
        ) as client:
            sampler = Sampler(client, self.interval)
            async with trio.open_nursery() as nursery:
                await nursery.start(sampler.run)
                task_status.started(sampler)
