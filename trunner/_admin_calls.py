"""The admin methods a runner and a client keep from before ``Admin``: each a deprecated
one-line delegation to their ``admin`` (the same methods, documented there)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import ClassVar

from ._wire.quarantine import QuarantineRecord
from ._wire.stats import GroupStats, InstanceInfo
from .admin import Admin, CronEntry, DeadLetter, DelayedTask, GroupInfo, ReplayResult

__all__ = ["AdminCalls"]


class AdminCalls:
    """Every method of [``Admin``][trunner.admin.Admin], on a runner or a client, delegated to
    its ``admin`` with a ``DeprecationWarning`` (removed in the next release): the
    signatures stay, so that type checkers still accept the old calls."""

    #: How the warnings name the object: ``runner`` or ``client``.
    _called: ClassVar[str]

    @property
    def admin(self) -> Admin:
        """The admin of the group."""
        raise NotImplementedError

    def _moved(self, name: str) -> Admin:
        """Warn that ``name`` is the admin's now (at the caller of the delegation), and
        return the admin."""
        warnings.warn(
            f"{self._called}.{name}() is deprecated, use {self._called}.admin.{name}()",
            DeprecationWarning,
            stacklevel=3,
        )
        return self.admin

    async def queue_length(self) -> int:
        """Deprecated: use [``admin.queue_length``][trunner.admin.Admin.queue_length]."""
        return await self._moved("queue_length").queue_length()

    async def lane_lengths(self) -> dict[str, int]:
        """Deprecated: use [``admin.lane_lengths``][trunner.admin.Admin.lane_lengths]."""
        return await self._moved("lane_lengths").lane_lengths()

    async def pending_count(self) -> int:
        """Deprecated: use [``admin.pending_count``][trunner.admin.Admin.pending_count]."""
        return await self._moved("pending_count").pending_count()

    async def delayed_count(self) -> int:
        """Deprecated: use [``admin.delayed_count``][trunner.admin.Admin.delayed_count]."""
        return await self._moved("delayed_count").delayed_count()

    async def dead_letter_count(self) -> int:
        """Deprecated: use [``admin.dead_letter_count``][trunner.admin.Admin.dead_letter_count]."""
        return await self._moved("dead_letter_count").dead_letter_count()

    async def waiting_age(self) -> float | None:
        """Deprecated: use [``admin.waiting_age``][trunner.admin.Admin.waiting_age]."""
        return await self._moved("waiting_age").waiting_age()

    async def group_stats(self) -> GroupStats:
        """Deprecated: use [``admin.group_stats``][trunner.admin.Admin.group_stats]."""
        return await self._moved("group_stats").group_stats()

    async def instances(self) -> list[InstanceInfo]:
        """Deprecated: use [``admin.instances``][trunner.admin.Admin.instances]."""
        return await self._moved("instances").instances()

    async def inspect(self) -> GroupInfo:
        """Deprecated: use [``admin.inspect``][trunner.admin.Admin.inspect]."""
        return await self._moved("inspect").inspect()

    async def pause(self) -> bool:
        """Deprecated: use [``admin.pause``][trunner.admin.Admin.pause]."""
        return await self._moved("pause").pause()

    async def resume(self) -> bool:
        """Deprecated: use [``admin.resume``][trunner.admin.Admin.resume]."""
        return await self._moved("resume").resume()

    async def dead_letters(self, count: int = 100, start: str = "-") -> list[DeadLetter]:
        """Deprecated: use [``admin.dead_letters``][trunner.admin.Admin.dead_letters]."""
        return await self._moved("dead_letters").dead_letters(count, start)

    async def dead_letters_newest(self, count: int = 100, end: str = "+") -> list[DeadLetter]:
        """Deprecated: use
        [``admin.dead_letters_newest``][trunner.admin.Admin.dead_letters_newest]."""
        return await self._moved("dead_letters_newest").dead_letters_newest(count, end)

    async def replay_dead_letters(
        self, ids: Sequence[str] | None = None, *, task: str | None = None
    ) -> ReplayResult:
        """Deprecated: use
        [``admin.replay_dead_letters``][trunner.admin.Admin.replay_dead_letters]."""
        return await self._moved("replay_dead_letters").replay_dead_letters(ids, task=task)

    async def delete_dead_letters(
        self, ids: Sequence[str] | None = None, *, task: str | None = None
    ) -> int:
        """Deprecated: use
        [``admin.delete_dead_letters``][trunner.admin.Admin.delete_dead_letters]."""
        return await self._moved("delete_dead_letters").delete_dead_letters(ids, task=task)

    async def purge_dead_letters(self) -> int:
        """Deprecated: use
        [``admin.purge_dead_letters``][trunner.admin.Admin.purge_dead_letters]."""
        return await self._moved("purge_dead_letters").purge_dead_letters()

    async def delayed_tasks(self, count: int = 50, offset: int = 0) -> list[DelayedTask]:
        """Deprecated: use [``admin.delayed_tasks``][trunner.admin.Admin.delayed_tasks]."""
        return await self._moved("delayed_tasks").delayed_tasks(count, offset)

    async def cron_entries(self) -> list[CronEntry]:
        """Deprecated: use [``admin.cron_entries``][trunner.admin.Admin.cron_entries]."""
        return await self._moved("cron_entries").cron_entries()

    async def quarantined(self, count: int = 100, start: str = "-") -> list[QuarantineRecord]:
        """Deprecated: use [``admin.quarantined``][trunner.admin.Admin.quarantined]."""
        return await self._moved("quarantined").quarantined(count, start)

    async def quarantine_count(self) -> int:
        """Deprecated: use [``admin.quarantine_count``][trunner.admin.Admin.quarantine_count]."""
        return await self._moved("quarantine_count").quarantine_count()

    async def purge_quarantine(self) -> int:
        """Deprecated: use [``admin.purge_quarantine``][trunner.admin.Admin.purge_quarantine]."""
        return await self._moved("purge_quarantine").purge_quarantine()

    async def stats(self) -> GroupStats:
        """Deprecated alias of ``group_stats`` (removed in the next release)."""
        warnings.warn(
            f"{self._called}.stats() is deprecated, use {self._called}.admin.group_stats(): "
            "the group's statistics, not to be confused with statistics(), this instance's",
            DeprecationWarning,
            stacklevel=2,
        )
        return await self.admin.group_stats()
