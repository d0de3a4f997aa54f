"""Task and TaskRegistry: registration, validation, the retry backoff, and cron schedules."""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable
from typing import Any

import attrs
import pytest

import trunner
import trunner._task
import trunner.registry
import trunner.schedule
import trunner.task
from trunner import Task, TaskNotFound, TaskRegistry, TrunnerError
from trunner.schedule import CronSchedule

from ..conftest import config


async def noop(payload: Any) -> None:
    pass


class AsyncCallable:
    async def __call__(self, payload: Any) -> None:
        pass


def bounds(base: float, cap: float, attempt: int) -> tuple[float, float]:
    upper = min(cap, base * 2 ** (attempt - 1))
    return 0.5 * upper, upper


class _FixedRandom:
    def __init__(self, pick: Callable[[float, float], float]) -> None:
        self.pick = pick
        self.calls: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.calls.append((a, b))
        return self.pick(a, b)


# -- the decorator ---------------------------------------------------------------------------


def test_bare_decorator_registers_under_the_function_name() -> None:
    tasks = TaskRegistry()

    async def send_email(payload: Any) -> None:
        pass

    decorated = tasks.task(send_email)
    assert decorated is send_email
    task = tasks.get("send_email")
    assert task.name == "send_email"
    assert task.action is send_email
    assert task.max_retry == 0
    assert task.max_attempts == 1
    assert task.retry_backoff == 1.0
    assert task.retry_backoff_max == 3600.0
    assert task.reservation_timeout is None


def test_decorator_syntax_forms() -> None:
    tasks = TaskRegistry()

    @tasks.task
    async def plain(payload: Any) -> str:
        return "plain"

    @tasks.task()
    async def called(payload: Any) -> str:
        return "called"

    @tasks.task("renamed", max_retry=3)
    async def original(payload: Any) -> str:
        return "original"

    assert tasks.names == frozenset({"plain", "called", "renamed"})
    assert len(tasks) == 3
    assert "plain" in tasks
    assert "original" not in tasks
    # the functions are returned unchanged
    assert tasks.get("plain").action is plain
    assert tasks.get("called").action is called
    assert tasks.get("renamed").action is original
    assert original.__name__ == "original"
    assert tasks.get("renamed").max_retry == 3
    assert tasks.get("renamed").max_attempts == 4
    assert tasks.get("plain").max_retry == 0
    assert {task.name for task in tasks} == {"plain", "called", "renamed"}


def test_decorator_passes_the_retry_policy() -> None:
    tasks = TaskRegistry()

    def backoff(attempt: int) -> float:
        return 2.0

    @tasks.task(
        name="policy",
        max_retry=5,
        retry_backoff=backoff,
        retry_backoff_max=60.0,
        reservation_timeout=12.5,
    )
    async def action(payload: Any) -> None:
        pass

    task = tasks.get("policy")
    assert task.max_retry == 5
    assert task.max_attempts == 6
    assert task.retry_backoff is backoff
    assert task.retry_backoff_max == 60.0
    assert task.reservation_timeout == 12.5


@pytest.mark.parametrize("max_retry", [0, 1, 2, 7, 100])
def test_max_attempts_is_max_retry_plus_one(max_retry: int) -> None:
    assert Task("t", noop, max_retry=max_retry).max_attempts == max_retry + 1


def test_duplicate_names_raise() -> None:
    tasks = TaskRegistry()
    tasks.task("job")(noop)

    async def other(payload: Any) -> None:
        pass

    with pytest.raises(ValueError, match="job"):
        tasks.task("job")(other)
    tasks.task(noop)
    with pytest.raises(ValueError, match="noop"):
        tasks.task(noop)
    with pytest.raises(ValueError, match="job"):
        tasks.register(Task("job", other))
    assert tasks.get("job").action is noop
    assert len(tasks) == 2


