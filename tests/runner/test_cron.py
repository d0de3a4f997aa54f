"""The cron scheduler (trunner/_leader/cron.py): each tick fires once group-wide, through
handovers, and a new leader fires the latest tick it missed.

Cron schedules themselves (their ticks, their registration) are values of
trunner/schedule.py, tested in tests/unit/test_task.py.
"""

from __future__ import annotations

import itertools
import json
import logging
from typing import Any

import pytest
import trio

import trunner
from trunner.keys import Keys

from ..conftest import Timeline, config, open_checked_runner

LEADER = {"leader_ttl": 0.5, "leader_wait": 0.6, "leader_jitter": 0.01}


def cron_registry(timeline: Timeline) -> trunner.TaskRegistry:
    tasks = trunner.TaskRegistry()

    @tasks.cron("* * * * * *", payload="tick")  # every second (six fields: seconds last)
    async def every_second(payload: Any) -> None:
        timeline.record(payload)

    return tasks


@pytest.mark.deadline(30)
async def test_each_cron_tick_fires_once_group_wide(
    url: str, group: str, timeline: Timeline
) -> None:
    tasks = cron_registry(timeline)
    cfg = config(group, **LEADER)
    async with (
        open_checked_runner(url, cfg, tasks) as a,
        open_checked_runner(url, cfg, tasks),
        open_checked_runner(url, cfg, tasks),
    ):
        await timeline.wait(2)
        assert a.elector is not None
        a.stop()  # hand over in the middle: the next leader carries on
        await timeline.wait(5)
    ids = [task_id for _, _, task_id in timeline.runs]
    assert len(ids) == len(set(ids)), "no tick fired twice"
    ticks = sorted(int(i.rsplit(":", 1)[1]) for i in ids)
    assert all(b - a == 1000 for a, b in itertools.pairwise(ticks)), ticks


@pytest.mark.deadline(30)
async def test_cron_ticks_are_logged_at_debug_with_a_summary_at_info(
    url: str, group: str, timeline: Timeline, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trunner")
    async with open_checked_runner(url, config(group), cron_registry(timeline)):
        await timeline.wait(3)  # three ticks fired (and run)

    def cron_lines(level: int) -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelno == level and r.getMessage().startswith("cron")
        ]

    assert len([m for m in cron_lines(logging.DEBUG) if " fired its " in m]) >= 3
    summaries = cron_lines(logging.INFO)
    # The first tick's summary, then (SUMMARY_INTERVAL being minutes) only the one of the
    # leadership's end: never a line per tick.
    assert summaries[0] == "cron ticks since this instance took the lead: 'every_second' fired 1"
    assert len(summaries) == 2, summaries
    assert summaries[1].startswith("cron ticks until the leadership ended: 'every_second' fired ")


@pytest.mark.deadline(30)
async def test_a_new_leader_fires_the_latest_missed_tick_once(
    url: str, group: str, keys: Keys, timeline: Timeline, raw: Any
) -> None:
    tasks = cron_registry(timeline)
    async with open_checked_runner(url, config(group), tasks):
        await timeline.wait(1)
    first = int(timeline.runs[0][2].rsplit(":", 1)[1])
    await trio.sleep(2.5)  # no leader for more than two ticks
    async with open_checked_runner(url, config(group), tasks) as runner:
        await timeline.wait(2)
        catch_up = timeline.runs[1]
    stats = runner.statistics()
    missed = int(catch_up[2].rsplit(":", 1)[1])
    assert missed > first + 1000, "a tick missed while nobody led"
    assert missed <= catch_up[1] * 1000, "fired late, for its own tick"
    assert json.loads(raw.hget(keys.cron, "every_second")) >= missed
    assert stats.cron_fired >= 1


async def test_a_cron_payload_too_large_for_the_runner_skips_the_tick(url: str, group: str) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.cron("* * * * * *", payload="x" * 5000)
    async def big(_: Any) -> None:
        pass

    cfg = config(group, max_payload_bytes=1000)
    async with open_checked_runner(url, cfg, tasks) as runner:
        async for error in runner.errors():
            assert isinstance(error, trunner.PayloadTooLarge)
            break
        assert runner.state is trunner.RunnerState.STARTED, "the leader keeps running"
