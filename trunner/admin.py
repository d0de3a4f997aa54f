"""Inspection and administration of a consumer group: the values it returns.

Runners and producer-only clients return them (``trunner inspect`` and ``trunner
dead-letter`` show them).
"""

from __future__ import annotations

from ._wire.inspection import (
    CronEntry,
    DeadLetter,
    DelayedTask,
    GroupInfo,
    ReplayResult,
    as_dict,
)

__all__ = ["CronEntry", "DeadLetter", "DelayedTask", "GroupInfo", "ReplayResult", "as_dict"]
