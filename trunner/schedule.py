"""One cron schedule: which task runs, with which payload, at the ticks of which cron
expression."""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from ._wire.envelope import NO_SIZE_LIMIT, encode_message
from ._wire.headers import NO_HEADERS, check_headers
from ._wire.names import check_task_name

__all__ = ["CronSchedule"]


def _check_cron_expression(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    from croniter import croniter  # noqa: PLC0415 - loaded only by users of cron

    if not isinstance(value, str) or not croniter.is_valid(value):
        raise ValueError(f"{attr.name} is not a valid cron expression: {value!r}")


def _check_timezone(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{attr.name} must be a time zone name, got {type(value).__name__}")
    import zoneinfo  # noqa: PLC0415 - loaded only by users of cron

    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown {attr.name}: {value!r}") from None


def _cron_headers(headers: Mapping[str, str] | None) -> Mapping[str, str]:
    checked = check_headers(headers)
    return MappingProxyType(checked) if checked else NO_HEADERS


@attrs.frozen
class CronSchedule:
    """A periodic task: ``task_name`` with ``payload`` at every tick of ``expression``.

    [``TaskRegistry.cron``][trunner.TaskRegistry.cron] builds one; build one yourself for
    [``TaskRegistry.add_cron``][trunner.TaskRegistry.add_cron]. The group's leader fires
    each tick once group-wide (see [Periodic tasks](delayed-and-periodic.md#periodic-tasks-cron)).

    Raises:
        TypeError: ``name`` or ``task_name`` is not a string, or ``timezone`` is not a
            string.
        ValueError: An empty name or one with surrounding whitespace, an invalid
            expression, or an unknown time zone.
        InvalidPayload: ``payload`` is not JSON-serializable.
    """

    name: str = attrs.field(validator=check_task_name)
    """The schedule's name: a non-empty string without surrounding whitespace. The group
    keeps the last tick fired per name, so keep it stable."""
    expression: str = attrs.field(validator=_check_cron_expression)
    """A cron expression: five fields (minute hour day-of-month month day-of-week), or six
    with seconds as the last field."""
    task_name: str = attrs.field(validator=check_task_name)
    """The task to run: a non-empty string without surrounding whitespace."""
    payload: Any = None
    """The payload of every tick, JSON-serializable.

    It is encoded once when the schedule is built, to check it, and again at every tick.
    At a tick, a message larger than the leading runner's ``max_payload_bytes`` skips the
    tick: the leader logs an error and reports
    [``PayloadTooLarge``][trunner.PayloadTooLarge] through ``runner.errors()``, and fires
    the next tick as usual.
    """
    timezone: str = attrs.field(default="UTC", validator=_check_timezone)
    """The IANA time zone the ticks are computed in."""
    headers: Mapping[str, str] = attrs.field(default=NO_HEADERS, converter=_cron_headers)
    """The headers of every tick's message (read-only; none by default). A cron tick is
    not a dispatch: no dispatch hook sees it, so these are all the headers it carries.
    ``InvalidHeaders`` when they cannot be sent (see
    [Middleware and headers](middleware.md#headers))."""

    def __attrs_post_init__(self) -> None:
        # A payload that cannot be sent fails here, not at a tick on the leader.
        encode_message(
            self.task_name,
            self.payload,
            enqueued_at=0.0,
            headers=self.headers,
            max_bytes=NO_SIZE_LIMIT,
        )
        # croniter accepts expressions that never match (30 February): finding the next
        # tick now makes them fail here, not on the leader at run time.
        try:
            self.next_tick(time.time())
        except ValueError as exc:
            raise ValueError(
                f"cron schedule {self.name!r}: {self.expression!r} never fires ({exc})"
            ) from None

    def _iter(self, at: float) -> Any:
        import datetime  # noqa: PLC0415 - loaded only by users of cron
        import zoneinfo  # noqa: PLC0415 - idem

        from croniter import croniter  # noqa: PLC0415 - idem

        start = datetime.datetime.fromtimestamp(at, zoneinfo.ZoneInfo(self.timezone))

        return croniter(self.expression, start)

    def next_tick(self, after: float) -> float:
        """The first tick strictly after ``after``.

        Args:
            after: Seconds since the epoch.

        Returns:
            The tick, in seconds since the epoch.
        """
        tick: float = self._iter(after).get_next(float)
        return tick

    def prev_tick(self, at: float) -> float:
        """The latest tick at or before ``at``.

        Args:
            at: Seconds since the epoch.

        Returns:
            The tick, in seconds since the epoch.
        """
        tick: float = self._iter(at + 0.001).get_prev(float)
        return tick
