"""Small shared pieces: the error log, retry backoff for loops, wall-clock time."""

from __future__ import annotations

import collections
import logging
import random
import time
from collections.abc import AsyncIterator, Iterator

import trio

__all__ = ["ErrorLog", "LoopBackoff", "leaf_exceptions", "logger", "wall_ms"]

logger = logging.getLogger("trunner")


def leaf_exceptions(error: BaseException) -> Iterator[BaseException]:
    """The exceptions inside ``error``, with every exception group flattened away."""
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from leaf_exceptions(inner)
    else:
        yield error


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


class ErrorLog:
    """Errors a runner captured, for ``Runner.errors()``.

    Capturing never blocks: the log keeps the newest ``maxlen`` errors and counts the
    ones it had to drop because nobody was reading.
    """

    def __init__(self, maxlen: int = 1000) -> None:
        self._buffer: collections.deque[BaseException] = collections.deque(maxlen=maxlen)
        self._lot = trio.lowlevel.ParkingLot()
        self._closed = False
        self.captured = 0
        self.dropped = 0

    def capture(self, error: BaseException) -> None:
        self.captured += 1
        if len(self._buffer) == self._buffer.maxlen:
            self.dropped += 1
        self._buffer.append(error)
        self._lot.unpark_all()

    def close(self) -> None:
        self._closed = True
        self._lot.unpark_all()

    def __aiter__(self) -> AsyncIterator[BaseException]:
        return _ErrorIterator(self)


class _ErrorIterator:
    def __init__(self, log: ErrorLog) -> None:
        self._log = log

    def __aiter__(self) -> _ErrorIterator:
        return self

    async def __anext__(self) -> BaseException:
        log = self._log
        await trio.lowlevel.checkpoint_if_cancelled()
        while not log._buffer:
            if log._closed:
                raise StopAsyncIteration
            await log._lot.park()
        error = log._buffer.popleft()
        await trio.lowlevel.cancel_shielded_checkpoint()
        return error
