"""Pausing a group: every runner of the group stops fetching, and starts again on resume.

Like cancellation, a pause is a state, not a message. ``pause.lua`` writes the group's
pause mark (:attr:`Keys.paused <trunner._wire.keys.Keys.paused>`: when it was paused) and sends
a notice on the group's cancel channel, which every runner already listens to (the
:class:`~trunner._engine.cancellation.Canceller` hands notices over here). The notice makes it
fast: each runner closes its :class:`PauseGate` as soon as it hears it, and its fetch
loops stop (a blocked read is interrupted). The mark makes it correct: the
:class:`Pauser` reads it before the runner fetches anything (a runner started while the
group is paused stays paused), again each time the subscription is made anew (a notice
sent while it was down is missed), after each notice, and at least every
:data:`RESYNC_INTERVAL` in any case.

While paused, a runner reads and claims nothing: a crashed instance's messages wait,
pending, for the resume (reclaiming them would start them here). Everything else goes
on: running tasks finish and are acknowledged, heartbeats keep them fresh, and the
leader's chores (the delayed mover, cron, the aggregator, the janitor) run; what they add
to the stream waits there. Messages a read or claim returns after the runner heard of the
pause are not started: they are released for immediate reclaim, and run after the resume.

Bad data: a pause mark of another type, or that does not hold 1 to 20 decimal digits
(``pause.lua`` and ``resume.lua`` read it the same way), was not written by trunner. It is
read as *not paused*, set aside in the quarantine (a key of the wrong type is renamed
aside, a bad string is left in place and recorded, once), and logged once. Not paused,
because the other reading would let a stray key stop every runner of the group, silently,
with nobody having asked for a pause; ``pause()`` overwrites such a value, and
``resume()`` deletes it.
"""

from __future__ import annotations

import trio

from .._redis import Broker
from .._util import ErrorLog, LoopBackoff, logger
from .._wire.pause import decode_mark, notices_for
from ..errors import BackendError, RedisCommandError
from .quarantine import Quarantine

__all__ = ["RESYNC_INTERVAL", "PauseGate", "Pauser"]

#: How often (at most) a runner reads the pause mark again when it hears nothing (seconds).
RESYNC_INTERVAL = 1.0


class PauseGate:
    """Whether this runner's fetch loops may fetch: closed while the group is paused.

    One owner writes it (the :class:`Pauser`); the fetch loops wait at it
    (:meth:`park`), and the runner reads it (``statistics().paused``,
    ``wait_paused``).
    """

    def __init__(self, fetchers: int) -> None:
        self._fetchers = fetchers
        self._parked = 0
        self._open = trio.Event()
        self._open.set()
        self._closed = trio.Event()
        self._halted = trio.Event()

    @property
    def paused(self) -> bool:
        """Whether the group is paused, as this runner last heard."""
        return not self._open.is_set()

    def close(self) -> bool:
        """The group is paused; False when the gate was closed already."""
        if self.paused:
            return False
        self._open = trio.Event()
        self._closed.set()
        self._halted = trio.Event()
        self._check_halted()
        return True

    def open(self) -> bool:
        """The group runs; False when the gate was open already."""
        if not self.paused:
            return False
        self._closed = trio.Event()
        self._halted.set()  # wakes those waiting for this pause to halt: it is over
        self._open.set()
        return True

    async def park(self) -> None:
        """Wait, as one fetch loop, until the gate opens."""
        self._parked += 1
        self._check_halted()
        try:
            await self._open.wait()
        finally:
            self._parked -= 1

    def _check_halted(self) -> None:
        if self.paused and self._parked >= self._fetchers:
            self._halted.set()

    async def wait_closed(self) -> None:
        """Return once the gate is closed (at once if it is)."""
        await self._closed.wait()

    async def wait_halted(self) -> None:
        """Return once the gate is closed and every fetch loop waits at it."""
        while True:
            await self._closed.wait()
            halted = self._halted
            await halted.wait()
            if self.paused and halted is self._halted:
                return

    async def wait_open(self) -> None:
        """Return once the gate is open (at once if it is)."""
        await self._open.wait()


class Pauser:
    """Keeps the runner's :class:`PauseGate` in step with the group's pause mark, until
    :meth:`stop` (the standard lifecycle)."""

    def __init__(
        self, broker: Broker, gate: PauseGate, quarantine: Quarantine, errors: ErrorLog
    ) -> None:
        self._broker = broker
        self._gate = gate
        self._quarantine = quarantine
        self._errors = errors
        self._heard = 0
        self._pause_notice, self._resume_notice = notices_for(broker.keys)
        self._wake = trio.Event()
        self._scope = trio.CancelScope()
        self.reads = 0
        """Reads of the pause mark that completed (tests wait on it)."""
        self.since_ms: int | None = None
        """When the group was paused (ms since the epoch), as last read; None if not."""
        self.stopped = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Follow the pause mark until :meth:`stop`; reports started after the first read
        (or after a first failed try: it goes on trying), so that a runner started while
        its group is paused fetches nothing."""
        try:
            with self._scope:
                backoff = LoopBackoff()
                await self._read(backoff)
                task_status.started()
                while True:
                    with trio.move_on_after(RESYNC_INTERVAL):
                        await self._wake.wait()
                    self._wake = trio.Event()
                    if not await self._read(backoff):
                        await trio.sleep(backoff.next_delay())
        finally:
            self.stopped.set()

    def stop(self) -> None:
        """Stop following the pause mark (the gate stays as it is)."""
        self._scope.cancel()

    def heard(self, notice: bytes) -> None:
        """A notice arrived on the cancel channel: apply it at once, and read the mark
        again to confirm it."""
        if notice == self._pause_notice:
            self._apply(True)
        elif notice == self._resume_notice:
            self._apply(False)
        else:  # another group's, or a later version's notice: nothing to do with it here
            logger.debug("unknown notice on the cancel channel: %r", notice[:100])
            return
        self._heard += 1
        self._wake.set()

    def resync(self) -> None:
        """Read the mark again now (the subscription was made anew: notices sent while it
        was down were missed)."""
        self._wake.set()

    async def _read(self, backoff: LoopBackoff) -> bool:
        """Read the mark and apply it, unless a notice arrived meanwhile (it is newer than
        what the read saw, and another read follows it). False if the read failed."""
        heard = self._heard
        try:
            since = await self._since()
        except BackendError as exc:
            self._errors.capture(exc)
            logger.warning("reading whether the group is paused failed (retrying): %s", exc)
            return False
        backoff.reset()
        self.reads += 1
        if heard == self._heard:
            self.since_ms = since
            self._apply(since is not None)
        return True

    async def _since(self) -> int | None:
        key = self._broker.keys.paused
        try:
            raw = await self._broker.pause_mark()
        except RedisCommandError as exc:
            if "WRONGTYPE" not in str(exc):
                raise
            self._errors.capture(exc)
            await self._quarantine.after_error(exc)  # renamed aside: read as not paused
            return None
        if raw is None:
            return None
        try:
            return decode_mark(raw)
        except ValueError as exc:
            action = "left in place; the group is read as not paused"
            await self._quarantine.set_aside("paused", key, str(exc), raw, action)
            return None

    def _apply(self, paused: bool) -> None:
        gate = self._gate
        if paused and gate.close():
            logger.info("group paused: fetching stopped (running tasks go on)")
        elif not paused and gate.open():
            self.since_ms = None
            logger.info("group resumed: fetching again")
