"""``trunner worker``: serve a runner built from the settings named, until a signal."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping

from .._util import logger
from .._worker.serve import load_settings, run_worker, worker_config
from .._worker.supervised import Supervised, wait_supervisor_gone
from ..runner import Runner

__all__ = ["worker"]


async def worker(args: argparse.Namespace) -> int:
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
    )
    return 0 if clean else 1


_MEMORY_AND_PROCESSES = (
    "%s is a Redis inside one process: the worker processes of a supervisor cannot share "
    "it; give them a real Redis"
)


def _print_ready(info: Mapping[str, object]) -> None:
    print(json.dumps({"ready": True, **info}), flush=True)
