"""The middleware hooks of a list of :class:`~trunner.Middleware`, run as the rules of
:mod:`trunner.middleware` say: ``around_attempt`` around each attempt (the pool, and eager
calls) and ``on_dispatch`` at each dispatch (producers, and eager calls).

Below both the engine and the producers (and beside the definitions they run), so that
every caller of the hooks imports them downward.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import trio

from .errors import MiddlewareError
from .middleware import AttemptInfo, AttemptOutcome, DispatchInfo, Middleware, _outcome_of

__all__ = ["AttemptHooks", "DispatchHooks"]


def _overrides(middleware: Middleware, name: str) -> bool:
    return getattr(type(middleware), name) is not getattr(Middleware, name)


def _must_pass(exc: BaseException) -> bool:
    """Whether ``exc`` must go on up whatever a middleware does: a cancellation, or the
    end of the process (alone, or in a group)."""
    passing = (trio.Cancelled, KeyboardInterrupt, SystemExit, GeneratorExit)
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(passing) is not None
    return isinstance(exc, passing)


def _name(middleware: Middleware) -> str:
    return type(middleware).__qualname__


def _own_cancellation(error: BaseException) -> bool:
    """Whether ``error`` is a cancellation (alone, or in a group) that no scope around the
    attempt asked for: a middleware's own cancel scope (``move_on_after``, ``fail_after``
    around its ``yield``) cancelled the attempt. Nothing outside the attempt would catch
    it, so it may not go on up."""
    return (
        _outcome_of(error) is AttemptOutcome.CANCELLED
        and trio.current_effective_deadline() != -math.inf
    )


def _unless_orphaned(
    middleware: Middleware, attempt: AttemptInfo, error: BaseException
) -> BaseException:
    """``error``, the attempt's exception after ``middleware`` exited; or, when it is a
    cancellation no scope around the attempt asked for (a middleware's cancel scope whose
    ``Cancelled`` got past it or that it swallowed), a :class:`MiddlewareError` in its
    place: the attempt failed, and follows its task's retry rules."""
    if not _own_cancellation(error):
        return error
    failure = MiddlewareError(
        f"the attempt of task {attempt.task_name!r} (message {attempt.message_id}) was "
        f"cancelled inside middleware {_name(middleware)} by a cancel scope of a "
        "middleware, not by its task's cancellation nor by the runner: the attempt failed"
    )
    failure.__cause__ = error
    attempt._ended(None, failure)
    return failure


class AttemptHooks:
    """The ``around_attempt`` hooks of a list of middleware, run around one attempt.

    ``report`` receives each :class:`MiddlewareError` (a middleware that swallowed an
    exception or a cancellation); the runner reports it through ``errors()``.
    """

    __slots__ = ("_middleware", "_report")

    def __init__(
        self, middleware: Sequence[Middleware], report: Callable[[MiddlewareError], None]
    ) -> None:
        self._middleware = tuple(m for m in middleware if _overrides(m, "around_attempt"))
        self._report = report

    def __bool__(self) -> bool:
        return bool(self._middleware)

    async def run(self, attempt: AttemptInfo, body: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``body`` inside every middleware (the first outermost); return what it
        returned, or raise what the attempt ended with (see the module's rules)."""
        entered: list[tuple[Middleware, AbstractAsyncContextManager[object]]] = []
        error: BaseException | None = None
        result: Any = None
        try:
            for middleware in self._middleware:
                manager = middleware.around_attempt(attempt)
                await manager.__aenter__()
                entered.append((middleware, manager))
            result = await body()
        except BaseException as exc:  # noqa: BLE001 - given to each middleware's exit
            error = exc
        attempt._ended(result, error)
        for middleware, manager in reversed(entered):
            error = await self._exit(middleware, manager, attempt, error)
        if error is not None:
            try:
                raise error
            finally:
                del error  # no reference cycle through this frame
        return result

    async def _exit(
        self,
        middleware: Middleware,
        manager: AbstractAsyncContextManager[object],
        attempt: AttemptInfo,
        error: BaseException | None,
    ) -> BaseException | None:
        """Exit one middleware with ``error``; return the attempt's exception after it."""
        try:
            if error is None:
                swallowed = await manager.__aexit__(None, None, None)
            else:
                swallowed = await manager.__aexit__(type(error), error, error.__traceback__)
        except BaseException as exc:  # noqa: BLE001 - it raised: the attempt's error now
            if (
                error is not None
                and exc is not error
                and _must_pass(error)
                and not _must_pass(exc)
                and not _own_cancellation(error)
            ):
                broken = MiddlewareError(
                    f"middleware {_name(middleware)} raised {exc!r:.200} in place of a "
                    f"cancellation of task {attempt.task_name!r} (message "
                    f"{attempt.message_id}); the cancellation goes on"
                )
                broken.__cause__ = exc
                self._report(broken)
                return error
            attempt._ended(None, exc)
            return _unless_orphaned(middleware, attempt, exc)
        if swallowed and error is not None and _own_cancellation(error):
            return _unless_orphaned(middleware, attempt, error)
        if swallowed and error is not None:
            what = "a cancellation" if _must_pass(error) else f"the exception {error!r:.200}"
            broken = MiddlewareError(
                f"middleware {_name(middleware)} swallowed {what} of task "
                f"{attempt.task_name!r} (message {attempt.message_id}): a middleware "
                "observes an attempt and may not swallow its exception; it stands "
                "(raise another exception to change the outcome)"
            )
            broken.__cause__ = error
            self._report(broken)
        return error


class DispatchHooks:
    """The ``on_dispatch`` hooks of a list of middleware."""

    __slots__ = ("_middleware",)

    def __init__(self, middleware: Sequence[Middleware]) -> None:
        self._middleware = tuple(m for m in middleware if _overrides(m, "on_dispatch"))

    def __bool__(self) -> bool:
        return bool(self._middleware)

    async def run(self, dispatch: DispatchInfo) -> dict[str, str]:
        """Call each hook in order (awaiting the async ones); return the headers.

        Raises:
            MiddlewareError: A hook raised (``__cause__``); the dispatch fails.
        """
        for middleware in self._middleware:
            try:
                done = middleware.on_dispatch(dispatch)
                if inspect.isawaitable(done):
                    await done
            except Exception as exc:
                raise MiddlewareError(
                    f"the on_dispatch hook of middleware {_name(middleware)} raised for "
                    f"task {dispatch.task_name!r}: {exc!r:.300}; nothing was dispatched"
                ) from exc
        return dispatch.headers
