"""``trunner worker``: serve a runner built from the settings named, until a signal; with
``--processes N``, supervise N worker processes that each do."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Mapping

from .._util import logger, usable_cores
from .._worker.serve import load_settings, run_worker, worker_config
from .._worker.supervised import Supervised, wait_supervisor_gone
from .._worker.supervisor import ChildCommand, Supervisor, supervise
from ..runner import Runner

__all__ = ["worker"]


async def worker(args: argparse.Namespace) -> int:
    processes = args.processes
    if processes is not None and processes != 1:
        return await _supervise(args, processes or usable_cores())
    supervised = Supervised.parse(args.supervised) if args.supervised else None
    settings = load_settings(args.target)
    url = args.redis or settings.redis
    if not url:
        raise ValueError("no Redis URL: pass --redis, set REDIS_URL, or give the settings one")
    if url.lower().startswith("memory://"):
        if supervised is not None:
            raise ValueError(_MEMORY_AND_PROCESSES % url)
        logger.warning(
            "%s is a Redis inside this worker's process: no other process can dispatch to "
            "it, so this worker runs only its own cron ticks and what its tasks dispatch",
            url,
        )
    config = worker_config(settings, args.group, args.workers)
    if supervised is not None:
        config = supervised.config(config)
    clean = await run_worker(
        Runner(url, config, settings.tasks),
        health_port=args.health_port,
        metrics_port=args.metrics_port,
        host=args.host,
        on_ready=supervised.report_ready if supervised else _print_ready,
        stop_when=wait_supervisor_gone if supervised else None,
        by_kind=supervised is not None,
    )
    return 0 if clean else 1


_MEMORY_AND_PROCESSES = (
    "%s is a Redis inside one process: the worker processes of --processes cannot share "
    "it; give them a real Redis"
)


def _print_ready(info: Mapping[str, object]) -> None:
    print(json.dumps({"ready": True, **info}), flush=True)


async def _supervise(args: argparse.Namespace, processes: int) -> int:
    """``--processes N``: this process supervises N worker processes, started with the
    same options. Whatever can be refused here is, before any of them starts."""
    if args.redis and args.redis.lower().startswith("memory://"):
        raise ValueError(_MEMORY_AND_PROCESSES % args.redis)
    if args.metrics_port is not None:
        if args.metrics_port and not 0 < args.metrics_port + processes - 1 < 65536:
            raise ValueError(
                f"--metrics-port {args.metrics_port} with {processes} worker processes: "
                f"worker i serves /metrics on {args.metrics_port} + i, past the last port "
                "(65535)"
            )
        if importlib.util.find_spec("prometheus_client") is None:
            raise ImportError(
                "--metrics-port needs the prometheus extra: pip install 'trunner[prometheus]'"
            )
    arguments = [args.target, "--host", args.host, "--log-format", args.log_format]
    for option, value in (
        ("--group", args.group),
        ("--workers", args.workers),
        ("--log-level", getattr(args, "log_level", None)),
    ):
        if value is not None:
            arguments += [option, str(value)]
    # The Redis URL goes by the environment, never the command line, where every user of
    # the machine can read it (with its password) in the list of processes.
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # each line reaches the supervisor as written
    if args.redis:
        env["REDIS_URL"] = args.redis
    supervisor = Supervisor(
        ChildCommand(tuple(arguments), args.metrics_port),
        processes,
        env=env,
        json_lines=args.log_format == "json",
    )
    clean = await supervise(
        supervisor, health_port=args.health_port, host=args.host, on_ready=_print_ready
    )
    if supervisor.failure is not None:
        print(f"trunner worker: {supervisor.failure}", file=sys.stderr, flush=True)
        return 1
    return 0 if clean else 1
