"""The admin methods a runner and a client keep from before ``Admin``: each a one-line
delegation to their ``admin`` (the same methods, documented there)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from .._wire.quarantine import QuarantineRecord
from .._wire.stats import GroupStats, InstanceInfo
from ..admin import Admin, CronEntry, DeadLetter, DelayedTask, GroupInfo, ReplayResult

__all__ = ["AdminCalls"]


class AdminCalls:
    """Every method of [``Admin``][trunner.admin.Admin], on a runner or a client, delegated to
    its ``admin``."""

    @property
    def admin(self) -> Admin:
        """The admin of the group."""
        raise NotImplementedError

    async def queue_length(self) -> int:
        """Same as [``admin.queue_length``][trunner.admin.Admin.queue_length]."""
        return await self.admin.queue_length()

    async def lane_lengths(self) -> dict[str, int]:
        """Same as [``admin.lane_lengths``][trunner.admin.Admin.lane_lengths]."""
        return await self.admin.lane_lengths()

    async def pending_count(self) -> int:
        """Same as [``admin.pending_count``][trunner.admin.Admin.pending_count]."""
        return await self.admin.pending_count()

    async def delayed_count(self) -> int:
        """Same as [``admin.delayed_count``][trunner.admin.Admin.delayed_count]."""
        return await self.admin.delayed_count()

    async def dead_letter_count(self) -> int:
        """Same as [``admin.dead_letter_count``][trunner.admin.Admin.dead_letter_count]."""
        return await self.admin.dead_letter_count()

    async def waiting_age(self) -> float | None:
        """Same as [``admin.waiting_age``][trunner.admin.Admin.waiting_age]."""
        return await self.admin.waiting_age()

    async def group_stats(self) -> GroupStats:
        """Same as [``admin.group_stats``][trunner.admin.Admin.group_stats]."""
        return await self.admin.group_stats()

    async def instances(self) -> list[InstanceInfo]:
        """Same as [``admin.instances``][trunner.admin.Admin.instances]."""
        return await self.admin.instances()

    async def inspect(self) -> GroupInfo:
        """Same as [``admin.inspect``][trunner.admin.Admin.inspect]."""
        return await self.admin.inspect()

    async def pause(self) -> bool:
        """Same as [``admin.pause``][trunner.admin.Admin.pause]."""
        return await self.admin.pause()

    async def resume(self) -> bool:
        """Same as [``admin.resume``][trunner.admin.Admin.resume]."""
        return await self.admin.resume()

    async def dead_letters(self, count: int = 100, start: str = "-") -> list[DeadLetter]:
        """Same as [``admin.dead_letters``][trunner.admin.Admin.dead_letters]."""
        return await self.admin.dead_letters(count, start)

    async def dead_letters_newest(self, count: int = 100, end: str = "+") -> list[DeadLetter]:
        """Same as [``admin.dead_letters_newest``][trunner.admin.Admin.dead_letters_newest]."""
        return await self.admin.dead_letters_newest(count, end)

    async def replay_dead_letters(
        self, ids: Sequence[str] | None = None, *, task: str | None = None
    ) -> ReplayResult:
        """Same as [``admin.replay_dead_letters``][trunner.admin.Admin.replay_dead_letters]."""
        return await self.admin.replay_dead_letters(ids, task=task)

    async def delete_dead_letters(
        self, ids: Sequence[str] | None = None, *, task: str | None = None
    ) -> int:
        """Same as [``admin.delete_dead_letters``][trunner.admin.Admin.delete_dead_letters]."""
        return await self.admin.delete_dead_letters(ids, task=task)

    async def purge_dead_letters(self) -> int:
        """Same as [``admin.purge_dead_letters``][trunner.admin.Admin.purge_dead_letters]."""
        return await self.admin.purge_dead_letters()

    async def delayed_tasks(self, count: int = 50, offset: int = 0) -> list[DelayedTask]:
        """Same as [``admin.delayed_tasks``][trunner.admin.Admin.delayed_tasks]."""
        return await self.admin.delayed_tasks(count, offset)

    async def cron_entries(self) -> list[CronEntry]:
        """Same as [``admin.cron_entries``][trunner.admin.Admin.cron_entries]."""
        return await self.admin.cron_entries()

    async def quarantined(self, count: int = 100, start: str = "-") -> list[QuarantineRecord]:
        """Same as [``admin.quarantined``][trunner.admin.Admin.quarantined]."""
        return await self.admin.quarantined(count, start)

    async def quarantine_count(self) -> int:
        """Same as [``admin.quarantine_count``][trunner.admin.Admin.quarantine_count]."""
        return await self.admin.quarantine_count()

    async def purge_quarantine(self) -> int:
        """Same as [``admin.purge_quarantine``][trunner.admin.Admin.purge_quarantine]."""
        return await self.admin.purge_quarantine()

    async def stats(self) -> GroupStats:
        """Deprecated alias of ``group_stats`` (removed in the next release)."""
        warnings.warn(
            "stats() is deprecated, use group_stats(): the group's statistics, not to be "
            "confused with statistics(), this instance's",
            DeprecationWarning,
            stacklevel=2,
        )
        return await self.admin.group_stats()
