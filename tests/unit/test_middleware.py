"""The middleware contract, without Redis: order, what a middleware sees of an attempt's
outcome, what it may not swallow, and the dispatch hooks (eager mode runs them as a runner
does)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import pytest
import trio

import trunner
from trunner._context import Given
from trunner._hooks import AttemptHooks, DispatchHooks
from trunner.message import TaskMessage
from trunner.middleware import check_middleware


class Recorder(trunner.Middleware):
    """Records its enters and exits in a shared log, with the outcome it saw."""

    def __init__(self, name: str, log: list[Any]) -> None:
        self.name = name
        self.log = log

    @contextlib.asynccontextmanager
    async def around_attempt(self, attempt: trunner.middleware.AttemptInfo) -> AsyncIterator[None]:
        self.log.append((self.name, "enter", attempt.task_name, attempt.attempt))
        try:
            yield
        finally:
            self.log.append((self.name, "exit", attempt.outcome, attempt.result, attempt.error))

    def on_dispatch(self, dispatch: trunner.middleware.DispatchInfo) -> None:
        self.log.append((self.name, "dispatch", dict(dispatch.headers)))
        dispatch.headers[self.name] = str(len(dispatch.headers))


class Swallower(trunner.Middleware):
    """Returns True from ``__aexit__``, whatever it is given."""

    def around_attempt(self, attempt: trunner.middleware.AttemptInfo) -> Swallower:
        return self

    async def __aenter__(self) -> None:
        pass

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        return True


class RaisesOnExit(trunner.Middleware):
    def __init__(self, error: BaseException) -> None:
        self.error = error

    @contextlib.asynccontextmanager
    async def around_attempt(self, attempt: trunner.middleware.AttemptInfo) -> AsyncIterator[None]:
        try:
            yield
        finally:
            raise self.error


def ignore(_: trunner.errors.MiddlewareError) -> None:
    pass


def message(name: str = "t") -> Given:
    return Given(TaskMessage("1-0", name, None, 1, 0.0, "1-0", headers={"h": "v"}))


def registry() -> tuple[trunner.TaskRegistry, list[Any]]:
    tasks = trunner.TaskRegistry()
    seen: list[Any] = []

    @tasks.task(max_retry=2)
    async def flaky(payload: Any) -> Any:
        message = trunner.current_message()
        seen.append((message.attempt, dict(message.headers)))
        if message.attempt < payload:
            raise RuntimeError(f"attempt {message.attempt}")
        return {"done": message.attempt}

    return tasks, seen


async def test_the_first_middleware_is_the_outermost_and_sees_each_attempt() -> None:
    tasks, seen = registry()
    log: list[Any] = []
    chain = [Recorder("a", log), Recorder("b", log)]
    assert await tasks.call("flaky", 2, headers={"x": "1"}, middleware=chain) == {"done": 2}
    # The dispatch hooks ran once, first first, and the task saw their headers.
    assert log[:2] == [("a", "dispatch", {"x": "1"}), ("b", "dispatch", {"x": "1", "a": "1"})]
    expected = {"x": "1", "a": "1", "b": "2"}
    assert seen == [(1, expected), (2, expected)]
    failed = log[4][4]
    assert isinstance(failed, RuntimeError)
    assert log[2:] == [
        ("a", "enter", "flaky", 1),
        ("b", "enter", "flaky", 1),
        ("b", "exit", trunner.middleware.AttemptOutcome.FAILED, None, failed),
        ("a", "exit", trunner.middleware.AttemptOutcome.FAILED, None, failed),
        ("a", "enter", "flaky", 2),
        ("b", "enter", "flaky", 2),
        ("b", "exit", trunner.middleware.AttemptOutcome.SUCCEEDED, {"done": 2}, None),
        ("a", "exit", trunner.middleware.AttemptOutcome.SUCCEEDED, {"done": 2}, None),
    ]


class Retries(trunner.Middleware):
    """Records ``(attempt, outcome, will_retry)`` as each attempt exits."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, trunner.middleware.AttemptOutcome | None, bool]] = []

    @contextlib.asynccontextmanager
    async def around_attempt(self, attempt: trunner.middleware.AttemptInfo) -> AsyncIterator[None]:
        assert not attempt.will_retry  # running
        try:
            yield
        finally:
            self.seen.append((attempt.attempt, attempt.outcome, attempt.will_retry))


