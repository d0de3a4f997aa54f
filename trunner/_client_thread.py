"""The thread a synchronous client (``trunner.sync``) runs the Trio client on: its opening,
the calls other threads run on it, and its close (the calls under way end first, and no
Trio exception ever reaches the calling threads).
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
        opened: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=trio.run,
            args=(self._main, url, options, opened),
            name="trunner.sync.Client",
            daemon=True,
        )
        self._thread.start()
        got = opened.get()
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
        told = False
        try:
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

    def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``fn()`` on the client's thread; return what it returned, or raise what it
        raised (``RunnerNotRunning`` when the thread ended before or while it ran)."""
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
        with contextlib.suppress(trio.RunFinishedError):  # it ended already
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join()
