"""The stall watchdog (trunner/_executors/watchdog.py, trunner/_engine/stalls.py): a task
that blocks the event loop is named, with its stack, and counted; and the reservations of
the messages held keep fresh meanwhile (tests/runner/test_stalls_processes.py, across real
worker processes).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
import trio
import trio.lowlevel

import trunner
from trunner import prometheus

from ..conftest import config, open_checked_runner, parts


def blocking_call(runner: trunner.Runner) -> None:
    """Blocks the event loop's thread until the watchdog has counted the stall."""
    while not runner.statistics().stalls:
        time.sleep(0.01)


async def test_a_blocked_loop_is_named_with_its_stack_and_counted(
    memory_url: str, group: str, caplog: pytest.LogCaptureFixture
) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task(keep_result=60)
    async def hog(_: None) -> str:
        blocking_call(trunner.current_runner())
        return "done"

    cfg = config(group, stall_threshold=0.05)
    with caplog.at_level(logging.WARNING, logger="trunner"):
        async with open_checked_runner(memory_url, cfg, tasks) as runner:
            assert await (await runner.dispatch("hog", None)).result() == "done"
            assert runner.statistics().stalls == 1
            watchdog = parts(runner).watchdog
            assert watchdog is not None
    stalls = [r for r in caplog.records if hasattr(r, "stall")]
    assert len(stalls) == 1
    record: Any = stalls[0]
    assert record.task == "hog"
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

    @tasks.task(keep_result=60)
    async def hog(_: None) -> None:
        blocking_call(trunner.current_runner())

    async with open_checked_runner(memory_url, config(group, stall_threshold=0.05), tasks) as r:
        await (await r.dispatch("hog", None)).result()
        text = prometheus.collect(r).decode()
        assert f'trunner_stalls{{group="{group}"}} 1.0' in text
        assert f'trunner_threads_abandoned{{group="{group}"}} 0.0' in text
