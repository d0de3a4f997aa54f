"""The waiters of one producer: woken through one subscription to the group's channel of
finished tasks, shared by all of them (on the loop of its runtime: Trio or asyncio).

A waiter registers, makes sure the subscription is up, then looks at the stored outcome:
an outcome written before the subscription is seen by the look, one written after it is
announced on the channel (no lost wake-up). When the subscription breaks and comes back,
every waiter looks again. Waiting never polls.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import trio

from .._redis import Broker, Subscriber
from .._util import LoopBackoff, logger
from ..errors import BackendError, RunnerNotRunning
from .runtime import TRIO, Event, Runtime

__all__ = ["Waiters"]


class Waiters:
    """The waiters of one producer, woken through one subscription to the group's channel
    of finished tasks (see the module docs). :meth:`serve` until cancelled (on Trio, the
    standard lifecycle: ``run`` until :meth:`stop`); it subscribes only once somebody
    waits."""

    def __init__(self, broker: Broker, runtime: Runtime = TRIO) -> None:
        self._broker = broker
        self._runtime = runtime
        self._waiting: dict[str, set[Event]] = {}
        #: Waited-for ids that hold whitespace: the channel joins ids with spaces, so these
        #: are woken by every announcement (and look again).
        self._spaced: set[str] = set()
        self._wanted = runtime.event()
        self._subscribed = runtime.event()
        self._closed = False
        self._scope = trio.CancelScope()
        self.stopped = trio.Event()  # the Trio lifecycle's (see run)

    @contextlib.contextmanager
    def register(self, task_id: str) -> Iterator[Event]:
        """An event set when ``task_id`` is announced finished, or when the subscription
        came back after a break (look again either way)."""
        event = self._runtime.event()
        self._waiting.setdefault(task_id, set()).add(event)
        spaced = task_id != "".join(task_id.split())
        if spaced:
            self._spaced.add(task_id)
        self._wanted.set()
        try:
            yield event
        finally:
            events = self._waiting.get(task_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiting[task_id]
                    self._spaced.discard(task_id)

    async def subscribed(self) -> None:
        """Return once the subscription is up (starting it if nobody waited before).

        Raises:
            RunnerNotRunning: The waiters stopped (their runner or client closed), before
                or while this waited.
        """
        self.check_open()
        self._wanted.set()
        await self._subscribed.wait()
        self.check_open()

    def check_open(self) -> None:
        """Raise ``RunnerNotRunning`` once the waiters stopped."""
        if self._closed:
            raise RunnerNotRunning(
                "the runner or client was closed: nothing hears of finished tasks any more"
            )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the waiters until :meth:`stop` (Trio)."""
        try:
            with self._scope:
                task_status.started()
                await self.serve()
        finally:
            self.stopped.set()

    async def serve(self) -> None:
        """Serve the waiters until cancelled; then waiters still waiting raise
        ``RunnerNotRunning``."""
        runtime = self._runtime
        try:
            await self._wanted.wait()
            backoff = LoopBackoff()
            while True:
                subscriber = self._broker.open_done_subscriber()
                try:
                    await self._listen(subscriber, backoff)
                except BackendError as exc:
                    logger.debug("listening for finished tasks failed: %s", exc)
                finally:
                    if self._subscribed.is_set():  # waiters wait for the next one
                        self._subscribed = runtime.event()
                    self._wake_all()  # they look again: nothing is missed meanwhile
                    await runtime.shielded(subscriber.aclose)
                await runtime.sleep(backoff.next_delay())
        finally:
            self._closed = True
            self._subscribed.set()  # whoever waits for a subscription learns it is closed
            self._wake_all()

    def stop(self) -> None:
        """Stop serving: waiters still waiting raise ``RunnerNotRunning``."""
        self._scope.cancel()

    async def _listen(self, subscriber: Subscriber, backoff: LoopBackoff) -> None:
        await subscriber.subscribe()
        backoff.reset()
        self._subscribed.set()
        while True:
            data = await subscriber.next_message()
            for task_id in data.decode("utf-8", "surrogateescape").split():
                for event in self._waiting.get(task_id, ()):
                    event.set()
            for task_id in self._spaced:
                for event in self._waiting.get(task_id, ()):
                    event.set()

    def _wake_all(self) -> None:
        for events in self._waiting.values():
            for event in events:
                event.set()