def test_a_plain_def_is_a_task_run_in_a_thread() -> None:
    tasks = TaskRegistry()

    def sync(payload: Any) -> None:
        pass

    assert tasks.task(sync) is sync
    assert tasks.get("sync").run_in == "thread"
    tasks.task("lambda")(lambda payload: None)
    assert tasks.get("lambda").run_in == "thread"
    assert not tasks.get("sync").plain, "a thread's body is not the pool's inline path"


def cpu_bound(payload: Any) -> int:
    return 1


def test_run_in_must_fit_the_action() -> None:
    async def coroutine(payload: Any) -> None:
        pass

    assert Task("t", cpu_bound, run_in="thread").run_in == "thread"
    assert Task("l", coroutine).run_in == "loop"
    with pytest.raises(TypeError, match="plain 'def'"):
        Task("t", coroutine, run_in="thread")
    with pytest.raises(TypeError, match="plain 'def'"):
        Task("t", coroutine, run_in="process")
    with pytest.raises(TypeError, match="'async def'"):
        Task("t", cpu_bound, run_in="loop")
    assert Task("t", cpu_bound, run_in="process").run_in == "process"

    def nested(payload: Any) -> None:
        pass

    with pytest.raises(TypeError, match="top level of a module"):
        Task("t", nested, run_in="process")
    with pytest.raises(TypeError, match="top level of a module"):
        Task("t", lambda payload: None, run_in="process")
    with pytest.raises(ValueError, match="run_in"):
        Task("t", cpu_bound, run_in="elsewhere")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "action",
    [
        None,
        42,
        "noop",
    ],
)
def test_non_async_actions_are_rejected(action: object) -> None:
    with pytest.raises(TypeError, match="action"):
        Task("t", action)  # type: ignore[arg-type]


def test_a_generator_is_rejected() -> None:
    def gen(payload: Any) -> Any:
        yield payload

    with pytest.raises(TypeError, match="action"):
        Task("t", gen)


def test_a_class_with_async_call_is_not_an_async_action() -> None:
    # Calling the class builds an instance (here: fails, it takes no payload); it never
    # returns an awaitable, so it is a sync callable like any other.
    with pytest.raises(TypeError, match="action"):
        Task("t", AsyncCallable)  # type: ignore[arg-type]


def test_async_generator_is_rejected() -> None:
    async def agen(payload: Any) -> Any:
        yield payload

    with pytest.raises(TypeError, match="action"):
        Task("t", agen)


def test_object_with_async_call_is_accepted() -> None:
    tasks = TaskRegistry()
    instance = AsyncCallable()
    assert tasks.task("callable")(instance) is instance
    assert tasks.get("callable").action is instance
    assert Task("direct", instance).action is instance


def test_get_of_an_unknown_name_raises_task_not_found() -> None:
    tasks = TaskRegistry()
    tasks.task(noop)
    with pytest.raises(TaskNotFound, match="missing") as info:
        tasks.get("missing")
    assert info.value.task_name == "missing"
    assert isinstance(info.value, LookupError)
    assert isinstance(info.value, TrunnerError)
    assert trunner.TaskNotFound is TaskNotFound
    with pytest.raises(LookupError):
        tasks.get("Noop")


@pytest.mark.parametrize("thing", [noop, "noop", None, object()])
def test_register_rejects_a_non_task(thing: object) -> None:
    tasks = TaskRegistry()
    with pytest.raises(TypeError, match="Task"):
        tasks.register(thing)  # type: ignore[arg-type]
    assert len(tasks) == 0


def test_register_returns_the_task() -> None:
    tasks = TaskRegistry()
    task = Task("t", noop, max_retry=2)
    assert tasks.register(task) is task
    assert tasks.get("t") is task
    assert list(tasks) == [task]


def test_iterating_is_safe_while_registering() -> None:
    tasks = TaskRegistry()
    tasks.register(Task("a", noop))
    for task in tasks:
        tasks.register(Task(task.name + "2", noop))
    assert tasks.names == {"a", "a2"}


