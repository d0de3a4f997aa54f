"""The job host is the nursery the pool's job loops run in, hosted by a Trio *system task*.

A nursery does not exit before its children, so a task that ignores cancellation (it
catches ``trio.Cancelled``, or loops in a shielded scope) would hold every nursery above
it open: the runner could not stop. The job loops therefore run in a nursery that no
nursery of the runner waits for: one opened by a system task
(:func:`trio.lowlevel.spawn_system_task`), which the runner starts, cancels and waits for,
within a bound (:meth:`JobHost.close`). What will not stop by then is *abandoned*: left to
end on its own, reported, its message released by the runner.

The system task never raises into the Trio run: a failure of a job loop (a defect of
trunner) is kept and re-raised in the runner's own tree by :meth:`JobHost.watch`.
"""

from __future__ import annotations

import contextvars

import trio

__all__ = ["JobHost"]


class JobHost:
    """A nursery for the job loops, outside the runner's nursery tree."""

    def __init__(self) -> None:
        self._nursery: trio.Nursery | None = None
        self._started = trio.Event()
        self._failed = trio.Event()
        self._error: BaseException | None = None
        #: Set once the hosting system task has ended (every job loop has returned).
        self.done = trio.Event()
        #: The task that started the host (the runner's): where its job loops belong, for
        #: tools that walk the task tree (the leak check of ``trunner.testing``).
        self.owner: trio.lowlevel.Task | None = None

    async def start(self) -> trio.Nursery:
        """Spawn the hosting task (with a copy of the caller's context, which the job loops
        inherit) and return its nursery."""
        self.owner = trio.lowlevel.current_task()
        trio.lowlevel.spawn_system_task(
            self._host, name="trunner job host", context=contextvars.copy_context()
        )
        await self._started.wait()
        assert self._nursery is not None
        return self._nursery

    async def _host(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._started.set()
                await trio.sleep_forever()
        except BaseException as exc:  # noqa: BLE001 - never into the Trio run: see watch()
            if not isinstance(exc, trio.Cancelled):
                self._error = exc
                self._failed.set()
        finally:
            self._started.set()
            self.done.set()

    async def watch(self) -> None:
        """Wait until a job loop fails, then raise its error here (in the runner's tree).

        Run it in a nursery of the runner: it keeps a defect of the pool from going
        unnoticed now that the job loops are outside the runner's tree.
        """
        await self._failed.wait()
        assert self._error is not None
        raise self._error

    async def close(self, grace: float) -> bool:
        """Cancel whatever still runs in the host and wait up to ``grace`` seconds for it to
        end; True when it has ended, False when something ignores the cancellation (it is
        left to end on its own)."""
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
        with trio.move_on_after(grace):
            await self.done.wait()
        return self.done.is_set()
