"""The public path of what task code sees of one delivery of a task:
:class:`TaskMessage`, and the options a dispatch asked for (defined in
``trunner._wire.message``, beside the stored form they are read from)."""

from ._wire.message import DEFAULT_UNIQUE_FOR, NO_OPTIONS, MessageOptions, TaskMessage

__all__ = ["DEFAULT_UNIQUE_FOR", "NO_OPTIONS", "MessageOptions", "TaskMessage"]
