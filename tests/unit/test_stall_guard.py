"""The stall guard's decisions, without a loop: which stalls keep their reservations fresh,
and for how long (trunner/_engine/stalls.py)."""

from __future__ import annotations

import time
import traceback
from types import SimpleNamespace
from typing import Any

import pytest

import trunner
from trunner._engine import stalls
from trunner._engine.counters import Counters
from trunner._engine.stalls import StallGuard


class Link:
    """Records the heartbeats the guard sends."""

    def __init__(self) -> None:
        self.beats: list[tuple[str, list[str]]] = []

    def beat(self, consumer: str, ids: list[str]) -> None:
        self.beats.append((consumer, list(ids)))


def _job(*, began: float, ended: bool, timeout: float | None) -> Any:
    return SimpleNamespace(
        began=began,
        ended=ended,
        fields=[None] * 9,
        task=SimpleNamespace(timeout=timeout),
        message_id="1-0",
        consumer="c",
        lost=False,
        finishing=False,
        about=lambda: "task 'slow' (message 1-0)",
        log_fields=lambda **extra: dict(extra),
    )


def _guard(job: Any, link: Link) -> StallGuard:
    config = trunner.RunnerConfig(consumer_group="g", stall_threshold=0.1, max_stall=300.0)
    holdings: Any = SimpleNamespace(running={job.message_id: job}, finished={})
    return StallGuard(config, holdings, Counters(), link, beat_interval=1.0)  # type: ignore[arg-type]


def test_a_stall_after_the_body_keeps_its_reservations(monkeypatch: pytest.MonkeyPatch) -> None:
    """The body ran past most of its timeout and returned; what runs after it (a failed-task
    handler, middleware) then blocks the loop: the task's timeout no longer bounds the
    stall, max_stall does, so its messages stay reserved."""
    job = _job(began=time.perf_counter() - 10.0, ended=True, timeout=1.0)
    monkeypatch.setattr(stalls, "blocking_job", lambda frame: (job, []))
    link = Link()
    guard = _guard(job, link)
    guard.stalled(0.2, None)
    guard.look(0.2)
    assert link.beats == [("c", ["1-0"])]


def test_a_stall_in_the_body_past_its_timeout_lets_the_messages_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = _job(began=time.perf_counter() - 10.0, ended=False, timeout=1.0)
    monkeypatch.setattr(stalls, "blocking_job", lambda frame: (job, []))
    link = Link()
    guard = _guard(job, link)
    guard.stalled(0.2, None)
    guard.look(0.2)
    assert link.beats == []


def test_a_stack_that_cannot_be_read_costs_no_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    job = _job(began=time.perf_counter(), ended=False, timeout=None)
    monkeypatch.setattr(stalls, "blocking_job", lambda frame: (job, []))

    def unreadable(*args: object, **kwargs: object) -> traceback.StackSummary:
        raise RuntimeError("no lines")

    monkeypatch.setattr(traceback.StackSummary, "extract", unreadable)
    link = Link()
    guard = _guard(job, link)
    guard.stalled(0.2, None)
    guard.look(0.2)
    assert link.beats == [("c", ["1-0"])]


def test_a_task_that_cannot_be_named_costs_no_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    def unnamed() -> str:
        raise ValueError("undecodable")

    job = _job(began=time.perf_counter(), ended=False, timeout=None)
    job.about = unnamed
    monkeypatch.setattr(stalls, "blocking_job", lambda frame: (job, []))
    link = Link()
    guard = _guard(job, link)
    guard.stalled(0.2, None)
    guard.look(0.2)
    assert link.beats == [("c", ["1-0"])]
