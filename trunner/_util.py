"""Small shared pieces: the error log, retry backoff for loops, wall-clock time."""

from __future__ import annotations

import collections
import logging
import math
import os
import random
import re
import secrets
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

import trio

from .errors import GiveUp, TaskTimeout

__all__ = [
    "ErrorLog",
    "EventLog",
    "LoopBackoff",
    "connection_name",
    "instance_id",
    "leaf_exceptions",
    "logger",
    "process_tag",
    "run_in_background",
    "unwrap_single",
    "usable_cores",
    "user_stacklevel",
    "wall_ms",
]

T = TypeVar("T")

logger = logging.getLogger("trunner")


def unwrap_single(
    error: BaseException, body_error: BaseException | None = None
) -> BaseException | None:
    """What should leave a context manager whose nurseries raised ``error``.

    ``body_error`` (the exception of the caller's block), as itself, when ``error`` holds
    nothing else (nurseries wrap it, and may copy the groups they wrap); otherwise the one
    plain exception inside a chain of one-member groups; None when there are several.
    """
    if body_error is not None and _only_from(error, body_error):
        return body_error
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return None if isinstance(error, BaseExceptionGroup) else error


def _only_from(error: BaseException, source: BaseException) -> bool:
    """Whether every exception inside ``error`` is one of ``source``'s."""
    ours = {id(e) for e in leaf_exceptions(source)}
    return all(id(e) in ours for e in leaf_exceptions(error))


def leaf_exceptions(error: BaseException) -> Iterator[BaseException]:
    """The exceptions inside ``error``, with every exception group flattened away."""
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from leaf_exceptions(inner)
    else:
        yield error


def gives_up(failure: BaseException, give_up_on: tuple[type[BaseException], ...] = ()) -> bool:
    """Whether an attempt that raised ``failure`` gives its task up (no retry): a
    [``GiveUp``][trunner.GiveUp], or an exception of a ``give_up_on`` type — also inside an
    exception group (what a nursery in the task raises): a group gives up when it holds a
    ``GiveUp``, or when every exception in it is of a ``give_up_on`` type."""
    if isinstance(failure, BaseExceptionGroup):
        if failure.subgroup(GiveUp) is not None:
            return True
        return bool(give_up_on) and failure.split(give_up_on)[1] is None
    return isinstance(failure, GiveUp) or (bool(give_up_on) and isinstance(failure, give_up_on))


@asynccontextmanager
async def run_in_background(
    run: Callable[..., Awaitable[Any]],
    stop: Callable[[], None],
    crashed: Callable[[str], BaseException],
) -> AsyncIterator[None]:
    """Start ``run`` (Trio ``task_status`` style) for the block; call ``stop`` on the way out.

    Errors leave as the caller expects, never as an exception group that could hide one:
    an exception from the block leaves as itself; a start-up failure that is trunner's own
    error (say, Redis unreachable) as itself; any other failure of ``run`` as
    ``crashed(description)`` raised from the group. KeyboardInterrupt and the like pass.
    """
    body_error: BaseException | None = None
    started = False
    to_raise: BaseException
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(run)
            started = True
            try:
                yield
            except BaseException as exc:
                body_error = exc
                raise
            finally:
                stop()
        return
    except BaseExceptionGroup as group:
        to_raise = _select_error(group, body_error, started, crashed)
    raise to_raise


def _select_error(
    group: BaseExceptionGroup[BaseException],
    body_error: BaseException | None,
    started: bool,
    crashed: Callable[[str], BaseException],
) -> BaseException:
    from .errors import TrunnerError  # noqa: PLC0415 - errors imports nothing from here

    # The block's exception is a member of the nursery's group (possibly a copy, when it
    # is the caller's own exception group): set it apart before looking at the rest.
    others = [e for e in group.exceptions if body_error is None or not _only_from(e, body_error)]
    leaves = [leaf for e in others for leaf in leaf_exceptions(e)]
    if all(isinstance(e, trio.Cancelled) for e in leaves):
        return body_error if body_error is not None else group
    if any(not isinstance(e, Exception | trio.Cancelled) for e in leaves):
        return group  # KeyboardInterrupt, SystemExit ... pass through untouched
    if not started and len(leaves) == 1 and isinstance(leaves[0], TrunnerError):
        return leaves[0]  # start-up failed: e.g. RedisUnavailable, with its own message
    error = crashed("; ".join(map(repr, leaves)))
    error.__cause__ = group
    return error


def instance_id(host: str | None = None) -> str:
    """A name for this process among a group's instances: ``host:pid:random``.

    ``host`` defaults to the machine's host name, with whitespace and the hash-tag braces
    (which key names cannot hold) replaced by ``-``.
    """
    name = host or re.sub(r"[\s{}]+", "-", socket.gethostname()) or "host"
    return f"{name}:{os.getpid()}:{secrets.token_hex(3)}"


_process: tuple[int, str] = (0, "")


