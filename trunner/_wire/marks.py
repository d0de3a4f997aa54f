"""The marks trunner keeps in Redis's own state: the given-up mark added to a pending
entry's delivery count, and how long a task's cancel mark lives."""

from __future__ import annotations

__all__ = ["GIVEN_UP", "MARK_LIFETIME", "split_deliveries"]

#: Added to the delivery count of a pending message that was given up but not
#: dead-lettered (its failed-task handler raised, or a shutdown cut it off): its next
#: delivery calls the handler again and never runs the task, however few times it was
#: delivered (a run lost to a crash runs again: see ``Task.max_redeliveries``).
GIVEN_UP = 1_000_000


def split_deliveries(count: int) -> tuple[int, bool]:
    """A pending entry's delivery count as Redis keeps it: (deliveries, given up)."""
    if count < GIVEN_UP:
        return count, False
    return max(count % GIVEN_UP, 1), True


#: How long a cancel mark holds (seconds): far longer than a message can wait to be
#: reclaimed; the mark goes earlier when the task's cancelled outcome is written.
MARK_LIFETIME = 24 * 3600.0