def test_task_is_frozen() -> None:
    task = Task("t", noop)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        task.max_retry = 3  # type: ignore[misc]


# -- validation ------------------------------------------------------------------------------

INVALID_OPTIONS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"max_retry": -1}, ValueError, "max_retry"),
    ({"max_retry": True}, TypeError, "max_retry"),
    ({"max_retry": False}, TypeError, "max_retry"),
    ({"max_retry": 1.0}, TypeError, "max_retry"),
    ({"max_retry": "3"}, TypeError, "max_retry"),
    ({"retry_backoff": -1.0}, ValueError, "retry_backoff"),
    ({"retry_backoff": -0.001}, ValueError, "retry_backoff"),
    ({"retry_backoff": math.nan}, ValueError, "retry_backoff"),
    ({"retry_backoff": math.inf}, ValueError, "retry_backoff"),
    ({"retry_backoff": "1"}, TypeError, "retry_backoff"),
    ({"retry_backoff": True}, TypeError, "retry_backoff"),
    ({"retry_backoff_max": 0}, ValueError, "retry_backoff_max"),
    ({"retry_backoff_max": -5.0}, ValueError, "retry_backoff_max"),
    ({"retry_backoff_max": math.inf}, ValueError, "retry_backoff_max"),
    ({"retry_backoff_max": None}, TypeError, "retry_backoff_max"),
    ({"reservation_timeout": 0}, ValueError, "reservation_timeout"),
    ({"reservation_timeout": 0.0}, ValueError, "reservation_timeout"),
    ({"reservation_timeout": -1}, ValueError, "reservation_timeout"),
    ({"reservation_timeout": math.nan}, ValueError, "reservation_timeout"),
    ({"reservation_timeout": "10"}, TypeError, "reservation_timeout"),
    ({"max_redeliveries": -1}, ValueError, "max_redeliveries"),
    ({"max_redeliveries": True}, TypeError, "max_redeliveries"),
    ({"max_redeliveries": 2.0}, TypeError, "max_redeliveries"),
    ({"max_redeliveries": None}, TypeError, "max_redeliveries"),
    ({"timeout": 0}, ValueError, "timeout"),
    ({"timeout": "5"}, TypeError, "timeout"),
    ({"keep_result": -1.0}, ValueError, "keep_result"),
    ({"keep_result": math.nan}, ValueError, "keep_result"),
]


@pytest.mark.parametrize(("options", "error", "field"), INVALID_OPTIONS)
def test_invalid_options_raise_clear_errors(
    options: dict[str, Any], error: type[Exception], field: str
) -> None:
    with pytest.raises(error, match=field):
        Task("t", noop, **options)
    tasks = TaskRegistry()
    with pytest.raises(error, match=field):
        tasks.task("t", **options)(noop)
    assert len(tasks) == 0
    with pytest.raises(error, match=field):
        trunner.TaskDefaults(**options)


# -- defaults ------------------------------------------------------------------------------


def test_the_defaults_run_a_crashed_task_again_and_retry_no_failure() -> None:
    task = Task("t", noop)
    assert (task.max_retry, task.max_redeliveries) == (0, 3)
    tasks = TaskRegistry()
    assert tasks.defaults == trunner.TaskDefaults()
    tasks.task(noop)
    assert tasks.get("noop") == attrs.evolve(task, name="noop")


def backoff_of_three(attempt: int) -> float:
    return 3.0


ALL_DEFAULTS = trunner.TaskDefaults(
    max_retry=4,
    max_redeliveries=1,
    retry_backoff=backoff_of_three,
    retry_backoff_max=60.0,
    reservation_timeout=9.0,
    timeout=30.0,
    keep_result=600.0,
)


