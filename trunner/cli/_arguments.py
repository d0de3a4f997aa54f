"""The ``trunner`` command's arguments: one argparse parser with a sub-command each."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
from typing import Any

from .. import __version__

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _level(value: str) -> str:
    level = value.upper()
    if level not in LEVELS:
        raise argparse.ArgumentTypeError(f"choose from {', '.join(LEVELS)} (got {value!r})")
    return level


def _processes(value: str) -> int:
    try:
        processes = int(value)
    except ValueError:
        processes = -1
    if processes < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value!r}")
    return processes


def _version() -> str:
    """The version of trunner: the installed distribution's (what pip installed), else the
    package's own ``trunner.__version__`` (imported from a checkout, not installed)."""
    try:
        return importlib.metadata.version("trunner")
    except importlib.metadata.PackageNotFoundError:
        return __version__


def _redis_option(parser: argparse.ArgumentParser, default: str | None) -> None:
    """``--redis``; and, for a command on a group (``default`` given), ``--prefix``."""
    parser.add_argument(
        "--redis",
        default=os.environ.get("REDIS_URL", default),
        help="Redis URL (default: $REDIS_URL" + (f", else {default})" if default else ")"),
    )
    if default is not None:
        parser.add_argument(
            "--prefix", default="trunner", help="the group's key prefix (default: trunner)"
        )
        parser.add_argument(
            "--queue",
            default=None,
            help="the queue the group reads, when it is not the group's own (see "
            "RunnerConfig.queue)",
        )


def _task_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    """``status``, ``result`` and ``cancel``: one task, by its id."""
    status = commands.add_parser("status", parents=[common], help="where a task is")
    status.add_argument("group")
    status.add_argument("task_id")
    status.add_argument("--json", action="store_true", help="print JSON for scripts")
    _redis_option(status, "redis://127.0.0.1:6379/0")

    result = commands.add_parser(
        "result", parents=[common], help="wait for a task's result and print it (JSON)"
    )
    result.add_argument("group")
    result.add_argument("task_id")
    result.add_argument("--timeout", type=float, help="seconds to wait at most")
    _redis_option(result, "redis://127.0.0.1:6379/0")

    cancel = commands.add_parser("cancel", parents=[common], help="cancel a task, wherever it is")
    cancel.add_argument("group")
    cancel.add_argument("task_id")
    cancel.add_argument("--wait", action="store_true", help="a running task: wait until it stopped")
    _redis_option(cancel, "redis://127.0.0.1:6379/0")


def _workflow_command(commands: Any, common: argparse.ArgumentParser) -> None:
    """``workflow status|steps|cancel|ls``: a group's workflows."""
    flow = commands.add_parser("workflow", parents=[common], help="a group's workflows")
    actions = flow.add_subparsers(dest="workflow_command", required=True, metavar="ACTION")
    made = {
        "status": "where a workflow is, and its failures",
        "steps": "the state of each step of a workflow (a page of them)",
        "cancel": "cancel a workflow: no step starts after, running ones are cancelled",
        "ls": "the group's live workflows, oldest first (a page of them)",
    }
    for name, text in made.items():
        action = actions.add_parser(name, parents=[common], help=text)
        action.add_argument("group")
        if name != "ls":
            action.add_argument("workflow_id")
        if name != "cancel":
            action.add_argument("--json", action="store_true", help="print JSON for scripts")
        _redis_option(action, "redis://127.0.0.1:6379/0")
    steps = actions.choices["steps"]
    steps.add_argument("--start", type=int, default=0, help="the first step shown (default 0)")
    steps.add_argument("--count", type=int, default=1000, help="how many (default 1000)")
    steps.add_argument("--failed", action="store_true", help="only the failures it keeps")
    listing = actions.choices["ls"]
    listing.add_argument("--count", type=int, default=50, help="how many (default 50)")
    listing.add_argument("--offset", type=int, default=0, help="how many of the oldest to skip")


def _cron_command(commands: Any, common: argparse.ArgumentParser) -> None:
    cron = commands.add_parser("cron", parents=[common], help="the group's cron schedules")
    cron.add_argument("action", choices=("list", "fire"))
    cron.add_argument("group")
    cron.add_argument("name", nargs="?", help="fire: the schedule to run now")
    cron.add_argument(
        "--tasks",
        metavar="MODULE:ATTRIBUTE",
        help="the workers' registry (as for trunner worker): where the schedules are",
    )
    cron.add_argument("--json", action="store_true", help="list: print JSON for scripts")
    _redis_option(cron, "redis://127.0.0.1:6379/0")


def _dashboard_command(commands: Any, common: argparse.ArgumentParser) -> None:
    dash = commands.add_parser(
        "dashboard",
        parents=[common],
        help="serve the web dashboard (needs the 'dashboard' extra)",
    )
    dash.add_argument("redis_url", metavar="REDIS_URL")
    dash.add_argument(
        "--group",
        action="append",
        dest="groups",
        help="show only this group (repeat for several; default: every group found on "
        "Redis, on whichever queue it reads)",
    )
    dash.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    dash.add_argument("--port", type=int, default=8080, help="port (default 8080; 0: any)")
    dash.add_argument("--read-only", action="store_true", help="show, never act")
    token = dash.add_mutually_exclusive_group()
    token.add_argument("--token", help="require this token (bearer header or login form)")
    token.add_argument("--token-file", help="read the token from this file")
    dash.add_argument(
        "--tasks",
        metavar="MODULE:ATTRIBUTE",
        help="the workers' registry: shows cron expressions and lets you fire them",
    )
    dash.add_argument("--prefix", default="trunner", help="the groups' key prefix")
    dash.add_argument(
        "--interval", type=float, default=1.0, help="seconds between two live updates (default 1)"
    )


