"""``capture_errors``: what a runner captured becomes a test failure unless consumed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from types import TracebackType

import trio

from ..runner import Runner

__all__ = ["CapturedErrors", "capture_errors"]


def _caused_by(
    error: BaseException, exc_type: type[BaseException] | tuple[type[BaseException], ...]
) -> BaseException | None:
    """``error`` or the first exception in its cause chain that is an ``exc_type``."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, exc_type):
            return current
        seen.add(id(current))
        current = current.__cause__
    return None


class CapturedErrors:
    """Errors a runner captured; see [``capture_errors``][trunner.testing.capture_errors].

    The errors are taken from the runner's error log as you look (``len``, iteration,
    [``pop``][trunner.testing.CapturedErrors.pop],
    [``expect``][trunner.testing.CapturedErrors.expect] ...): another reader of
    ``runner.errors()`` would miss them.
    """

    def __init__(self, runner: Runner) -> None:
        if not isinstance(runner, Runner):
            raise TypeError(f"capture_errors() takes a Runner, got {type(runner).__name__}")
        self.runner = runner
        """The runner whose errors are collected."""
        self._errors: list[BaseException] = []

    def _collect(self) -> list[BaseException]:
        buffer = self.runner._errors._buffer
        while buffer:
            self._errors.append(buffer.popleft())
        return self._errors

    def __len__(self) -> int:
        return len(self._collect())

    def __iter__(self) -> Iterator[BaseException]:
        return iter(list(self._collect()))

    def __repr__(self) -> str:
        return f"<CapturedErrors of {self.runner!r}: {self._collect()!r}>"

    def clear(self) -> list[BaseException]:
        """Consume every error captured so far.

        Returns:
            The errors, oldest first.
        """
        errors, self._errors = list(self._collect()), []
        return errors

    def pop(self) -> BaseException:
        """Consume the oldest error.

        Returns:
            The error.

        Raises:
            AssertionError: No error was captured.
        """
        errors = self._collect()
        if not errors:
            raise AssertionError(f"{self.runner!r} captured no error")
        return errors.pop(0)

    def _find(
        self,
        exc_type: type[BaseException] | tuple[type[BaseException], ...],
        match: str | None,
    ) -> BaseException | None:
        for index, error in enumerate(self._collect()):
            found = _caused_by(error, exc_type)
            if found is not None and (match is None or re.search(match, str(found))):
                del self._errors[index]
                return found
        return None

    def expect(
        self,
        exc_type: type[BaseException] | tuple[type[BaseException], ...] = Exception,
        match: str | None = None,
    ) -> BaseException:
        """Consume the oldest error that is, or was caused by, an ``exc_type``.

        ``expect(ValueError)`` finds the [``TaskFailed``][trunner.TaskFailed] of a task
        that raised ``ValueError``, and returns the ``ValueError``.

        Args:
            exc_type: An exception class, or a tuple of them.
            match: A regular expression the exception's text must match.

        Returns:
            The matching exception (in the cause chain of the captured error).

        Raises:
            AssertionError: No captured error matches.
        """
        found = self._find(exc_type, match)
        if found is None:
            raise AssertionError(
                f"no captured error matches {_about(exc_type, match)}; captured: {self._errors!r}"
            )
        return found

    async def wait_for(
        self,
        exc_type: type[BaseException] | tuple[type[BaseException], ...] = Exception,
        match: str | None = None,
    ) -> BaseException:
        """Like [``expect``][trunner.testing.CapturedErrors.expect], but wait until such an
        error is captured.

        Raises:
            AssertionError: The runner stopped without capturing one.
        """
        errors = aiter(self.runner.errors())
        while True:
            found = self._find(exc_type, match)
            if found is not None:
                await trio.lowlevel.checkpoint()
                return found
            try:
                self._errors.append(await anext(errors))
            except StopAsyncIteration:
                raise AssertionError(
                    f"{self.runner!r} stopped without capturing {_about(exc_type, match)}; "
                    f"captured: {self._errors!r}"
                ) from None

    def check(self) -> None:
        """Raise the oldest error not consumed, if any: what leaving the block does.

        A note on it names the other errors not consumed.
        """
        errors = self._collect()
        if not errors:
            return
        first = errors[0]
        if len(errors) > 1:
            others = "; ".join(f"{type(e).__name__}: {e}" for e in errors[1:6])
            more = f" and {len(errors) - 6} more" if len(errors) > 6 else ""
            first.add_note(f"capture_errors: {len(errors) - 1} more not consumed: {others}{more}")
        first.add_note(
            f"capture_errors: {self.runner!r} captured this error and the test did not "
            "consume it (use pop(), expect() or clear())"
        )
        raise first

    def __enter__(self) -> CapturedErrors:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.check()

    async def __aenter__(self) -> CapturedErrors:
        await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await trio.lowlevel.checkpoint()
        self.__exit__(exc_type, exc, tb)


def _about(
    exc_type: type[BaseException] | tuple[type[BaseException], ...], match: str | None
) -> str:
    types = exc_type if isinstance(exc_type, tuple) else (exc_type,)
    text = " or ".join(t.__name__ for t in types)
    return text + (f" matching {match!r}" if match is not None else "")


def capture_errors(runner: Runner) -> CapturedErrors:
    """Collect the errors ``runner`` captures: what ``runner.errors()`` yields.

    Use it as ``with capture_errors(runner) as errors:`` (or ``async with``). Leaving the
    block raises the oldest error the test did not consume with
    [``pop``][trunner.testing.CapturedErrors.pop],
    [``expect``][trunner.testing.CapturedErrors.expect],
    [``wait_for``][trunner.testing.CapturedErrors.wait_for] or
    [``clear``][trunner.testing.CapturedErrors.clear], with a note naming the others. An
    exception raised in the block leaves as itself.

    Args:
        runner: The runner.

    Returns:
        A [``CapturedErrors``][trunner.testing.CapturedErrors], a context manager.

    Raises:
        TypeError: ``runner`` is not a [``Runner``][trunner.Runner].
    """
    return CapturedErrors(runner)
