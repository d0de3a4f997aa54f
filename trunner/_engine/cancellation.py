"""The canceller hears which tasks were cancelled and cancels the ones this instance holds.

Cancellation is a state, not a message (``cancel_task.lua``): a running task gets a cancel
mark in the group's ``cancelled`` hash, and an announcement on its cancel channel. The
announcement makes it fast: the runner running the task cancels it at once (the job loop
running it is cancelled: see :mod:`trunner._engine.pool`). The mark makes it correct: the
canceller keeps the marks in :attr:`Holdings.cancelled <trunner._engine.holdings.Holdings>` (read
after it subscribed, so none is missed), and a message of a marked task that this
instance fetches later (reclaimed from a runner that died, say) is dropped before it
starts. Either way the task's outcome is ``cancelled``: acknowledged, never retried, its
unique lock released, no failed-task handler.

The canceller reads the marks again at most every :data:`RESYNC_INTERVAL` while it hears
of more, and forgets those Redis forgot (acknowledged, or past their time): an instance
keeps no more marks than its group holds, plus those it heard of since.

The channel also carries the group's notices (pause, resume: see :mod:`trunner._engine.pausing`),
which never look like a task id: the canceller hands them to ``on_notice``, and tells
``on_subscribed`` each time its subscription is made (anew), so that one connection serves
both.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from .._redis import Broker, Subscriber
from .._util import ErrorLog, LoopBackoff, logger, wall_ms
from .._wire.marks import MARK_LIFETIME
from .._wire.pause import is_notice
from .._wire.workflow import FORGET_NOTICE
from ..errors import BackendError
from .holdings import Holdings

__all__ = ["Canceller"]

#: How often (at most) the canceller reads the marks again while it hears of more
#: (seconds): the marks it keeps are those Redis holds, and those it heard of since.
RESYNC_INTERVAL = 60.0


class Canceller:
    """Listens to the group's cancel channel until :meth:`stop` (the standard lifecycle)."""

    def __init__(
        self,
        broker: Broker,
        holdings: Holdings,
        cancel_task: Callable[[str], bool],
        errors: ErrorLog,
        on_notice: Callable[[bytes], None] = lambda _: None,
        on_subscribed: Callable[[], None] = lambda: None,
    ) -> None:
        self._broker = broker
        self._marks = holdings.cancelled
        self._cancel_task = cancel_task
        self._errors = errors
        self._on_notice = on_notice
        self._on_subscribed = on_subscribed
        self._scope = trio.CancelScope()
        self._next_read = 0
        self.stopped = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen until :meth:`stop`; reports started once subscribed and the marks read
        (or after a first failed try: it goes on trying)."""
        first = True
        try:
            with self._scope:
                backoff = LoopBackoff()
                while True:
                    subscriber = self._broker.open_cancel_subscriber()
                    try:
                        await subscriber.subscribe()
                        self._on_subscribed()
                        await self._read_marks()  # after subscribing: none is missed
                        if first:
                            first = False
                            task_status.started()
                        backoff.reset()
                        await self._listen(subscriber)
                    except BackendError as exc:
                        self._errors.capture(exc)
                        logger.warning("listening for cancelled tasks failed: %s", exc)
                    finally:
                        with trio.CancelScope(shield=True):
                            await subscriber.aclose()
                    if first:
                        first = False
                        task_status.started()
                    await trio.sleep(backoff.next_delay())
        finally:
            self.stopped.set()

    def stop(self) -> None:
        """Stop listening."""
        self._scope.cancel()

    async def _read_marks(self) -> None:
        """Keep the marks Redis holds now, and those heard of since this read began; the
        others were forgotten in Redis (their task was acknowledged somewhere, or the
        janitor forgot them past their time), and go here too: the marks an instance
        keeps never grow past those of the group."""
        now = wall_ms()
        until = now + int(MARK_LIFETIME * 1000)
        held = await self._broker.cancel_marks(now)
        marks = self._marks
        kept = set(held)
        for task_id in [t for t, u in marks.items() if u < until and t not in kept]:
            del marks[task_id]  # known before this read began, and gone from Redis since
        for task_id in held:
            if task_id not in marks:
                marks[task_id] = until
                self._cancel_task(task_id)
        self._next_read = now + int(RESYNC_INTERVAL * 1000)

    async def _listen(self, subscriber: Subscriber) -> None:
        while True:
            data = await subscriber.next_message()
            if data.startswith(FORGET_NOTICE):  # a settled workflow's mark: gone in Redis
                self._marks.pop(data[len(FORGET_NOTICE) :].decode("utf-8", "surrogateescape"), None)
                continue
            if is_notice(data):
                self._on_notice(data)
                continue
            task_id = data.decode("utf-8", "surrogateescape")
            now = wall_ms()
            self._marks[task_id] = now + int(MARK_LIFETIME * 1000)
            if self._cancel_task(task_id):
                if " " in task_id:  # a workflow's mark, "<group> <workflow id>"
                    logger.info(
                        "workflow %s: its steps cancelled while this instance held them",
                        task_id.split(" ", 1)[1],
                    )
                else:
                    logger.info("task %s: cancelled while this instance held it", task_id)
            if now >= self._next_read:
                await self._read_marks()
