"""Serving is responsible for running one runner as a worker process, as ``trunner worker
module:target`` does: it loads the user's settings, serves health checks and metrics, and
owns the process's signals.

A *worker process* is one instance of a group; its concurrency is ``num_workers`` slots
(also called workers). The Trio tasks that run jobs inside the pool are *job loops*.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from .._util import logger
from ..config import RunnerConfig
from ..registry import TaskRegistry
from ..runner import Runner
from ..statistics import RunnerState
from .http import Handler, Response, serve_http

__all__ = ["WorkerSettings", "load_settings", "run_worker"]


@attrs.frozen
class WorkerSettings:
    """What ``trunner worker module:attribute`` runs, when the attribute is not a factory.

    ``trunner worker myapp.worker:settings`` accepts a ``WorkerSettings``, a
    [``TaskRegistry``][trunner.TaskRegistry] (then ``--group`` is required), or a
    function returning either. The command line's ``--group``, ``--workers`` and
    ``--redis`` / ``REDIS_URL`` override the settings. See [Command line](cli.md).

    Raises:
        TypeError: ``tasks`` is not a ``TaskRegistry``, or ``config`` is neither a
            ``RunnerConfig`` nor ``None``.
    """

    tasks: TaskRegistry = attrs.field(validator=attrs.validators.instance_of(TaskRegistry))
    """The registry of the tasks to run."""
    config: RunnerConfig | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(attrs.validators.instance_of(RunnerConfig)),
    )
    """The configuration; without it, ``--group`` is required."""
    redis: str | None = None
    """The Redis URL; ``--redis`` or ``REDIS_URL`` override it."""


def load_settings(target: str) -> WorkerSettings:
    """Import ``module:attribute`` and turn it into :class:`WorkerSettings`."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"expected module:attribute, e.g. myapp.worker:settings, got {target!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # like python -m: the current directory's modules
    module = importlib.import_module(module_name)
    try:
        value: Any = module
        for part in attribute.split("."):
            value = getattr(value, part)
    except AttributeError:
        raise ValueError(f"{module_name!r} has no attribute {attribute!r}") from None
    if callable(value) and not isinstance(value, TaskRegistry | WorkerSettings):
        if inspect.iscoroutinefunction(value):
            raise TypeError(f"{target} must be a plain function returning the settings")
        value = value()
    if isinstance(value, TaskRegistry):
        return WorkerSettings(value)
    if isinstance(value, WorkerSettings):
        return value
    raise TypeError(
        f"{target} must be a WorkerSettings, a TaskRegistry, or a function returning one; "
        f"got {type(value).__name__}"
    )


def worker_config(settings: WorkerSettings, group: str | None, workers: int | None) -> RunnerConfig:
    config = settings.config
    if config is None:
        if group is None:
            raise ValueError("no RunnerConfig in the settings: pass --group")
        config = RunnerConfig(consumer_group=group)
    changes: dict[str, Any] = {}
    if group is not None:
        changes["consumer_group"] = group
    if workers is not None:
        changes["num_workers"] = workers
        low, high = config.worker_bounds
        if config.min_workers is not None and workers < low:
            changes["min_workers"] = workers
        if config.max_workers is not None and workers > high:
            changes["max_workers"] = workers
    return attrs.evolve(config, **changes) if changes else config


async def _health(runner: Runner) -> Response:
    await trio.lowlevel.checkpoint()
    return 200, "text/plain", b"ok\n"


async def _ready(runner: Runner) -> Response:
    await trio.lowlevel.checkpoint()
    if runner.state is RunnerState.STARTED:  # a paused runner is healthy: ready, and says so
        return 200, "text/plain", b"ready (paused)\n" if runner.statistics().paused else b"ready\n"
    return 503, "text/plain", f"{runner.state.name.lower()}\n".encode()


def _metrics_handler(runner: Runner) -> Handler:
    from ..prometheus import RunnerCollector, collect  # noqa: PLC0415 - optional extra

    collector = RunnerCollector(runner)

    async def metrics() -> Response:
        if runner.state is RunnerState.STARTED:
            try:
                collector.lane_lengths = await runner.admin.lane_lengths()
                collector.queue_length = sum(collector.lane_lengths.values())
                collector.workflows_live = await runner.admin.workflow_count()
            except Exception as exc:  # noqa: BLE001 - a scrape must not fail on Redis
                logger.debug("metrics: queue length unavailable: %s", exc)
        return 200, "text/plain; version=0.0.4; charset=utf-8", collect(runner, collector)

    return metrics


async def run_worker(
    runner: Runner,
    *,
    health_port: int | None = None,
    metrics_port: int | None = None,
    host: str = "127.0.0.1",
    on_ready: Callable[[dict[str, int]], None] = lambda _ports: None,
    stop_when: Callable[[], Awaitable[object]] | None = None,
    by_kind: bool = False,
) -> bool:
    """Run ``runner`` until SIGINT/SIGTERM; return True after a clean drain.

    The first signal stops it gracefully (drain); a second cancels running tasks at once
    (their messages are released, never acknowledged). With ``by_kind`` (a worker under a
    supervisor) signals are read by kind, not counted: SIGTERM drains, however many come
    (the supervisor's and, under systemd's default ``KillMode``, the service manager's
    own), and SIGINT stops at once. The endpoints are served from
    before the runner starts (``/readyz`` answers 503 until it is started), so a port in
    use, or ``metrics_port`` without the ``prometheus`` extra (``ImportError``), fails
    before the runner connects to anything. The health and metrics endpoints
    listen on ``host`` (127.0.0.1 by default: pass ``"0.0.0.0"`` for probes from outside
    the machine or container), with a bounded number of connections (see
    :mod:`trunner._worker.http`). Once ``stop_when()`` returns, the runner stops
    gracefully, as on a first signal (a worker under a supervisor: the supervisor is gone).
    """
    forced = False
    # Everything that can fail on the options fails before the runner starts (no lead
    # taken, no cron tick fired): the metrics extra is imported, the ports are bound.
    metrics = _metrics_handler(runner) if metrics_port is not None else None
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            ports: dict[str, int] = {}
            if health_port is not None:
                routes: dict[str, Handler] = {
                    "/healthz": lambda: _health(runner),
                    "/readyz": lambda: _ready(runner),  # 503 until the runner is started
                }
                ports["health"] = await nursery.start(serve_http, routes, health_port, host)
            if metrics is not None:
                routes = {"/metrics": metrics}
                ports["metrics"] = await nursery.start(serve_http, routes, metrics_port, host)
            stopped = trio.Event()

            async def run(task_status: trio.TaskStatus[None]) -> None:
                try:
                    await runner.run(task_status=task_status)
                finally:
                    stopped.set()

            await nursery.start(run)

            async def watch_signals() -> None:
                nonlocal forced
                first = True
                again = "SIGINT stops at once" if by_kind else "send it again to stop at once"
                async for signum in signals:
                    name = signal.Signals(signum).name
                    # Counted, not read from the state: two signals that come together
                    # (SIGTERM and SIGINT, as a supervisor passes them on) are two, though
                    # the runner has not begun stopping when the second is seen. By kind,
                    # every SIGTERM drains, and SIGINT stops at once.
                    if by_kind:
                        drain = signum == signal.SIGTERM
                    else:
                        drain = first and runner.state is not RunnerState.STOPPING
                    if drain and not first:
                        logger.info("%s: draining already", name)
                    elif drain:
                        first = False
                        logger.warning(
                            "%s: stopping gracefully (draining up to %s s); %s",
                            name,
                            runner.config.drain_timeout,
                            again,
                        )
                        runner.stop()
                    else:
                        logger.warning("%s: stopping at once, cancelling running tasks", name)
                        forced = True
                        runner.stop(drain=False)

            nursery.start_soon(watch_signals)
            if stop_when is not None:

                async def watch_stop_when() -> None:
                    await stop_when()
                    runner.stop()  # nothing more if a signal began the stop already

                nursery.start_soon(watch_stop_when)
            logger.info("worker ready: %s", ports or "no HTTP endpoints")
            on_ready(ports)
            await stopped.wait()
            nursery.cancel_scope.cancel()
    return not forced


def configure_logging(level: str, fmt: str) -> None:
    """Log to stderr at ``level`` — unless logging is configured already (an embedding
    application, a test run): then it is left as it is."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)  # the application's own loggers too
    logging.getLogger("trunner").setLevel(level)
    for noisy in ("asyncio", "trio-asyncio", "trio_asyncio"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with trunner's structured fields (task, message_id ...)."""

    FIELDS = ("task", "message_id", "task_id", "attempt", "duration")

    def format(self, record: logging.LogRecord) -> str:
        import json  # noqa: PLC0415

        data: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in self.FIELDS:
            if hasattr(record, field):
                data[field] = getattr(record, field)
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)
