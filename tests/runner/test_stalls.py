"""The stall watchdog (trunner/_executors/watchdog.py, trunner/_engine/stalls.py): a task
that blocks the event loop is named, with its stack, and counted; and the reservations of
the messages held keep fresh meanwhile (tests/runner/test_stalls_processes.py, across real
worker processes).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

import trio
import trio.lowlevel

import trunner
from trunner import prometheus

from ..conftest import config, open_checked_runner, parts


class _StallsSeen(logging.Handler):
    """Collects the watchdog's stall warnings as they are emitted (from its thread)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if hasattr(record, "stall"):
            self.records.append(record)

    def named(self, task: str) -> list[logging.LogRecord]:
        return [r for r in list(self.records) if getattr(r, "task", None) == task]


@contextlib.contextmanager
def stalls_seen() -> Iterator[_StallsSeen]:
    seen = _StallsSeen()
    log = logging.getLogger("trunner")
    log.addHandler(seen)
    try:
        yield seen
    finally:
        log.removeHandler(seen)


def blocking_call(seen: _StallsSeen, task: str) -> None:
    """Blocks the event loop's thread until the watchdog has warned of a stall naming
    ``task``. Another stall before it (a collection pause on a busy machine, say) does not
    end the wait: it is counted too, and named as no task."""
    while not seen.named(task):
        time.sleep(0.01)


async def test_a_blocked_loop_is_named_with_its_stack_and_counted(
    memory_url: str, group: str
) -> None:
    tasks = trunner.TaskRegistry()
    with stalls_seen() as seen:

        @tasks.task(keep_result=60)
        async def hog(_: None) -> str:
            blocking_call(seen, "hog")
            return "done"

        cfg = config(group, stall_threshold=0.05)
        async with open_checked_runner(memory_url, cfg, tasks) as runner:
            assert await (await runner.dispatch("hog", None)).result() == "done"
            watchdog = parts(runner).watchdog
            assert watchdog is not None
    # Read once the watchdog has stopped: a stall being warned of can no longer be half-told.
    assert runner.statistics().stalls == len(seen.records), "each stall is counted"
    named = seen.named("hog")
    assert len(named) == 1, "one stall, warned of once"
    record: Any = named[0]
    assert record.levelno == logging.WARNING
    assert "blocking_call" in record.getMessage(), "the stack shows where it blocks"


async def test_no_watchdog_without_a_threshold(memory_url: str, group: str) -> None:
    tasks = trunner.TaskRegistry()
    async with open_checked_runner(memory_url, config(group, stall_threshold=None), tasks) as r:
        assert parts(r).watchdog is None
        await trio.lowlevel.checkpoint()
        assert r.statistics().stalls == 0


async def test_stalls_are_a_metric(memory_url: str, group: str) -> None:
    tasks = trunner.TaskRegistry()
    with stalls_seen() as seen:

        @tasks.task(keep_result=60)
        async def hog(_: None) -> None:
            blocking_call(seen, "hog")

        cfg = config(group, stall_threshold=0.05)
        async with open_checked_runner(memory_url, cfg, tasks) as r:
            await (await r.dispatch("hog", None)).result()
            stalls = r.statistics().stalls
            assert stalls >= 1
            text = prometheus.collect(r).decode()
            assert f'trunner_stalls{{group="{group}"}} {float(stalls)}' in text
            assert f'trunner_threads_abandoned{{group="{group}"}} 0.0' in text