async def test_an_attempt_tells_whether_its_task_is_retried_after_it() -> None:
    tasks, _ = registry()

    @tasks.task(max_retry=3, give_up_on=[KeyError])
    async def gives_up(payload: Any) -> None:
        if trunner.current_message().attempt == 1:
            raise RuntimeError("retried")
        raise (KeyError if payload == "key" else trunner.GiveUp)("given up")

    failed, ok = (
        trunner.middleware.AttemptOutcome.FAILED,
        trunner.middleware.AttemptOutcome.SUCCEEDED,
    )
    spy = Retries()
    assert await tasks.call("flaky", 2, middleware=[spy]) == {"done": 2}
    assert spy.seen == [(1, failed, True), (2, ok, False)]
    spy = Retries()
    with pytest.raises(trunner.MaxRetryExceeded):
        await tasks.call("flaky", 9, middleware=[spy])
    assert spy.seen == [(1, failed, True), (2, failed, True), (3, failed, False)]
    for payload in ("key", "give up"):
        spy = Retries()
        with pytest.raises(trunner.MaxRetryExceeded):
            await tasks.call("gives_up", payload, middleware=[spy])
        assert spy.seen == [(1, failed, True), (2, failed, False)]


async def test_a_timed_out_attempt_is_seen_as_such(autojump_clock: trio.abc.Clock) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.task(timeout=5.0)
    async def slow(_: Any) -> None:
        await trio.sleep_forever()

    log: list[Any] = []
    with pytest.raises(trunner.MaxRetryExceeded) as caught:
        await tasks.call("slow", None, middleware=[Recorder("a", log)])
    assert isinstance(caught.value.__cause__, trunner.TaskTimeout)
    assert log[-1][:3] == ("a", "exit", trunner.middleware.AttemptOutcome.TIMED_OUT)
    assert log[-1][4] is caught.value.__cause__


async def test_a_cancelled_attempt_is_seen_as_such_and_the_cancellation_goes_on() -> None:
    tasks = trunner.TaskRegistry()
    started = trio.Event()

    @tasks.task
    async def hang(_: Any) -> None:
        started.set()
        await trio.sleep_forever()

    log: list[Any] = []
    async with trio.open_nursery() as nursery:

        async def call() -> None:
            await tasks.call("hang", None, middleware=[Recorder("a", log)])
            raise AssertionError("not reached: the call is cancelled")

        nursery.start_soon(call)
        await started.wait()
        nursery.cancel_scope.cancel()
    assert log[-1][:3] == ("a", "exit", trunner.middleware.AttemptOutcome.CANCELLED)
    assert isinstance(log[-1][4], trio.Cancelled)


@pytest.mark.parametrize(
    "failure",
    [RuntimeError("boom"), trio.Cancelled._create()],
    ids=["exception", "cancelled"],
)
async def test_a_middleware_cannot_swallow_what_the_attempt_raised(failure: BaseException) -> None:
    broken: list[trunner.errors.MiddlewareError] = []
    hooks = AttemptHooks([Swallower()], broken.append)

    async def body() -> None:
        raise failure

    with trio.CancelScope() as scope:  # what a Cancelled reaching a middleware comes from
        scope.cancel()
        with pytest.raises(type(failure)) as caught:
            await hooks.run(trunner.middleware.AttemptInfo(message(), "g"), body)
    assert caught.value is failure
    (error,) = broken
    assert error.__cause__ is failure
    assert "Swallower swallowed" in str(error)
    assert ("a cancellation" in str(error)) == isinstance(failure, trio.Cancelled)


async def test_a_cancellation_in_a_group_cannot_be_swallowed_either() -> None:
    broken: list[trunner.errors.MiddlewareError] = []
    hooks = AttemptHooks([Swallower()], broken.append)
    group = BaseExceptionGroup("", [trio.Cancelled._create(), ValueError("x")])

    async def body() -> None:
        raise group

    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(BaseExceptionGroup) as caught:
            await hooks.run(trunner.middleware.AttemptInfo(message(), "g"), body)
    assert caught.value is group
    assert len(broken) == 1


