"""The client or the admin of a command on one group: on the Redis its workers share, never
an in-process one this command alone would see."""

from __future__ import annotations

import argparse
from contextlib import AbstractAsyncContextManager

from ..admin import Admin, open_admin
from ..client import Client, open_client
from ..registry import TaskRegistry


def _shared_redis(args: argparse.Namespace) -> str:
    """The Redis URL of a command that works on a group its workers share: never an
    in-process ``memory://`` server, which this command alone would see."""
    url: str = args.redis
    if url.lower().startswith("memory://"):
        doing = {
            "dispatch": "a task dispatched there would be lost",
            "inspect": "there is nothing to inspect there",
            "status": "no task is there",
            "result": "no task is there",
            "cancel": "no task is there",
            "pause": "no runner would see the pause",
            "resume": "no runner would see the resume",
            "dead-letter": "there are no dead letters there",
            "quarantine": "there is nothing set aside there",
            "cron": "no cron state is there",
            "workflow": "no workflow is there",
        }[args.command]
        raise ValueError(
            f"{url} is a Redis inside this one command's process: it starts empty and "
            f"vanishes when the command exits, so {doing}. Pass the Redis your workers "
            "use: --redis redis://host:6379/0, or set REDIS_URL"
        )
    return url


def _group_client(
    args: argparse.Namespace, tasks: TaskRegistry | None = None
) -> AbstractAsyncContextManager[Client]:
    """The client of a command that dispatches to a group or follows its tasks: its shared
    Redis (``--redis``), the queue it reads (``--queue``, else its own name), ``--prefix``."""
    return open_client(
        _shared_redis(args),
        args.queue or args.group,
        group=args.group,
        prefix=args.prefix,
        tasks=tasks,
    )


def _group_admin(
    args: argparse.Namespace, tasks: TaskRegistry | None = None
) -> AbstractAsyncContextManager[Admin]:
    """The admin of a command that inspects or administers a group, on the same Redis,
    queue and prefix as ``_group_client``'s."""
    return open_admin(
        _shared_redis(args),
        args.queue or args.group,
        group=args.group,
        prefix=args.prefix,
        tasks=tasks,
    )