def test_registry_defaults_apply_to_every_option_a_task_does_not_set() -> None:
    tasks = TaskRegistry(defaults=ALL_DEFAULTS)

    @tasks.task
    async def plain(payload: Any) -> None:
        pass

    task = tasks.get("plain")
    for name, value in attrs.asdict(ALL_DEFAULTS, recurse=False).items():
        assert getattr(task, name) == value, name
    assert task.max_attempts == 5
    assert not task.plain, "its timeout and kept result take the options path"


def test_a_tasks_own_options_win_over_the_registry_defaults() -> None:
    tasks = TaskRegistry(defaults=ALL_DEFAULTS)

    @tasks.task(max_retry=0, max_redeliveries=5, retry_backoff=0, timeout=None, keep_result=None)
    async def own(payload: Any) -> None:
        pass

    task = tasks.get("own")
    assert (task.max_retry, task.max_redeliveries, task.retry_backoff) == (0, 5, 0)
    assert (task.timeout, task.keep_result) == (None, None), "None: none, whatever the default"
    assert (task.retry_backoff_max, task.reservation_timeout) == (60.0, 9.0), "not set: defaults"


def test_cron_tasks_get_the_registry_defaults() -> None:
    tasks = TaskRegistry(defaults=trunner.TaskDefaults(max_retry=2, timeout=5.0))

    @tasks.cron("* * * * *")
    async def tick(payload: Any) -> None:
        pass

    @tasks.cron("* * * * *", max_retry=0, max_redeliveries=0)
    async def own(payload: Any) -> None:
        pass

    assert (tasks.get("tick").max_retry, tasks.get("tick").timeout) == (2, 5.0)
    assert tasks.get("tick").max_redeliveries == 3
    assert (tasks.get("own").max_retry, tasks.get("own").max_redeliveries) == (0, 0)
    assert tasks.get("own").timeout == 5.0


def test_a_task_built_and_registered_keeps_its_own_values() -> None:
    tasks = TaskRegistry(defaults=ALL_DEFAULTS)
    task = tasks.register(Task("t", noop))
    assert (task.max_retry, task.timeout, task.keep_result) == (0, None, None)


@pytest.mark.parametrize("defaults", [{"max_retry": 3}, object(), trunner.TaskDefaults])
def test_registry_defaults_must_be_task_defaults(defaults: object) -> None:
    with pytest.raises(TypeError, match="TaskDefaults"):
        TaskRegistry(defaults=defaults)  # type: ignore[arg-type]


def test_task_defaults_are_frozen_and_keyword_only() -> None:
    defaults = trunner.TaskDefaults(max_retry=1)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        defaults.max_retry = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        trunner.TaskDefaults(1)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("", ValueError),
        (" job", ValueError),
        ("job ", ValueError),
        ("\tjob", ValueError),
        (b"job", TypeError),
        (42, TypeError),
    ],
)
def test_invalid_task_names(name: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="name"):
        Task(name, noop)  # type: ignore[arg-type]


def test_valid_option_boundaries() -> None:
    task = Task("t", noop, max_retry=0, retry_backoff=0, reservation_timeout=0.001)
    assert task.max_retry == 0
    assert task.retry_backoff == 0
    assert task.reservation_timeout == 0.001


# -- retry_delay -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "cap"),
    [(1.0, 3600.0), (0.1, 3600.0), (2.5, 60.0), (3, 10.0), (1000.0, 5.0)],
)
def test_numeric_backoff_is_exponential_with_jitter_and_capped(base: float, cap: float) -> None:
    task = Task("t", noop, retry_backoff=base, retry_backoff_max=cap)
    for attempt in range(1, 40):
        low, high = bounds(base, cap, attempt)
        samples = [task.retry_delay(attempt) for _ in range(200)]
        for delay in samples:
            assert isinstance(delay, float)
            assert low <= delay <= high, (attempt, delay, low, high)