def _dispatch_command(commands: Any, common: argparse.ArgumentParser) -> None:
    dispatch = commands.add_parser("dispatch", parents=[common], help="dispatch one task")
    dispatch.add_argument("group")
    dispatch.add_argument("task")
    dispatch.add_argument("payload", help="the payload, as JSON")
    dispatch.add_argument("--delay", type=float, help="run it this many seconds from now")
    dispatch.add_argument(
        "--tasks",
        metavar="MODULE:ATTRIBUTE",
        help="the workers' registry (as for trunner worker): refuse an unknown task name "
        "(saying which one you meant) and send unique tasks as unique",
    )
    dispatch.add_argument(
        "--keep-result",
        type=float,
        metavar="S",
        help="keep its outcome S seconds (for trunner result; default: the task's)",
    )
    dispatch.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a message header (repeatable); the task reads current_message().headers",
    )
    dispatch.add_argument(
        "--priority",
        metavar="LANE",
        help="the priority lane it goes to (default: the task's, else 'default')",
    )
    _redis_option(dispatch, "redis://127.0.0.1:6379/0")


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--log-level",
        type=_level,
        default=argparse.SUPPRESS,
        help="level of the 'trunner' logger (default: INFO for a worker, WARNING otherwise)",
    )
    parser = argparse.ArgumentParser(
        prog="trunner",
        description="A Trio-native distributed task runner on Redis Streams.",
        parents=[common],
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"trunner {_version()} (Python {sys.version.split()[0]})",
        help="print the version of trunner and exit",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    worker = commands.add_parser(
        "worker", parents=[common], help="run a worker: module:settings (see the docs)"
    )
    worker.add_argument("target", help="module:attribute: WorkerSettings, TaskRegistry, or factory")
    worker.add_argument("--group", help="consumer group (overrides the settings)")
    worker.add_argument("--workers", type=int, help="tasks run at once (num_workers)")
    worker.add_argument(
        "--processes",
        type=_processes,
        metavar="N",
        help="run N worker processes under a supervisor that restarts them (0: one per "
        "core; default: this process alone)",
    )
    # A worker process of a supervisor: its place and its ready-report descriptor.
    worker.add_argument("--supervised", metavar="INDEX:FD", help=argparse.SUPPRESS)
    _redis_option(worker, None)
    worker.add_argument("--health-port", type=int, help="serve /healthz and /readyz")
    worker.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus /metrics (with --processes: worker i on this port + i)",
    )
    worker.add_argument(
        "--host",
        default="127.0.0.1",
        help="address of the HTTP endpoints (default 127.0.0.1; 0.0.0.0 for all interfaces)",
    )
    worker.add_argument("--log-format", choices=("text", "json"), default="text")

    _dispatch_command(commands, common)

    _task_commands(commands, common)

    inspect = commands.add_parser(
        "inspect",
        parents=[common],
        help="show a group at a glance; without a group, list the groups found",
    )
    inspect.add_argument("group", nargs="?", help="the group (none: list the groups found)")
    inspect.add_argument("--json", action="store_true", help="print JSON for scripts")
    _redis_option(inspect, "redis://127.0.0.1:6379/0")

    _pause_commands(commands, common)

    dead = commands.add_parser("dead-letter", parents=[common], help="the dead-letter stream")
    dead.add_argument("action", choices=("list", "replay", "delete", "purge"))
    dead.add_argument("group")
    dead.add_argument(
        "ids", nargs="*", help="replay, delete: these entries only (replay's default: all)"
    )
    dead.add_argument("--task", help="replay, delete: only the dead letters of this task")
    dead.add_argument("--count", type=int, default=50, help="list: how many")
    dead.add_argument("--json", action="store_true", help="print JSON for scripts")
    dead.add_argument("--yes", action="store_true", help="purge: do not ask")
    _redis_option(dead, "redis://127.0.0.1:6379/0")

    _workflow_command(commands, common)
    _cron_command(commands, common)
    _dashboard_command(commands, common)

    quarantine = commands.add_parser(
        "quarantine", parents=[common], help="bad data the runners set aside"
    )
    quarantine.add_argument("action", choices=("list", "purge"))
    quarantine.add_argument("group")
    quarantine.add_argument("--count", type=int, default=50, help="list: how many")
    quarantine.add_argument("--json", action="store_true", help="print JSON for scripts")
    quarantine.add_argument("--yes", action="store_true", help="purge: do not ask")
    _redis_option(quarantine, "redis://127.0.0.1:6379/0")

    demo = commands.add_parser(
        "demo",
        parents=[common],
        help="run several runner instances sharing one group, and show who ran what",
    )
    demo.add_argument(
        "--redis",
        default=os.environ.get("REDIS_URL", "memory://demo"),
        help="Redis URL (default: $REDIS_URL, else an in-process Redis)",
    )
    demo.add_argument("--instances", type=int, default=3, help="runner instances (default 3)")
    demo.add_argument("--images", type=int, default=15, help="image tasks to dispatch")
    return parser


def _pause_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    for name, text in (
        ("pause", "pause a group: its runners stop fetching (running tasks go on)"),
        ("resume", "resume a paused group: its runners fetch again"),
    ):
        command = commands.add_parser(name, parents=[common], help=text)
        command.add_argument("group")
        _redis_option(command, "redis://127.0.0.1:6379/0")
