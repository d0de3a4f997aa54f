"""The stall watchdog: a thread that notices when the event loop has not run for a while
(a task body blocked it: a sync call in an ``async def``), and says what holds it.

A Trio task (the *ticker*) writes the time every ``period``; the watchdog's thread reads it
every ``period`` too, and calls ``on_look`` with how late the ticker is (what must go on
while the loop cannot, such as keeping reservations fresh, is done there). When the ticker
is ``threshold`` late, the loop is stalled: the thread calls ``on_stall`` once, with the
frame the loop's thread is in (from :func:`sys._current_frames`), and ``on_resumed`` when
the loop runs again (with about how long the stall lasted). What a stall means for the runner is the
engine's (:mod:`trunner._engine.stalls`); this module only sees it.

Costs: one wake-up of a Trio task and one of a thread per ``period``; nothing per task.
A process stopped as a whole (SIGSTOP, a debugger, a host paused) stops the thread too: it
sees nothing, and does nothing for the process.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

import trio

from .._util import logger

__all__ = ["THREAD_NAME", "Watchdog"]

#: The name of a runner's watchdog thread (the leak check reports it with its runner).
THREAD_NAME = "trunner stall watchdog"


class Watchdog:
    """Watches one event loop from a thread of its own (see the module docs); a service
    with the runner's lifecycle: ``run``, ``stop``, ``stopped``."""

    def __init__(
        self,
        threshold: float,
        period: float,
        on_stall: Callable[[float, FrameType | None], None],
        on_look: Callable[[float], None],
        on_resumed: Callable[[float], None],
    ) -> None:
        self.threshold = threshold
        self.period = period
        self._on_stall = on_stall
        self._on_look = on_look
        self._on_resumed = on_resumed
        self._tick = time.monotonic()
        #: The last tick before the stall the thread sees now (None: no stall).
        self._stalled_from: float | None = None
        self._quit = threading.Event()
        self._scope = trio.CancelScope()
        self.stopped = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Tick, with the thread watching, until :meth:`stop` (or cancellation)."""
        loop_thread = threading.get_ident()
        thread = threading.Thread(
            target=self._watch, args=(loop_thread,), name=THREAD_NAME, daemon=True
        )
        self._tick = time.monotonic()
        thread.start()
        try:
            with self._scope:
                task_status.started()
                while True:
                    self._tick = time.monotonic()
                    await trio.sleep(self.period)
        finally:
            self._quit.set()
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await trio.to_thread.run_sync(thread.join, abandon_on_cancel=True)
            self.stopped.set()

    def stop(self) -> None:
        """Stop watching now."""
        self._scope.cancel()

    def _watch(self, loop_thread: int) -> None:
        """The thread: look every ``period`` whether the loop ticked within ``threshold``."""
        while not self._quit.wait(self.period):
            try:
                self._look(self._tick, time.monotonic(), loop_thread)
            except Exception:  # noqa: BLE001 - a defect of trunner's: logged; it watches on
                logger.exception("the stall watchdog failed to handle a stall")

    def _look(self, tick: float, now: float, loop_thread: int) -> None:
        """One look of the thread: the ticker last wrote ``tick``, it is ``now``.

        A stall is one stretch without a tick: a tick written since the stall began (the
        loop ran, however briefly) ends it, even if the loop is stalled again by the next
        look; that is a new stall, of its own task, warned of and counted on its own (a
        busy machine may keep this thread from looking while the loop ran)."""
        late = now - tick
        stalled_from = self._stalled_from
        if stalled_from is not None and (late < self.threshold or tick != stalled_from):
            self._stalled_from = None
            self._on_resumed(tick - stalled_from)  # about how long it lasted
        if late >= self.threshold and self._stalled_from is None:
            self._stalled_from = tick
            frame = sys._current_frames().get(loop_thread)
            self._on_stall(late, frame)
            del frame
        self._on_look(late)