def test_numeric_backoff_jitter_spreads_over_the_range() -> None:
    task = Task("t", noop, retry_backoff=1.0, retry_backoff_max=3600.0)
    samples = [task.retry_delay(4) for _ in range(2000)]
    low, high = bounds(1.0, 3600.0, 4)
    assert (low, high) == (4.0, 8.0)
    assert min(samples) < low + 0.2 * (high - low)
    assert max(samples) > high - 0.2 * (high - low)
    assert len(set(samples)) > 100


@pytest.mark.parametrize(
    ("attempt", "upper"),
    [(1, 2.0), (2, 4.0), (3, 8.0), (5, 32.0), (6, 50.0), (100, 50.0)],
)
def test_numeric_backoff_exact_ends(
    monkeypatch: pytest.MonkeyPatch, attempt: int, upper: float
) -> None:
    task = Task("t", noop, retry_backoff=2.0, retry_backoff_max=50.0)
    lowest = _FixedRandom(min)
    monkeypatch.setattr(trunner._task, "random", lowest)
    assert task.retry_delay(attempt) == pytest.approx(0.5 * upper)
    assert lowest.calls == [(0.5, 1.0)]
    monkeypatch.setattr(trunner._task, "random", _FixedRandom(max))
    assert task.retry_delay(attempt) == pytest.approx(upper)


@pytest.mark.parametrize("attempt", [64, 65, 1023, 1024, 1025, 5000, 10_000, 10**9])
def test_numeric_backoff_cap_applies_for_huge_attempts(attempt: int) -> None:
    cap = 120.0
    task = Task("t", noop, retry_backoff=1.5, retry_backoff_max=cap)
    for _ in range(200):
        delay = task.retry_delay(attempt)
        assert 0.5 * cap <= delay <= cap


def test_default_backoff_cap_is_an_hour() -> None:
    task = Task("t", noop, retry_backoff=1.0)
    for _ in range(100):
        assert 1800.0 <= task.retry_delay(10_000) <= 3600.0


def test_zero_backoff_retries_at_once() -> None:
    task = Task("t", noop, retry_backoff=0)
    assert all(task.retry_delay(n) == 0.0 for n in (1, 2, 10, 10_000))


@pytest.mark.parametrize("result", [0, 0.0, 1, 2.5, 86400.0])
def test_callable_backoff_returns_what_the_callable_returns(result: float) -> None:
    seen: list[int] = []

    def backoff(attempt: int) -> float:
        seen.append(attempt)
        return result

    task = Task("t", noop, retry_backoff=backoff, retry_backoff_max=1.0)
    assert task.retry_delay(3) == result
    assert isinstance(task.retry_delay(7), float)
    assert seen == [3, 7]


def test_callable_backoff_gets_the_failed_attempt() -> None:
    task = Task("t", noop, retry_backoff=lambda attempt: attempt * 10.0)
    assert [task.retry_delay(n) for n in (1, 2, 3, 10_000)] == [10.0, 20.0, 30.0, 100_000.0]


@pytest.mark.parametrize("result", [-1, -0.5, math.nan, math.inf, -math.inf, "5", None, True, [1]])
def test_callable_backoff_bad_result_raises_value_error_naming_the_task(result: object) -> None:
    def backoff(attempt: int) -> Any:
        return result

    task = Task("send_email", noop, retry_backoff=backoff)
    with pytest.raises(ValueError, match="send_email") as info:
        task.retry_delay(2)
    assert "retry_backoff" in str(info.value)


def test_an_action_must_take_the_payload() -> None:
    tasks = TaskRegistry()

    async def no_arguments() -> None:
        pass

    async def two_arguments(a: object, b: object) -> None:
        pass

    async def payload_and_options(payload: object, retries: int = 3) -> None:
        pass

    with pytest.raises(TypeError, match="must accept the payload"):
        tasks.task(no_arguments)  # type: ignore[type-var]
    with pytest.raises(TypeError, match="must accept the payload"):
        tasks.task(two_arguments)  # type: ignore[type-var]
    tasks.task(payload_and_options)


