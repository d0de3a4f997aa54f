"""Testing your tasks with trunner's pytest plugin.

Run it with ``pytest --trunner examples/test_with_trunner.py`` (pytest-trio installed).
Add ``--trunner-redis redis://localhost:6379/15`` to run the same tests on a real Redis
database (its ``trunner:`` keys are deleted before and after each test).

The first half is the "application" (normally imported from your package); the tests
below show the three levels: eager unit tests of task code, tests with a real runner on an
in-process Redis, and a strict check that a runner you open yourself shuts down cleanly.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import trunner
from trunner.testing import (
    RunnerFactory,
    assert_clean_shutdown,
    capture_errors,
    run_until_idle,
)

pytestmark = pytest.mark.trio  # not needed with trio_mode = true

# -- the application under test ---------------------------------------------------------------

tasks = trunner.TaskRegistry()
#: What the fake mail server received: (address, attempt that sent it).
outbox: list[tuple[str, int]] = []


@tasks.task(max_retry=3, retry_backoff=0.01)
async def send_welcome(payload: dict[str, Any]) -> None:
    address = payload.get("to", "")
    if "@" not in address:
        raise ValueError(f"not an e-mail address: {address!r}")
    attempt = trunner.current_message().attempt
    if payload.get("flaky") and attempt == 1:
        raise ConnectionError("mail server busy")
    outbox.append((address, attempt))


@tasks.task
async def sign_up(payload: dict[str, Any]) -> None:
    # ... create the account, then send the welcome mail as a task of its own:
    await trunner.current_runner().dispatch("send_welcome", {"to": payload["email"]})


@pytest.fixture(autouse=True)
def empty_outbox() -> Iterator[None]:
    outbox.clear()
    yield
    outbox.clear()


# -- eager unit tests: the task's code, no Redis, no runner -----------------------------------


async def test_a_flaky_send_is_retried() -> None:
    await tasks.call("send_welcome", {"to": "ada@example.com", "flaky": True})
    assert outbox == [("ada@example.com", 2)]


async def test_a_bad_address_is_given_up() -> None:
    with pytest.raises(trunner.MaxRetryExceeded) as info:
        await tasks.call("send_welcome", {"to": "nobody"})
    assert info.value.attempts == 4  # max_retry=3: four attempts, then the runner gives up
    assert isinstance(info.value.__cause__, ValueError)
    assert outbox == []


# -- with a runner: the plugin's fixtures --------------------------------------------------


async def test_signing_up_sends_a_welcome(
    trunner_runner: RunnerFactory, trunner_client: trunner.Client
) -> None:
    runner = await trunner_runner(tasks)
    await trunner_client.dispatch("sign_up", {"email": "grace@example.com"})
    await run_until_idle(runner)
    assert outbox == [("grace@example.com", 1)]
    assert runner.statistics().succeeded == 2  # sign_up, then send_welcome


async def test_failures_are_captured(trunner_runner: RunnerFactory) -> None:
    runner = await trunner_runner(tasks)
    async with capture_errors(runner) as errors:
        await runner.dispatch("send_welcome", {"to": "nobody"})
        await run_until_idle(runner, delayed_within=1.0)  # retries wait out their backoff
        for _ in range(4):  # each attempt raised ...
            errors.expect(ValueError, match="not an e-mail address")
        errors.expect(trunner.MaxRetryExceeded)  # ... and then the runner gave up
    assert await runner.admin.dead_letter_count() == 1


# -- a runner of your own, strictly checked -----------------------------------------------------


async def test_my_own_runner_shuts_down_cleanly(trunner_redis_url: str) -> None:
    config = trunner.RunnerConfig(consumer_group="welcome")
    async with (
        assert_clean_shutdown(trunner_redis_url),
        trunner.open_runner(trunner_redis_url, config, tasks) as runner,
    ):
        await runner.dispatch_many("send_welcome", [{"to": "a@example.com"}] * 3)
        await run_until_idle(runner)
    assert len(outbox) == 3