async def test_an_error_raised_in_place_of_a_cancellation_does_not_replace_it() -> None:
    broken: list[trunner.errors.MiddlewareError] = []
    replacement = RuntimeError("instead")
    hooks = AttemptHooks([RaisesOnExit(replacement)], broken.append)
    cancelled = trio.Cancelled._create()

    async def body() -> None:
        raise cancelled

    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await hooks.run(trunner.middleware.AttemptInfo(message(), "g"), body)
    (error,) = broken
    assert error.__cause__ is replacement
    assert "in place of a cancellation" in str(error)


class TimeLimit(trunner.Middleware):
    """Bounds each attempt with a cancel scope of its own, and records what it saw."""

    def __init__(self, log: list[Any], *, fail: bool) -> None:
        self.log = log
        self.fail = fail

    @contextlib.asynccontextmanager
    async def around_attempt(self, attempt: trunner.middleware.AttemptInfo) -> AsyncIterator[None]:
        try:
            if self.fail:
                with trio.fail_after(1.0):  # raises TooSlowError in place of the Cancelled
                    yield
            else:
                with trio.move_on_after(1.0):  # swallows its own Cancelled
                    yield
        finally:
            self.log.append(("limit", attempt.outcome))


@pytest.mark.parametrize("fail", [False, True], ids=["move_on_after", "fail_after"])
async def test_a_middleware_cancel_scope_fails_the_attempt_it_cancels(
    autojump_clock: trio.abc.Clock, fail: bool
) -> None:
    # Nothing around the attempt was cancelled: the Cancelled belongs to the middleware's
    # own scope. Going on up, it would reach a scope that was never cancelled — in a
    # runner, the message was never acknowledged nor retried, and stayed pending.
    tasks = trunner.TaskRegistry()
    attempts: list[int] = []

    @tasks.task(max_retry=1)
    async def slow(_: Any) -> None:
        attempts.append(trunner.current_message().attempt)
        await trio.sleep_forever()

    log: list[Any] = []
    chain = [Recorder("outer", log), TimeLimit(log, fail=fail)]
    raised: BaseException | None = None
    try:  # not pytest.raises: a stray Cancelled would end this test silently, as passed
        await tasks.call("slow", None, middleware=chain)
    except BaseException as exc:  # noqa: BLE001 - what the call raised is the finding
        raised = exc
    assert isinstance(raised, trunner.MaxRetryExceeded), repr(raised)
    assert attempts == [1, 2], "a failure: retried by the task's rules"
    cause = raised.__cause__
    if fail:
        assert isinstance(cause, trio.TooSlowError)
    else:
        assert isinstance(cause, trunner.errors.MiddlewareError)
        assert "cancel scope of a middleware" in str(cause)
        assert isinstance(cause.__cause__, trio.Cancelled)
    assert ("limit", trunner.middleware.AttemptOutcome.CANCELLED) in log
    exits = [entry for entry in log if entry[:2] == ("outer", "exit")]
    assert [entry[2] for entry in exits] == [trunner.middleware.AttemptOutcome.FAILED] * 2
    assert exits[-1][4] is cause


async def test_an_error_a_middleware_raises_becomes_the_attempts() -> None:
    broken: list[trunner.errors.MiddlewareError] = []
    log: list[Any] = []
    replacement = ValueError("from the middleware")
    hooks = AttemptHooks([Recorder("outer", log), RaisesOnExit(replacement)], broken.append)

    async def body() -> int:
        return 7

    with pytest.raises(ValueError, match="from the middleware"):
        await hooks.run(trunner.middleware.AttemptInfo(message(), "g"), body)
    assert broken == [], "raising is allowed: it is how a middleware changes the outcome"
    assert log[-1] == ("outer", "exit", trunner.middleware.AttemptOutcome.FAILED, None, replacement)


async def test_a_middleware_that_fails_to_enter_skips_the_body() -> None:
    log: list[Any] = []

    class Refuses(trunner.Middleware):
        def around_attempt(self, attempt: trunner.middleware.AttemptInfo) -> Any:
            raise LookupError("no")

    ran = False

    async def body() -> None:
        nonlocal ran
        ran = True

    hooks = AttemptHooks([Recorder("outer", log), Refuses()], ignore)
    with pytest.raises(LookupError):
        await hooks.run(trunner.middleware.AttemptInfo(message(), "g"), body)
    assert not ran
    assert log[-1][2] is trunner.middleware.AttemptOutcome.FAILED