# -- cron schedules ---------------------------------------------------------------------------


def test_cron_schedules_compute_ticks() -> None:
    every_5 = CronSchedule("r", "*/5 * * * *", "t")
    at = datetime.datetime(2026, 11, 29, 10, 7, 30, tzinfo=datetime.UTC).timestamp()
    assert (
        every_5.next_tick(at)
        == datetime.datetime(2026, 11, 29, 10, 10, tzinfo=datetime.UTC).timestamp()
    )
    assert (
        every_5.prev_tick(at)
        == datetime.datetime(2026, 11, 29, 10, 5, tzinfo=datetime.UTC).timestamp()
    )
    assert every_5.prev_tick(every_5.next_tick(at)) == every_5.next_tick(at), "on a tick"
    paris = CronSchedule("p", "0 9 * * *", "t", timezone="Europe/Paris")
    assert datetime.datetime.fromtimestamp(paris.next_tick(at), datetime.UTC).hour == 8


def test_cron_registration_checks() -> None:
    tasks = trunner.TaskRegistry()
    with pytest.raises(ValueError, match="not a valid cron expression"):
        tasks.cron("every minute", "t")
    with pytest.raises(ValueError, match="unknown timezone"):
        tasks.cron("* * * * *", "t", timezone="Mars/Olympus")
    tasks.cron("* * * * *", "missing")
    with pytest.raises(trunner.TaskNotFound):
        trunner.Runner("memory://x", config("g"), tasks)

    @tasks.cron("0 * * * *", payload={"k": 1}, max_retry=2)
    async def hourly(_: Any) -> None:
        pass

    assert tasks.get("hourly").max_retry == 2
    with pytest.raises(ValueError, match="already registered"):
        tasks.cron("0 * * * *", "hourly")
    assert [c.name for c in tasks.crons] == ["missing", "hourly"]


def test_a_cron_payload_that_cannot_be_sent_is_refused_when_registered() -> None:
    tasks = trunner.TaskRegistry()
    with pytest.raises(trunner.InvalidPayload):
        tasks.cron("* * * * *", "t", {1, 2})
    with pytest.raises(trunner.InvalidPayload):

        @tasks.cron("* * * * *", payload=object())
        async def nightly(_: Any) -> None:
            pass

    assert tasks.crons == []


def test_an_unknown_name_says_which_registered_one_was_meant() -> None:
    tasks = trunner.TaskRegistry()
    for name in ("send_mail", "send_sms", "resize_image"):
        tasks.register(trunner.Task(name, _noop))
    with pytest.raises(trunner.TaskNotFound) as info:
        tasks.get("resize_imag")
    assert str(info.value) == (
        "no task named 'resize_imag' is registered; did you mean 'resize_image'?"
    )
    assert info.value.suggestions == ["resize_image"]
    assert info.value.task_name == "resize_imag"
    with pytest.raises(trunner.TaskNotFound, match="did you mean 'send_mail' or 'send_sms'"):
        tasks.get("sendmail")
    with pytest.raises(trunner.TaskNotFound) as info:
        tasks.get("zzz")
    assert str(info.value).endswith("(registered: resize_image, send_mail, send_sms)")


async def _noop(_: object) -> None: ...


def test_the_task_module_still_names_the_registry_and_the_schedule() -> None:
    """``TaskRegistry`` and ``CronSchedule`` moved to their own modules; users' imports of
    them from ``trunner.task`` keep working, the registry's with a warning that names its
    public path."""
    with pytest.warns(DeprecationWarning, match=r"use trunner\.TaskRegistry"):
        assert trunner.task.TaskRegistry is trunner.registry.TaskRegistry
    assert trunner.task.CronSchedule is trunner.schedule.CronSchedule
    assert trunner.task.Task is trunner.Task
    assert "CronSchedule" in trunner.task.__all__
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        trunner.task.NoSuchName  # type: ignore[attr-defined]  # noqa: B018