def process_tag() -> str:
    """This process among every process on a Redis server: ``<pid>.<6 hex digits>``.

    Drawn once per process (a forked child draws its own), so two processes never share
    one, even with the same pid in two containers.
    """
    global _process
    pid = os.getpid()
    if _process[0] != pid:
        _process = (pid, f"{pid}.{secrets.token_hex(3)}")
    return _process[1]


def connection_name(role: str) -> str:
    """The ``CLIENT SETNAME`` of trunner's connections in ``role``: ``<role>@<process tag>``
    (``trunner-client:emails@4242.a1b2c3``), so that ``CLIENT LIST`` tells which process
    opened a connection, and a leak check counts only its own process's."""
    return f"{role}@{process_tag()}"


def utc_text(seconds: float | None) -> str:
    """A time (seconds since the epoch) as ``YYYY-MM-DD HH:MM:SS`` in UTC, for people: ``-``
    for none (0, None, NaN, an infinity), ``?`` for one no calendar holds (a pause mark of
    twenty digits, which the runners accept, is that far out)."""
    import datetime  # noqa: PLC0415 - for the command and the dashboard only

    if not seconds or not math.isfinite(seconds):
        return "-"
    try:
        moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return "?"
    return moment.strftime("%Y-%m-%d %H:%M:%S")


async def timed(
    action: Callable[[Any], Awaitable[Any]], payload: Any, name: str, limit: float
) -> Any:
    """``await action(payload)`` under a cancel scope of ``limit`` seconds (a task's
    ``timeout``): past it, the attempt fails with ``TaskTimeout``, whether the cancellation
    ended it or it returned all the same (it swallowed or shielded the ``Cancelled``, or
    never reached a checkpoint): what it returned late is not its result. An ``Exception``
    raised once the timeout cancelled it (its clean-up failed) is that ``TaskTimeout``'s
    cause, not the attempt's failure."""
    with trio.move_on_after(limit) as scope:
        try:
            result = await action(payload)
        except Exception as exc:
            if scope.cancel_called:
                raise TaskTimeout(name, limit) from exc
            raise
    if scope.cancel_called or trio.current_time() >= scope.deadline:
        raise TaskTimeout(name, limit)
    return result


def wall_ms() -> int:
    """Milliseconds since the epoch (the clock delayed tasks are scored by)."""
    return int(time.time() * 1000)


class LoopBackoff:
    """Exponential backoff with jitter for a loop whose Redis call failed: 0.1 s .. 5 s."""

    def __init__(self, first: float = 0.1, cap: float = 5.0) -> None:
        self._first = first
        self._cap = cap
        self._next = first

    def reset(self) -> None:
        self._next = self._first

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._cap, self._next * 2)
        return delay * random.uniform(0.5, 1.0)


class EventLog(Generic[T]):
    """A bounded log of values, read as an async iterator, that never blocks its writer.

    The log keeps the newest ``maxlen`` values and counts the ones it had to drop because
    nobody was reading. Iteration ends once the log is closed and every value was read.
    """

    def __init__(self, maxlen: int = 1000) -> None:
        self._buffer: collections.deque[T] = collections.deque(maxlen=maxlen)
        self._lot = trio.lowlevel.ParkingLot()
        self._closed = False
        self.captured = 0
        self.dropped = 0

    def capture(self, value: T) -> None:
        self.captured += 1
        if len(self._buffer) == self._buffer.maxlen:
            self.dropped += 1
        self._buffer.append(value)
        self._lot.unpark_all()

    def close(self) -> None:
        self._closed = True
        self._lot.unpark_all()

    def __aiter__(self) -> AsyncIterator[T]:
        return _LogIterator(self)


#: Errors a runner captured, for ``Runner.errors()``.
ErrorLog = EventLog[BaseException]


class _LogIterator(Generic[T]):
    def __init__(self, log: EventLog[T]) -> None:
        self._log = log

    def __aiter__(self) -> _LogIterator[T]:
        return self

    async def __anext__(self) -> T:
        log = self._log
        await trio.lowlevel.checkpoint_if_cancelled()
        while not log._buffer:
            if log._closed:
                raise StopAsyncIteration
            await log._lot.park()
        value = log._buffer.popleft()
        await trio.lowlevel.cancel_shielded_checkpoint()
        return value


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning issued by the caller point at the first
    frame outside trunner (and outside generated code such as attrs' ``__init__``): the
    user's line, however deep in trunner the warning is issued."""
    frame = sys._getframe(1)  # the caller, which calls warnings.warn: stacklevel 1
    level = 1
    while frame.f_back is not None and (
        frame.f_code.co_filename.startswith(_PACKAGE_DIR) or frame.f_code.co_filename[:1] == "<"
    ):
        frame = frame.f_back
        level += 1
    return level


def usable_cores() -> int:
    """The CPUs this process may run on: its CPU set (``taskset``, a container's
    ``--cpuset-cpus``) where the system has one, else every CPU of the machine."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1
