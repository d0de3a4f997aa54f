"""The thread a synchronous client (``trunner.sync``) runs the Trio client on: its opening
(an opening given up, on ``KeyboardInterrupt`` say, leaves nothing running), the calls
other threads run on it, and its close (the calls under way end first, and no Trio
exception ever reaches the calling threads).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from ._util import logger
from .client import Client as TrioClient
from .client import open_client
from .errors import RunnerNotRunning

__all__ = ["ClientThread"]

T = TypeVar("T")


class ClientThread:
    """A Trio client, open on a thread of its own (a Trio loop) until :meth:`stop`.

    Made by the thread that opens it, which blocks until the client is open (or raises
    what opening raised); then every thread but its own may :meth:`run` calls on it.
    """

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        #: Between the opener and the thread: whether the opener gave up, and the scope
        #: of the opening it cancels then (once the thread has one).
        self._guard = threading.Lock()
        self._given_up = False
        self._opening: tuple[trio.CancelScope, trio.lowlevel.TrioToken] | None = None
        opened: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=trio.run,
            args=(self._main, url, options, opened),
            name="trunner.sync.Client",
            daemon=True,
        )
        self._thread.start()
        try:
            got = opened.get()
        except BaseException:  # KeyboardInterrupt, say: leave nothing running
            self._give_up()
            raise
        if isinstance(got, BaseException):
            self._thread.join()
            raise got
        self._token: trio.lowlevel.TrioToken = got[0]
        self.client: TrioClient = got[1]
        self._stop: trio.Event = got[2]

    async def _main(
        self, url: str, options: dict[str, Any], opened: queue.SimpleQueue[Any]
    ) -> None:
        stop = trio.Event()
        scope = trio.CancelScope()
        told = False
        with self._guard:
            if self._given_up:
                return
            self._opening = (scope, trio.lowlevel.current_trio_token())
        try:
            with scope:
                async with open_client(url, **options) as client:
                    opened.put((trio.lowlevel.current_trio_token(), client, stop))
                    told = True
                    await stop.wait()
                    await client._drain()
        except BaseException as exc:  # noqa: BLE001 - handed to the opener, or logged
            if not told:
                opened.put(exc)
            else:
                logger.error("a trunner.sync.Client's thread failed", exc_info=exc)

    def _give_up(self) -> None:
        """Stop the opening (the opener will not take the client), and wait for the
        thread to end: no connection and no thread is left behind."""
        with self._guard:
            self._given_up = True
            opening = self._opening
        if opening is not None:
            scope, token = opening
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(scope.cancel, trio_token=token)
        self._thread.join()

    def refuse_own_thread(self, what: str) -> None:
        """Raise ``RuntimeError`` when called on the client's own thread."""
        if threading.current_thread() is self._thread:
            raise RuntimeError(
                f"a trunner.sync.Client cannot be {what} from its own thread (from an "
                "on_dispatch hook, say): it would wait for itself"
            )

    def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``fn()`` on the client's thread; return what it returned, or raise what it
        raised (``RunnerNotRunning`` when the thread ended before or while it ran)."""
        self.refuse_own_thread("called")
        try:
            return trio.from_thread.run(fn, trio_token=self._token)
        except RunnerNotRunning as exc:
            if self._stop.is_set():  # said by the Trio client: say which client closed
                raise RunnerNotRunning(
                    "the trunner.sync.Client was closed during this call"
                ) from exc
            raise
        except trio.RunFinishedError:
            raise RunnerNotRunning("the trunner.sync.Client's thread ended") from None
        except trio.Cancelled:  # the thread failed (logged) and ended while fn ran
            raise RunnerNotRunning(
                "the trunner.sync.Client's thread ended while this call ran"
            ) from None

    def stop(self) -> None:
        """Close the client, the calls under way ending first (see ``Client._drain``),
        and wait for the thread to end."""
        self.refuse_own_thread("closed")
        with contextlib.suppress(trio.RunFinishedError):  # it ended already
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join()
