"""``trunner worker``: serve a runner built from the settings named, until a signal."""

from __future__ import annotations

import argparse
import json

from .._util import logger
from .._worker.serve import load_settings, run_worker, worker_config
from ..runner import Runner

__all__ = ["worker"]


async def worker(args: argparse.Namespace) -> int:
    settings = load_settings(args.target)
    url = args.redis or settings.redis
    if not url:
        raise ValueError("no Redis URL: pass --redis, set REDIS_URL, or give the settings one")
    if url.lower().startswith("memory://"):
        logger.warning(
            "%s is a Redis inside this worker's process: no other process can dispatch to "
            "it, so this worker runs only its own cron ticks and what its tasks dispatch",
            url,
        )
    runner = Runner(url, worker_config(settings, args.group, args.workers), settings.tasks)
    clean = await run_worker(
        runner,
        health_port=args.health_port,
        metrics_port=args.metrics_port,
        host=args.host,
        on_ready=lambda ports: print(json.dumps({"ready": True, **ports}), flush=True),
    )
    return 0 if clean else 1
