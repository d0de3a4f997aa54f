"""The stream operations of one consumer group, as typed Trio calls: :class:`Broker`, one
mixin per concern over :class:`~._base.BrokerBase`.

Each state transition of a message is one command or one script (``lua/``), and every key a
script touches is passed in KEYS (all in the group's hash slot).
"""

from __future__ import annotations

from ..transports.resp import RawEntry
from ._base import (
    MAX_ADMITS_PER_CALL,
    MAX_AHEAD_MS,
    MAX_IDS_PER_CALL,
    RELEASED_IDLE_MS,
    AckRecord,
    Admit,
    BadValue,
    Delivery,
    Leader,
    Owner,
    Record,
    Slot,
)
from .acks import Acks
from .chores import Chores
from .consume import Consume
from .dead import Dead
from .inspect import GroupProgress, Inspection, TaskLook, delete_prefixed
from .limits import Limits
from .members import Members
from .produce import Produce
from .setup import Setup
from .signals import Signals
from .workflow_views import MarksLook, WorkflowViews
from .workflows import StepEnd, StepKind, WorkflowLook, WorkflowSweep

__all__ = [
    "MAX_ADMITS_PER_CALL",
    "MAX_AHEAD_MS",
    "MAX_IDS_PER_CALL",
    "RELEASED_IDLE_MS",
    "AckRecord",
    "Admit",
    "BadValue",
    "Broker",
    "Delivery",
    "GroupProgress",
    "Leader",
    "MarksLook",
    "Owner",
    "RawEntry",
    "Record",
    "Slot",
    "StepEnd",
    "StepKind",
    "TaskLook",
    "WorkflowLook",
    "WorkflowSweep",
    "delete_prefixed",
]


class Broker(
    Setup, Produce, Consume, Acks, Limits, Signals, Chores, Members, Dead, Inspection, WorkflowViews
):
    """The group ``keys.group`` on ``transport``: its state transitions, one concern per
    mixin (:mod:`.setup`, :mod:`.produce`, :mod:`.consume`, :mod:`.acks` over
    :mod:`.workflows`, :mod:`.limits`, :mod:`.signals`, :mod:`.chores`, :mod:`.members`,
    :mod:`.dead`), and its read-only
    queries (:class:`~trunner._redis.broker.inspect.Inspection`, and of workflows
    :class:`~trunner._redis.broker.workflow_views.WorkflowViews`).

    ``lanes``: the priority lanes it reads, highest first (see [Priority
    lanes](lanes.md)). Ids in and out are trunner's entry ids (``<stream id>@<lane>``
    in a lane other than the default, :func:`~trunner._wire.keys.entry_id`); each call goes to
    the stream of its ids' lane, one script call per lane.
    """
