"""The watchdog thread's looks, without a thread: what is one stall, and when it ends
(trunner/_executors/watchdog.py)."""

from __future__ import annotations

import threading
from types import FrameType

from trunner._executors.watchdog import Watchdog


class Seen:
    """Records what the watchdog tells its owner."""

    def __init__(self) -> None:
        self.events: list[tuple[str, float]] = []

    def stall(self, late: float, frame: FrameType | None) -> None:
        self.events.append(("stall", round(late, 3)))

    def look(self, late: float) -> None:
        pass

    def resumed(self, lasted: float) -> None:
        self.events.append(("resumed", round(lasted, 3)))


def _watchdog(seen: Seen) -> Watchdog:
    return Watchdog(0.1, 0.02, seen.stall, seen.look, seen.resumed)


def test_one_stall_is_told_once_and_ends_when_the_loop_ticks_in_time() -> None:
    seen = Seen()
    dog = _watchdog(seen)
    me = threading.get_ident()
    dog._look(10.0, 10.05, me)  # on time
    dog._look(10.0, 10.2, me)  # stalled
    dog._look(10.0, 10.5, me)  # the same stall, longer
    dog._look(10.6, 10.62, me)  # the loop ran again
    assert seen.events == [("stall", 0.2), ("resumed", 0.6)]


def test_a_second_stall_right_after_a_first_is_a_stall_of_its_own() -> None:
    """The loop ran between two stalls, but this thread looked only when it was stalled
    again (a busy machine): the tick written in between ends the first, and the second is
    told, with its own frame and task, and counted."""
    seen = Seen()
    dog = _watchdog(seen)
    me = threading.get_ident()
    dog._look(10.0, 10.2, me)  # a first stall (a collection, say)
    dog._look(10.3, 10.5, me)  # it ticked at 10.3, and is stalled again (the task)
    dog._look(10.3, 10.9, me)
    dog._look(11.0, 11.01, me)
    assert seen.events == [
        ("stall", 0.2),
        ("resumed", 0.3),
        ("stall", 0.2),
        ("resumed", 0.7),
    ]
