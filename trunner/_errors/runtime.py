"""The exceptions of what trunner runs on: data read from Redis that it did not write, a lost
reservation or leadership, the runner's and the elector's life, and Redis itself.

``trunner.errors`` is their public home: it re-exports them and draws the whole tree.
"""

from __future__ import annotations

from .calls import TrunnerError

__all__ = [
    "BackendError",
    "BadData",
    "Crashed",
    "ElectorCrashed",
    "LeadershipLost",
    "RedisCommandError",
    "RedisUnavailable",
    "ReservationLost",
    "RunnerAlreadyStarted",
    "RunnerCrashed",
    "RunnerNotRunning",
]


class BadData(TrunnerError):
    """A value trunner read from Redis (or a registered setting) is not what it wrote.

    The item was set aside with the reason (see
    [Bad data in Redis](reliability.md#bad-data-in-redis)): ``source`` names
    where it was read (``"delayed:unique"``, ``"metrics"``, ``"cron"`` ...), ``item`` which
    one (a task id, a field, a schedule), ``reason`` what is wrong with it.
    """

    def __init__(self, source: str, item: str, reason: str) -> None:
        super().__init__(f"bad data in {source} ({item!r:.120}): {reason}")
        self.source = source
        self.item = item
        self.reason = reason


class ReservationLost(TrunnerError):
    """A running task's message was claimed by another consumer: it may run twice.

    Reported through [``Runner.errors``][trunner.Runner.errors].
    """


class LeadershipLost(TrunnerError):
    """A leader-only (fenced) write was refused: the lease is not held; nothing was
    written.

    Raised by [``Elector.eval_fenced``][trunner.election.Elector.eval_fenced]. Inside a
    runner, a leader chore whose fenced write is refused gets it, and the runner steps
    down.
    """


class RunnerAlreadyStarted(TrunnerError, RuntimeError):
    """[``Runner.run``][trunner.Runner.run] was called on a runner that was started before
    (also a ``RuntimeError``)."""


class RunnerNotRunning(TrunnerError, RuntimeError):
    """The runner or client is not open (also a ``RuntimeError``).

    Raised by dispatching or inspecting through a runner before it started or after it
    stopped, or through a client after its block; by a Redis handle that is closed; and
    by [``current_message``][trunner.current_message] or
    [``current_runner``][trunner.current_runner] outside of a task.
    """


class Crashed(TrunnerError):
    """A background component failed; ``__cause__`` is the exception group of its errors.

    The base class of [``RunnerCrashed``][trunner.errors.RunnerCrashed] and
    [``ElectorCrashed``][trunner.errors.ElectorCrashed]. Raised as itself on leaving
    [``open_client``][trunner.open_client] or [``open_redis``][trunner.open_redis] when
    their Redis handle failed.
    """


class RunnerCrashed(Crashed):
    """A component of the runner failed: raised on leaving
    [``open_runner``][trunner.open_runner]. ``__cause__`` is the exception group."""


class ElectorCrashed(Crashed):
    """The elector's background task failed: raised on leaving
    [``open_elector``][trunner.election.open_elector]. ``__cause__`` is the exception
    group."""


class BackendError(TrunnerError):
    """A Redis operation failed: the base class of the two below."""


class RedisUnavailable(BackendError, ConnectionError):
    """Redis cannot be reached, the connection broke during a command, or no reply came
    within ``command_timeout`` / ``connect_timeout`` (also a ``ConnectionError``)."""


class RedisCommandError(BackendError):
    """Redis answered a command with an error (ACL, OOM, wrong type ...)."""
