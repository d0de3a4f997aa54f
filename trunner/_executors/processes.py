"""Runs the body of a ``run_in="process"`` task in a worker process (trio-parallel), under a
limiter of its own, and kills the process when the attempt times out or is cancelled.

``await body(payload)`` sends the worker process the action's module path, the message as
stored and the payload as JSON (:mod:`trunner._executors.child` runs it there), and
returns the result decoded from JSON into the declared return type. Nothing of the user's
is pickled: trio-parallel pickles the call of ``child.run`` (a reference to it, and its
string and bytes arguments) and the tuple of bytes it returns.

- **Timeout or cancel**: the awaiting Trio task is cancelled, and trio-parallel kills the
  process (SIGKILL) and waits until it is gone before the await ends: the attempt fails
  with ``TaskTimeout`` or is cancelled once the core is free again. The process writes
  nothing anywhere (it holds no Redis connection), and the attempt's own writes are fenced
  to its delivery, so a late end records nothing.
- **The process dies** under the body (a segfault, ``os.abort()``, ``os._exit``, SIGKILL
  from the out-of-memory killer): the attempt fails with
  :class:`~trunner.errors.WorkerProcessDied` naming the exit code or signal (retried as
  any failure); the next attempt gets a new process.
- **The action raises**: the exception is rebuilt as its own class when that class is an
  ``Exception`` importable by module path and its ``args`` and attributes have a JSON form
  (so ``give_up_on`` and ``GiveUp`` work), its ``__cause__`` a
  :class:`~trunner.errors.RemoteFailure` carrying the process's traceback; otherwise it is
  that ``RemoteFailure`` itself. It is rebuilt as unpickling would rebuild it, but without
  calling the class's ``__init__`` (whose parameters need not be its ``args``: an
  ``__init__(self, account, limit)`` that passes one message up): made by ``__new__``,
  given its ``args``, its attributes set from its ``__dict__``.

Worker processes are started with ``spawn`` (no copy of the runner's threads, sockets or
locks) when a task first needs one, and kept for the next task (trio-parallel's cache);
a killed or dead one is replaced by a new one at the next task. A runner opens the
executor's worker context before its jobs start and closes it after they end
(:meth:`ProcessExecutor.open`, :meth:`ProcessExecutor.aclose`); an executor that was never
opened (eager calls) uses trio-parallel's default context, whose idle workers end with the
interpreter.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import msgspec
import trio

from .._context import current_message
from .._wire.codec import codec_for
from ..errors import RemoteFailure, WorkerProcessDied
from . import child
from .base import Body

__all__ = ["ProcessExecutor", "module_path"]

#: Seconds the idle worker processes get to exit when the executor is closed, before
#: they are killed.
CLOSE_GRACE = 5.0


class _Unlimited:
    """A limiter that never waits: the executor holds its own limiter around the call."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_UNLIMITED = _Unlimited()


def module_path(name: str, action: Callable[..., Any]) -> tuple[str, str]:
    """``(module, qualname)`` by which a worker process imports the task ``name``'s
    action; ``TypeError`` saying why when that path does not lead back to the action."""
    module = getattr(action, "__module__", "")
    qualname = getattr(action, "__qualname__", "")
    try:
        found = child.resolve(module, qualname)
    except Exception as exc:  # noqa: BLE001 - the reason is the message
        found = exc
    if found is not action:
        raise TypeError(
            f"task {name!r}: run_in='process' imports the action by its module path, but "
            f"{module}:{qualname} is not the action ({found!r}): register the function "
            "defined at the top level of its module, undecorated by anything else"
        )
    return module, qualname


class ProcessExecutor:
    """Worker processes for ``run_in="process"`` task bodies, at most ``limit`` at once."""

    def __init__(self, limit: int) -> None:
        self.limiter = trio.CapacityLimiter(limit)
        #: Attempts whose worker process was killed (their timeout or cancellation came).
        self.killed = 0
        #: Attempts whose worker process died under them (see ``WorkerProcessDied``).
        self.died = 0
        self._context: Any = None  # a trio_parallel.WorkerContext, once open
        self._stack = contextlib.AsyncExitStack()
        #: Whether a task's body runs here: only then is trio-parallel loaded and opened.
        self._used = False

    async def open(self) -> None:
        """Open the worker context the runner's task bodies run in (no process starts);
        nothing at all when no task runs in a process."""
        if not self._used:
            return
        parallel = _trio_parallel()
        self._context = await self._stack.enter_async_context(
            parallel.open_worker_context(
                grace_period=CLOSE_GRACE, worker_type=parallel.WorkerType.SPAWN
            )
        )

    async def aclose(self) -> None:
        """End the idle worker processes (killed past :data:`CLOSE_GRACE`). Call it once
        no body runs any more."""
        self._context = None
        await self._stack.aclose()

    def body(self, action: Callable[[Any], Any], name: str) -> Body:
        module, qualname = module_path(name, action)
        payload_codec, result_codec, _problem = codec_for(action)
        limiter = self.limiter
        self._used = True

        async def in_process(payload: Any) -> Any:
            message = current_message()
            data = msgspec.json.encode(payload_codec.encode(payload))
            context = self._context
            parallel = _trio_parallel()
            run_sync = parallel.run_sync if context is None else context.run_sync
            async with limiter:
                try:
                    ok, out = await run_sync(
                        child.run,
                        module,
                        qualname,
                        message.message_id,
                        message.raw,
                        message.deliveries,
                        data,
                        kill_on_cancel=True,
                        limiter=_UNLIMITED,
                    )
                except trio.Cancelled:
                    self.killed += 1
                    raise
                except parallel.BrokenWorkerError as exc:
                    self.died += 1
                    raise WorkerProcessDied(name, _exitcode(exc)) from None
            if ok:
                return result_codec.decode(msgspec.json.decode(out))
            raise _rebuilt(out)

        return in_process

    @property
    def running(self) -> int:
        """Worker processes running a task body now."""
        return int(self.limiter.borrowed_tokens)


def _trio_parallel() -> Any:
    """trio-parallel, imported at the first use: a runner with no process task never loads
    it, nor multiprocessing and pickle with it (1.1 MB of RSS, 17 ms at start)."""
    import trio_parallel  # type: ignore[import-untyped]  # noqa: PLC0415 - see above

    return trio_parallel


def _exitcode(exc: BaseException) -> int | None:
    """The exit code of the process a ``BrokenWorkerError`` names (its last argument)."""
    for arg in reversed(exc.args):
        code = getattr(arg, "exitcode", None)
        if isinstance(code, int):
            return code
    return None


def _rebuilt(data: bytes) -> BaseException:
    """The exception the action raised in the process, from its description (see the
    module docs)."""
    info = msgspec.json.decode(data)
    remote = RemoteFailure(info["qualname"], info["message"], info["traceback"])
    args, state = info["args"], info.get("state")
    if not (isinstance(args, list) and isinstance(state, dict)):
        return remote
    try:
        cls = child.resolve(info["module"], info["qualname"])
        if not (isinstance(cls, type) and issubclass(cls, Exception)):
            return remote
        exc: BaseException = cls.__new__(cls, *args)
        exc.args = tuple(args)
        exc.__dict__.update(state)
    except Exception:  # noqa: BLE001 - not rebuildable: described as it is
        return remote
    exc.__cause__ = remote
    return exc
