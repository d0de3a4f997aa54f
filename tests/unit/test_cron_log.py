"""How the cron scheduler logs its ticks (trunner/_leader/cron.py's TickLog): each tick at DEBUG,
and at INFO one summary per interval, counting the ticks of each schedule."""

from __future__ import annotations

import logging

import pytest

from trunner._leader.cron import TickLog


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "trunner" and r.levelno == level and r.getMessage().startswith("cron")
    ]


@pytest.fixture
def caplog_debug(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="trunner")
    return caplog


def test_a_frequent_cron_logs_each_tick_at_debug_and_a_summary_per_interval(
    caplog_debug: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    log = TickLog(interval=600, clock=clock)
    log.fired("every_second", 1.0)  # the first tick of the leadership: summarized at once
    assert _lines(caplog_debug, logging.INFO) == [
        "cron ticks since this instance took the lead: 'every_second' fired 1"
    ]
    for second in range(1, 600):  # 599 more ticks within the interval: DEBUG only
        clock.now += 1
        log.fired("every_second", 1.0 + second)
        if second % 60 == 0:
            log.fired("every_minute", 1.0 + second)
    assert len(_lines(caplog_debug, logging.INFO)) == 1
    debug = _lines(caplog_debug, logging.DEBUG)
    assert len(debug) == 600 + 9
    assert debug[0].startswith("cron 'every_second' fired its ")
    clock.now += 1  # 600 s after the first summary: the next tick brings the next one
    log.skipped("every_minute", 601.0, "sync")
    assert _lines(caplog_debug, logging.INFO)[1] == (
        "cron ticks in the last 600 s: 'every_second' fired 599; 'every_minute' fired 9, "
        "skipped 1 (previous run not finished)"
    )
    last = _lines(caplog_debug, logging.DEBUG)[-1]
    assert last.startswith("cron 'every_minute': ")
    assert last.endswith("tick skipped, the previous run of unique task 'sync' is not finished")


def test_the_end_of_a_leadership_summarizes_what_was_not_yet(
    caplog_debug: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    log = TickLog(interval=600, clock=clock)
    log.fired("a", 1.0)
    clock.now += 5
    log.fired("a", 6.0)
    log.fired("b", 6.0)
    log.close()
    assert _lines(caplog_debug, logging.INFO) == [
        "cron ticks since this instance took the lead: 'a' fired 1",
        "cron ticks until the leadership ended: 'a' fired 1; 'b' fired 1",
    ]
    log.close()  # nothing since: no second line
    TickLog(interval=600, clock=clock).close()  # a leadership without ticks: none
    assert len(_lines(caplog_debug, logging.INFO)) == 2


def test_an_infrequent_cron_gets_a_summary_at_each_tick(
    caplog_debug: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    log = TickLog(interval=600, clock=clock)
    for hour in range(3):
        log.fired("hourly", 3600.0 * hour)
        clock.now += 3600
    assert _lines(caplog_debug, logging.INFO) == [
        "cron ticks since this instance took the lead: 'hourly' fired 1",
        "cron ticks in the last 3600 s: 'hourly' fired 1",
        "cron ticks in the last 3600 s: 'hourly' fired 1",
    ]
