"""What task code sees of one delivery of a task: :class:`TaskMessage`, and the options a
dispatch asked for.

The stored form of a message, its codec and its checks are beside it in ``trunner._wire``
(``envelope``, ``decode``, ``headers``); ``trunner.message`` is its public path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .headers import NO_HEADERS, read_only
from .names import DEFAULT_LANE
from .workflow import StepRef

__all__ = ["DEFAULT_UNIQUE_FOR", "NO_OPTIONS", "MessageOptions", "TaskMessage"]

#: The lock time-to-live (seconds) of a unique message that does not say its own
#: ``unique_for`` (written before the field existed), when it is replayed from the dead
#: letters by a client that does not know the task.
DEFAULT_UNIQUE_FOR = 3600.0


@attrs.frozen
class MessageOptions:
    """What one dispatch asked for, beyond its task's defaults (None: the task's)."""

    keep_result: float | None = None
    """Keep the outcome this many seconds after the task finished."""
    timeout: float | None = None
    """Each attempt may run this many seconds; then it fails with ``TaskTimeout``."""
    expires: float | None = None
    """Not started by then (seconds since the epoch): dropped, with the outcome ``expired``."""
    workflow: StepRef | None = None
    """The workflow step this message is (workflows are being built: nothing sets it yet)."""


#: The options of a message that has none.
NO_OPTIONS = MessageOptions()


@attrs.frozen
class TaskMessage:
    """One delivery of a task, as task code and the failed-task handler see it.

    Task code gets it from [``current_message``][trunner.current_message]; the
    failed-task handler gets it as its first argument.
    """

    message_id: str
    """The stream entry id of this delivery. It is different for each retry."""
    task_name: str
    """The task name; ``""`` when the entry could not be decoded."""
    payload: Any
    """The decoded payload given to the task's action; ``None`` when undecodable."""
    attempt: int
    """Which attempt this is, from 1: a failed attempt's retry is the next one. A run lost
    without an outcome (its worker crashed) is run again as the same attempt: see
    ``deliveries``."""
    enqueued_at: float
    """When the task was first dispatched, in seconds since the epoch: for a delayed task,
    when it was scheduled; for a cron task, the tick. ``0.0`` when undecodable."""
    task_id: str
    """The task's stable id across retries: the first entry's stream id for ``dispatch``;
    the id returned by ``dispatch_delayed`` / ``schedule_for``; ``cron:<schedule
    name>:<tick in ms>`` for a cron tick."""
    deliveries: int = 1
    """How many times this stream entry has been delivered to a consumer: more than 1
    when earlier runs of this attempt were lost without an outcome (their worker crashed,
    was killed, or stalled past ``reclaim_delay``), bounded by the task's
    ``max_redeliveries``."""
    raw: bytes = attrs.field(default=b"", repr=False)
    """The entry's ``payload`` field exactly as stored (not shown in ``repr``)."""
    unique_key: str | None = None
    """For a [unique task](unique-tasks.md): its key
    ([``Task.key_for(payload)``][trunner.Task.key_for]), whose lock is released when the
    task finishes. ``None`` otherwise."""
    unique_token: str | None = attrs.field(default=None, repr=False)
    """For a unique task: the token its lock holds (not shown in ``repr``). ``None``
    otherwise."""
    options: MessageOptions = attrs.field(default=NO_OPTIONS, repr=False)
    """What the dispatch asked for beyond the task's defaults (``keep_result``,
    ``timeout``, ``expires``)."""
    headers: Mapping[str, str] = attrs.field(default=NO_HEADERS, converter=read_only, repr=False)
    """The message's headers (``str`` to ``str``, read-only), as the dispatch and its
    dispatch hooks set them (see [Middleware and headers](middleware.md)); the same for
    every attempt of the task. Empty for a message dispatched without any."""

    group: str | None = attrs.field(default=None, repr=False)
    """The one consumer group this message is for: set on what a group sends itself (its
    retries, its replayed dead letters, its cron ticks), which the other groups reading
    the same queue skip. ``None`` for a dispatch: every group reading the queue runs it
    (see [Queues and fan-out](queues.md))."""

    lane: str = attrs.field(default=DEFAULT_LANE, repr=False)
    """The priority lane of this delivery: the lane whose stream it was read from, which
    its id names (``"default"`` for a task dispatched without a priority). Its retries and
    deferrals go back to it (see [Priority lanes](lanes.md))."""

    def with_attempt(self, attempt: int) -> TaskMessage:
        """A copy with another ``attempt``."""
        return attrs.evolve(self, attempt=attempt)
