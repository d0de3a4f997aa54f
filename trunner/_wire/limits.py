"""Group-wide rate and concurrency limits of a task: their values (no I/O).

A task declares them (``@tasks.task(rate_limit="100/s", concurrency=2)``); the pool admits
each message of such a task with one script (``admit.lua``) before its attempt starts (see
:mod:`trunner._engine.admission`). Limits are admission, not failure: a message over a limit is
deferred, in order, and uses no attempt. See [Rate and concurrency limits](limits.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import attrs

from ..errors import InvalidPayload
from .names import utf8_error

__all__ = ["DEFAULT_RATE_BURST", "Limits", "RateLimit", "parse_rate"]

#: The burst of a rate limit that does not name one: 1, so that admissions are spaced by
#: the emission interval (``period / count``) and never two come at once.
DEFAULT_RATE_BURST = 1

_PERIODS = {"s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}
_SPEC = re.compile(r"\s*([0-9]+)\s*/\s*([smh])\s*")


@attrs.frozen
class RateLimit:
    """``count`` admissions per ``period_ms``, at most ``burst`` at once (GCRA)."""

    count: int
    period_ms: float
    burst: int = DEFAULT_RATE_BURST

    @property
    def emission_ms(self) -> float:
        """The emission interval: one admission every ``period / count`` ms."""
        return self.period_ms / self.count

    @property
    def tolerance_ms(self) -> float:
        """How far ahead of its theoretical arrival time an admission may come: the burst
        tolerance ``(burst - 1) * emission``."""
        return (self.burst - 1) * self.emission_ms


def parse_rate(spec: object, burst: object = None) -> RateLimit:
    """A rate limit from ``"<count>/<s|m|h>"`` (``"100/s"``, ``"10/m"``, ``"1/h"``).

    Raises:
        TypeError: ``spec`` is not a str, or ``burst`` not an int.
        ValueError: ``spec`` is not of that form, its count is not > 0, or ``burst`` is not
            >= 1.
    """
    if not isinstance(spec, str):
        raise TypeError(f"rate_limit must be a str such as '100/s', got {type(spec).__name__}")
    match = _SPEC.fullmatch(spec)
    if match is None:
        raise ValueError(
            f"rate_limit must be '<count>/s', '<count>/m' or '<count>/h' (say '100/s'), "
            f"got {spec!r:.60}"
        )
    count = int(match.group(1))
    if count <= 0:
        raise ValueError(f"rate_limit must admit at least 1 per period, got {spec!r}")
    if burst is None:
        burst = DEFAULT_RATE_BURST
    if isinstance(burst, bool) or not isinstance(burst, int):
        raise TypeError(f"rate_burst must be an int >= 1, got {burst!r}")
    if burst < 1:
        raise ValueError(f"rate_burst must be >= 1, got {burst}")
    return RateLimit(count, _PERIODS[match.group(2)], burst)


def limit_key(
    task_name: str, key_of: Callable[[Any], Any] | None, payload: Any, which: str = "limit key"
) -> str:
    """``<len(name)>:<name>[:<key>]``: the limit's key for one payload (as unique keys).

    ``which``: the key function's name, for the errors (``rate_limit_key``,
    ``concurrency_key``). What the key function raises, or a key it returns that is not a
    str or int or cannot be sent to Redis, raises ``InvalidPayload`` (its message goes
    after "payload of task ...")."""
    prefix = f"{len(task_name)}:{task_name}"
    if key_of is None:
        return prefix
    try:
        key = key_of(payload)
    except InvalidPayload:
        raise
    except Exception as exc:
        raise InvalidPayload(f"has no {which}: it raised {type(exc).__name__}: {exc}") from exc
    if isinstance(key, bytes):
        key = key.decode("utf-8", "replace")
    if isinstance(key, bool) or not isinstance(key, str | int):
        raise InvalidPayload(f"has a {which} that is not a str or int: {key!r:.80}")
    if isinstance(key, str) and (why := utf8_error(key)) is not None:
        raise InvalidPayload(f"has a {which} that cannot be sent to Redis: {why}")
    return f"{prefix}:{key}"


@attrs.frozen
class Limits:
    """The limits of one task: its rate (or None) and its concurrency (or None), with
    the functions that pick a payload's key for each (None: one limit for the task)."""

    task_name: str
    rate: RateLimit | None = None
    rate_key: Callable[[Any], Any] | None = None
    concurrency: int | None = None
    concurrency_key: Callable[[Any], Any] | None = None

    def rate_key_for(self, payload: Any) -> str:
        return limit_key(self.task_name, self.rate_key, payload, "rate_limit_key")

    def concurrency_key_for(self, payload: Any) -> str:
        return limit_key(self.task_name, self.concurrency_key, payload, "concurrency_key")