async def test_the_attempt_info_shows_the_message() -> None:
    info = trunner.middleware.AttemptInfo(message("send"), "emails")
    assert (info.task_name, info.message_id, info.task_id, info.attempt) == (
        "send",
        "1-0",
        "1-0",
        1,
    )
    assert info.headers == {"h": "v"}
    assert info.group == "emails"
    assert (info.outcome, info.result, info.error) == (None, None, None)
    assert "send" in repr(info)


async def test_eager_mode_raises_what_a_runner_would_report() -> None:
    tasks, _ = registry()
    with pytest.raises(trunner.errors.MiddlewareError, match="swallowed"):
        await tasks.call("flaky", 2, middleware=[Swallower()])


async def test_dispatch_hooks_may_be_async_and_their_errors_fail_the_dispatch() -> None:
    calls: list[str] = []

    class Async(trunner.Middleware):
        async def on_dispatch(self, dispatch: trunner.middleware.DispatchInfo) -> None:
            await trio.lowlevel.checkpoint()
            calls.append(dispatch.task_name)
            dispatch.headers["async"] = "yes"

    class Broken(trunner.Middleware):
        def on_dispatch(self, dispatch: trunner.middleware.DispatchInfo) -> None:
            raise KeyError("tenant")

    info = trunner.middleware.DispatchInfo("t", None, {}, "g")
    assert await DispatchHooks([Async()]).run(info) == {"async": "yes"}
    assert calls == ["t"]
    with pytest.raises(
        trunner.errors.MiddlewareError, match="Broken raised for task 't'"
    ) as caught:
        await DispatchHooks([Async(), Broken()]).run(
            trunner.middleware.DispatchInfo("t", None, {}, "g")
        )
    assert isinstance(caught.value.__cause__, KeyError)
    tasks, seen = registry()
    with pytest.raises(trunner.errors.MiddlewareError):
        await tasks.call("flaky", 1, middleware=[Broken()])
    assert seen == [], "nothing ran"


async def test_headers_a_hook_leaves_bad_are_refused_and_blamed_on_the_hooks() -> None:
    class Bad(trunner.Middleware):
        def on_dispatch(self, dispatch: trunner.middleware.DispatchInfo) -> None:
            dispatch.headers["n"] = 1  # type: ignore[assignment]

    tasks, _ = registry()
    with pytest.raises(trunner.errors.InvalidHeaders, match="must map str to str"):
        await tasks.call("flaky", 1, middleware=[Bad()])


def test_a_hook_left_as_it_is_is_not_run() -> None:
    class DispatchOnly(trunner.Middleware):
        def on_dispatch(self, dispatch: trunner.middleware.DispatchInfo) -> None:
            pass

    class AttemptOnly(trunner.Middleware):
        def around_attempt(self, attempt: trunner.middleware.AttemptInfo) -> Any:
            return contextlib.nullcontext()

    assert not AttemptHooks([DispatchOnly()], ignore)
    assert AttemptHooks([AttemptOnly()], ignore)
    assert not DispatchHooks([AttemptOnly()])
    assert DispatchHooks([DispatchOnly()])


def test_middleware_is_a_list_of_middleware() -> None:
    one = Recorder("a", [])
    assert check_middleware([one]) == (one,)
    assert trunner.RunnerConfig(consumer_group="g", middleware=[one]).middleware == (one,)
    with pytest.raises(TypeError, match="got one Middleware"):
        trunner.RunnerConfig(consumer_group="g", middleware=one)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="subclass it"):
        trunner.RunnerConfig(consumer_group="g", middleware=[contextlib.nullcontext])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="must be a list"):
        trunner.RunnerConfig(consumer_group="g", middleware="a")  # type: ignore[arg-type]


def test_a_give_up_inside_an_exception_group_gives_up() -> None:
    from trunner._util import gives_up  # noqa: PLC0415 - the rule under test

    group = ExceptionGroup("nursery", [trunner.GiveUp("no"), ValueError("x")])
    assert gives_up(group)
    assert gives_up(ExceptionGroup("n", [KeyError("a"), KeyError("b")]), (KeyError,))
    assert not gives_up(ExceptionGroup("n", [KeyError("a"), OSError("b")]), (KeyError,))
    assert not gives_up(ExceptionGroup("n", [ValueError("x")]))
    assert gives_up(trunner.GiveUp("no"))
    assert gives_up(KeyError("a"), (KeyError,))
    assert not gives_up(ValueError("x"), (KeyError,))
