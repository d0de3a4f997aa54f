"""Errors of tasks reported to Sentry, with middleware: ``python examples/middleware_sentry.py``.

Needs ``pip install 'trunner[sentry]'`` (the ``sentry-sdk`` package). Each attempt runs
in a Sentry isolation scope of its own, tagged with the task's name, group and attempt,
with the message's ids and headers as context; an attempt that raises is captured with
those, then the exception goes on (the runner retries or gives up, as without Sentry). A
cancellation is not an error, and is not captured. Every failed attempt is captured,
retried or not: its ``trunner.attempt`` tag tells them apart (filter in ``before_send``
if you want fewer).

Run as a script, it sends nothing anywhere: Sentry is given a transport that keeps the
events in a list, and the script prints what Sentry would have received. In your
application, call ``sentry_sdk.init(dsn=...)`` as usual and add ``SentryMiddleware()`` to
``RunnerConfig.middleware``.

Uses an in-process Redis unless REDIS_URL is set.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import sentry_sdk
import sentry_sdk.transport
import trio

import trunner


class SentryMiddleware(trunner.Middleware):
    """Captures the exception of each failed attempt, with the task's tags and context."""

    @contextlib.asynccontextmanager
    async def around_attempt(self, attempt: trunner.middleware.AttemptInfo) -> AsyncIterator[None]:
        with sentry_sdk.isolation_scope() as scope:
            scope.set_tag("trunner.task", attempt.task_name)
            scope.set_tag("trunner.group", attempt.group)
            scope.set_tag("trunner.attempt", attempt.attempt)
            scope.set_context(
                "trunner",
                {
                    "task_id": attempt.task_id,
                    "message_id": attempt.message_id,
                    "headers": dict(attempt.headers),
                },
            )
            try:
                yield
            except Exception as exc:
                sentry_sdk.capture_exception(exc)
                raise  # observed, never swallowed


class KeptEvents(sentry_sdk.transport.Transport):
    """A Sentry transport that keeps the events instead of sending them."""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self.events: list[dict[str, Any]] = []

    def capture_envelope(self, envelope: Any) -> None:
        event = envelope.get_event()
        if event is not None:
            self.events.append(event)


tasks = trunner.TaskRegistry()
finished = trio.Event()


@tasks.task(max_retry=1, retry_backoff=0.01)
async def resize(payload: dict[str, Any]) -> None:
    if trunner.current_message().attempt == 1:
        raise OSError(f"{payload['image']}: storage not reachable")
    finished.set()


@tasks.task(max_retry=0)
async def corrupt(payload: dict[str, Any]) -> None:
    raise ValueError(f"{payload['image']} is not an image")


async def main() -> None:
    transport = KeptEvents()
    sentry_sdk.init(
        dsn="https://public@sentry.example.invalid/1",  # never contacted: see the transport
        transport=transport,
        default_integrations=False,
        auto_enabling_integrations=False,
    )
    url = os.environ.get("REDIS_URL", "memory://middleware-sentry")
    config = trunner.RunnerConfig(consumer_group="images", middleware=[SentryMiddleware()])
    async with trunner.open_runner(url, config, tasks) as runner:
        await runner.dispatch("resize", {"image": "cat.png"}, headers={"tenant": "acme"})
        await runner.dispatch("corrupt", {"image": "dog.txt"})
        await finished.wait()
        while await runner.admin.dead_letter_count() < 1:  # noqa: ASYNC110 - an example, polling Redis
            await trio.sleep(0.01)
    sentry_sdk.flush()
    for event in sorted(transport.events, key=lambda e: e["tags"]["trunner.task"]):
        (exception,) = event["exception"]["values"]
        tags, context = event["tags"], event["contexts"]["trunner"]
        print(
            f"captured {exception['type']}: {exception['value']} "
            f"(task {tags['trunner.task']}, attempt {tags['trunner.attempt']}, "
            f"group {tags['trunner.group']}, headers {context['headers']})"
        )


if __name__ == "__main__":
    trio.run(main)
