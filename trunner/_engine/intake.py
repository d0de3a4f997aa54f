"""The pool's intake turns each entry a read or claim returned into a :class:`Job`: decoded
in one pass when it has the usual shape, checked field by field (and refused with the
reason) when it does not, with its task and heartbeat interval looked up once per name.
"""

from __future__ import annotations

import attrs

from .._redis import RawEntry
from .._task import Task
from .._wire.decode import (
    Fields,
    MessageDecodeError,
    addressed_group,
    decode_fields,
    decode_message,
    fields_of,
)
from .._wire.envelope import message_growth
from .._wire.marks import GIVEN_UP, split_deliveries
from .._wire.workflow import workflow_mark
from ..config import RunnerConfig
from ..registry import TaskRegistry
from .holdings import Job, beat_interval

__all__ = ["FOREIGN_SLACK", "Intake"]

#: How much larger than this runner reads a message may be for the pool to look whether it
#: is another group's (whose runners may allow a little more: a longer group name).
FOREIGN_SLACK = 64 * 1024


class Intake:
    """Makes the pool's jobs (see the module docs)."""

    def __init__(
        self, registry: TaskRegistry, config: RunnerConfig, cancel_marks: dict[str, int]
    ) -> None:
        self._registry = registry
        self._reclaim_delay = config.reclaim_delay
        self._cancel_marks = cancel_marks
        self._infos: dict[str, tuple[Task | None, float]] = {}  # see _task_info
        self._group = config.consumer_group
        #: The largest message read: retries and replays grow a bit.
        self._max_bytes = config.max_payload_bytes + message_growth(config.consumer_group)

    def _task_info(self, name: str) -> tuple[Task | None, float]:
        """The registered task of that name (or None) and its heartbeat interval."""
        info = self._infos.get(name)
        if info is None:
            task = self._registry.get(name) if name in self._registry else None
            info = (task, beat_interval(task, self._reclaim_delay))
            if task is not None:  # unknown names are not remembered: they are unbounded
                self._infos[name] = info
        return info

    def make(self, entry: RawEntry, consumer: str, now: float) -> Job:
        message_id, deliveries = entry.message_id, entry.deliveries
        given_up, marked = False, 0
        if deliveries >= GIVEN_UP:
            marked = deliveries
            deliveries, given_up = split_deliveries(deliveries)
        max_bytes = self._max_bytes
        fields = decode_fields(message_id, entry.fields, deliveries, max_bytes, self._group)
        if fields is not None:
            task, interval = self._task_info(fields[0])
            job = Job(consumer, interval, now + interval, message_id, deliveries, task, fields)
            job.given_up, job.marked_count = given_up, marked
            if self._cancel_marks and is_cancelled(fields, self._cancel_marks, self._group):
                job.cancel_requested = True  # cancelled before it was fetched here
            return job
        # Not the usual shape: checked field by field, and refused with the reason.
        error = None
        try:
            message = decode_message(
                message_id, entry.fields, deliveries=deliveries, max_bytes=max_bytes
            )
        except MessageDecodeError as exc:
            message, error = exc.message, exc  # its stand-in has no task name: no task
            # Another group's, whatever is wrong with it, is not ours to say (looked for
            # only in a message of about the size a runner reads: parsing one of any size
            # would stall the event loop).
            group = None
            if len(message.raw) <= max_bytes + FOREIGN_SLACK:
                group = addressed_group(message.raw)
            if group is not None and group != self._group:
                error = None
                message = attrs.evolve(message, group=group)
        task, interval = self._task_info(message.task_name)
        foreign = message.group is not None and message.group != self._group
        cancelled = bool(
            not foreign
            and error is None
            and is_cancelled(fields_of(message), self._cancel_marks, self._group)
        )  # cancelled before it was fetched here
        return Job(
            consumer,
            interval,
            now + interval,
            message_id,
            deliveries,
            task,
            fields_of(message),
            error,
            given_up=given_up,
            marked_count=marked,
            foreign=foreign,
            cancel_requested=cancelled,
            message=message,
        )


def is_cancelled(fields: Fields, marks: dict[str, int], group: str) -> bool:
    """Whether the message of ``fields`` is cancelled: its task has a cancel mark, or, for
    a step of a workflow of ``group``, its workflow (failing, or cancelled as a whole)."""
    if fields[4] in marks:
        return True
    options = fields[8]
    flow = options.workflow if options is not None else None
    return flow is not None and workflow_mark(group, flow.workflow) in marks
