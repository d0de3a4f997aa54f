"""Structured logging with middleware: ``python examples/middleware_logging.py``.

Every log record written while an attempt runs — by the task, or by any library it calls
— carries the task's name, task id, message id and attempt, and the ``tenant`` header the
dispatch set. A middleware binds them in a context variable for the attempt; a
``logging.Filter`` copies them onto each record. ``trunner worker --log-format json``
prints the same field names (``task``, ``task_id``, ``message_id``, ``attempt``) for
trunner's own records, so task lines and runner lines join on them.

The middleware also sets the ``tenant`` header at dispatch, from a context variable of
the web request (here: set by hand), so producers need not pass it on every call.

Uses an in-process Redis unless REDIS_URL is set.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Mapping
from types import MappingProxyType
from typing import Any

import trio

import trunner

#: The fields of the attempt running in this context (empty outside of tasks).
log_fields: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "log_fields", default=MappingProxyType({})
)
#: The tenant of the request being served (a web framework would set it).
current_tenant: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "current_tenant", default=None
)

logger = logging.getLogger("example")


class LogContext(trunner.Middleware):
    """Binds the attempt's fields for the log records written while it runs, logs how
    each attempt ended, and stamps the current tenant on each dispatch."""

    @contextlib.asynccontextmanager
    async def around_attempt(self, attempt: trunner.middleware.AttemptInfo) -> AsyncIterator[None]:
        token = log_fields.set(
            {
                "task": attempt.task_name,
                "task_id": attempt.task_id,
                "message_id": attempt.message_id,
                "attempt": attempt.attempt,
                "tenant": attempt.headers.get("tenant"),
            }
        )
        try:
            yield
        finally:
            # Still bound: this line carries the fields too. The exception goes on as it
            # is (a middleware observes; the runner retries or gives up).
            logger.info("attempt %s", attempt.outcome.value if attempt.outcome else "?")
            log_fields.reset(token)

    def on_dispatch(self, dispatch: trunner.middleware.DispatchInfo) -> None:
        tenant = current_tenant.get()
        if tenant is not None:
            dispatch.headers.setdefault("tenant", tenant)


class AttemptFields(logging.Filter):
    """Copies the running attempt's fields onto each record (``record.task`` ...)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in log_fields.get().items():
            setattr(record, name, value)
        return True


class JsonLines(logging.Formatter):
    FIELDS = ("task", "task_id", "message_id", "attempt", "tenant")

    def format(self, record: logging.LogRecord) -> str:
        data = {"level": record.levelname, "message": record.getMessage()}
        data |= {f: getattr(record, f) for f in self.FIELDS if hasattr(record, f)}
        return json.dumps(data)


tasks = trunner.TaskRegistry()
done = trio.Event()


@tasks.task(max_retry=1, retry_backoff=0.01)
async def charge(payload: dict[str, Any]) -> None:
    logger.info("charging %s cents", payload["cents"])
    if trunner.current_message().attempt == 1:
        raise ConnectionError("payment gateway timed out")
    done.set()


async def main() -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.addFilter(AttemptFields())
    handler.setFormatter(JsonLines())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False

    url = os.environ.get("REDIS_URL", "memory://middleware-logging")
    config = trunner.RunnerConfig(consumer_group="billing", middleware=[LogContext()])
    async with trunner.open_runner(url, config, tasks) as runner:
        current_tenant.set("acme")  # what a request handler would do
        await runner.dispatch("charge", {"cents": 1250})
        await done.wait()
    logger.info("runner stopped")


if __name__ == "__main__":
    trio.run(main)
