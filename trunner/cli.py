"""The ``trunner`` command (also ``python -m trunner``).

::

    trunner worker myapp.worker:settings [--group G] [--workers N] [--redis URL]
                   [--health-port P] [--metrics-port P] [--log-format text|json]
    trunner dispatch GROUP TASK JSON [--delay S] [--keep-result S] [--tasks module:attribute]
    trunner status GROUP TASK_ID [--json]
    trunner result GROUP TASK_ID [--timeout S]
    trunner cancel GROUP TASK_ID [--wait]
    trunner inspect [GROUP] [--json]
    trunner pause GROUP
    trunner resume GROUP
    trunner dead-letter list|replay|delete|purge GROUP [IDS ...] [--task T]
    trunner cron list|fire GROUP [NAME] [--tasks module:attribute]
    trunner dashboard REDIS_URL [--group G ...] [--host H] [--port P] [--read-only]
                      [--token T | --token-file F] [--tasks module:attribute]
    trunner quarantine list|purge GROUP
    trunner demo
    trunner --version

The command, not the library, owns signals: SIGINT/SIGTERM stop a worker gracefully, a
second one stops it at once.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import signal
import sys
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import attrs
import trio
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import __version__
from ._demo import run_demo
from ._util import leaf_exceptions, logger
from ._util import utc_text as _when
from ._worker.serve import configure_logging, load_settings, run_worker, worker_config
from .admin import DeadLetter, GroupInfo, as_dict
from .client import Client, open_client
from .discovery import discover_groups
from .errors import TaskFailed, TrunnerError
from .registry import TaskRegistry
from .runner import Runner
from .status import CancelOutcome, TaskState

__all__ = ["main"]

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _level(value: str) -> str:
    level = value.upper()
    if level not in LEVELS:
        raise argparse.ArgumentTypeError(f"choose from {', '.join(LEVELS)} (got {value!r})")
    return level


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
    _redis_option(worker, None)
    worker.add_argument("--health-port", type=int, help="serve /healthz and /readyz")
    worker.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics")
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


# -- commands -------------------------------------------------------------------------------


async def _worker(args: argparse.Namespace) -> int:
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
    """The client of a command on a group: its shared Redis (``--redis``), the queue it
    reads (``--queue``, else its own name), ``--prefix``."""
    return open_client(
        _shared_redis(args),
        args.queue or args.group,
        group=args.group,
        prefix=args.prefix,
        tasks=tasks,
    )


async def _dispatch(args: argparse.Namespace, out: Console) -> int:
    try:
        payload = json.loads(args.payload)
    except ValueError as exc:
        raise ValueError(f"the payload is not valid JSON: {exc}") from None
    headers = {}
    for given in args.header:
        name, sep, value = given.partition("=")
        if not sep or not name:
            raise ValueError(f"--header takes NAME=VALUE, got {given!r}")
        headers[name] = value
    tasks = load_settings(args.tasks).tasks if args.tasks else None
    async with _group_client(args, tasks) as client:
        keep, lane = args.keep_result, args.priority
        if args.delay is not None:
            task_id = await client.dispatch_delayed(
                args.task, payload, args.delay, keep_result=keep, headers=headers, priority=lane
            )
        else:
            task_id = await client.dispatch(
                args.task, payload, keep_result=keep, headers=headers, priority=lane
            )
    out.print(task_id, soft_wrap=True, highlight=False)
    return 0


async def _status(args: argparse.Namespace, out: Console) -> int:
    async with _group_client(args) as client:
        status = await client.handle(args.task_id).status()
    if args.json:
        print(json.dumps(as_dict(status)))
        return 0
    rows = Table(show_header=False, box=None)
    rows.add_row("task", status.id)
    rows.add_row("state", status.state.value)
    for name in ("task", "attempt", "instance"):
        value = getattr(status, name)
        if value is not None:
            rows.add_row("name" if name == "task" else name, str(value))
    if status.progress is not None:
        message = f" ({status.progress_message})" if status.progress_message else ""
        rows.add_row("progress", f"{status.progress:.0%}{message}")
    for name in ("enqueued_at", "started_at", "finished_at", "due_at"):
        value = getattr(status, name)
        if value is not None:
            rows.add_row(name.replace("_at", "").replace("enqueued", "dispatched"), _when(value))
    if status.error is not None:
        rows.add_row("error", str(status.error))
    out.print(rows)
    return 0 if status.state is not TaskState.UNKNOWN else 1


async def _result(args: argparse.Namespace, out: Console) -> int:
    async with _group_client(args) as client:
        try:
            value = await client.handle(args.task_id).result(timeout=args.timeout)
        except trio.TooSlowError:
            print(f"trunner result: no outcome within {args.timeout:g} s", file=sys.stderr)
            return 2
        except TaskFailed as failure:
            print(f"trunner result: {failure}", file=sys.stderr)
            traceback = getattr(failure.error, "traceback", "")
            if traceback:
                print(traceback.rstrip("\n"), file=sys.stderr)
            return 1
    print(json.dumps(value))
    return 0


async def _cancel(args: argparse.Namespace, out: Console) -> int:
    async with _group_client(args) as client:
        outcome = await client.handle(args.task_id).cancel(wait=args.wait)
    said = {
        CancelOutcome.REMOVED: "removed: it will never start",
        CancelOutcome.CANCELLING: "cancelled while it ran"
        if args.wait
        else "cancelling: the instance running it cancels it now",
        CancelOutcome.FINISHED: "it had finished already: nothing to cancel",
        CancelOutcome.UNKNOWN: f"no task {args.task_id} in group {args.group}",
    }[outcome]
    out.print(f"{args.task_id}: {said}", highlight=False, soft_wrap=True)
    return 1 if outcome is CancelOutcome.UNKNOWN else 0


async def _pause(args: argparse.Namespace, out: Console) -> int:
    async with _group_client(args) as client:
        if args.command == "pause":
            changed = await client.pause()
            info = await client.inspect()
            said = (
                "paused: its runners stop fetching; running tasks go on"
                if changed
                else f"was paused already (since {_when(info.paused_since or 0.0)} UTC)"
            )
            if _unknown(info):  # a mistyped name would pause nobody, silently
                said += (
                    f"\nnote: nothing is known of group {args.group!r} on this Redis (no"
                    " instance, no message): runners of that name started later stay paused;"
                    " check the group name, --redis and the key prefix"
                )
        else:
            said = (
                "resumed: its runners fetch again"
                if await client.resume()
                else "was not paused: nothing to resume"
            )
    out.print(f"group {args.group} {said}", highlight=False, soft_wrap=True)
    return 0


def _unknown(info: GroupInfo) -> bool:
    """Whether nothing at all is known of the group: no instance, no message."""
    return not (
        info.instances or info.queue_length or info.pending or info.delayed or info.dead_letters
    )


def _summary(info: GroupInfo) -> Table:
    summary = Table(show_header=False, box=None)
    summary.add_row("queue length", str(info.queue_length))
    if len(info.lanes) > 1:
        unread = info.unread_lanes
        shown = ", ".join(
            f"{_shown(lane)} {length}{' (no live runner reads it)' if lane in unread else ''}"
            for lane, length in info.lanes.items()
        )
        summary.add_row("by lane", shown)
    summary.add_row("pending", str(sum(info.pending.values())))
    summary.add_row("delayed", str(info.delayed))
    summary.add_row("dead letters", str(info.dead_letters))
    if info.quarantined:
        summary.add_row("set aside", f"{info.quarantined} (trunner quarantine list {info.group})")
    if info.paused_since is not None:
        summary.add_row("paused", f"since {_when(info.paused_since)} UTC (trunner resume)")
    summary.add_row("leader", _cell(info.leader or "-"))
    if info.capacity:
        summary.add_row(
            "capacity decision",
            f"{info.capacity.get('value')} per instance (version {info.capacity.get('version')})",
        )
    return summary


def _limits_table(info: GroupInfo) -> Table:
    limits = Table(title="concurrency limits in use", title_justify="left")
    for column in ("limit key", "held", "waiting"):
        limits.add_column(column, no_wrap=column == "limit key")
    for key, (held, waiting) in info.concurrency.items():
        limits.add_row(_cell(key), str(held), str(waiting))
    return limits


def _print_group(info: GroupInfo, out: Console) -> None:
    queue = f" (queue {_shown(info.queue)})" if info.queue and info.queue != info.group else ""
    out.print(Text.assemble(("group", "bold"), f" {_shown(info.group)}{queue}"))
    out.print(_summary(info))
    instances = Table(title="instances", title_justify="left")
    for column in ("id", "host", "pid", "capacity", "pending", "last seen", "leader"):
        instances.add_column(column, no_wrap=column == "id")  # ids are copied: never cut
    for i in info.instances:
        pending = sum(n for c, n in info.pending.items() if c == i.id or c.startswith(i.id + "/"))
        instances.add_row(
            _cell(i.id), _cell(i.host), str(i.pid), str(i.capacity), str(pending),
            _when(i.last_seen), "yes" if i.leader else "",
        )  # fmt: skip
    out.print(instances)
    if info.running:
        running = Table(title="running (delivered longest ago)", title_justify="left")
        for column in ("task id", "task", "instance", "attempt", "progress", "since"):
            running.add_column(column, no_wrap=column == "task id")
        for task in info.running:
            progress = f"{task.progress:.0%}" if task.progress is not None else "-"
            if task.progress_message:
                progress += f" {task.progress_message}"
            running.add_row(
                _cell(task.id), _cell(task.task or "?"), _cell(task.instance or "-"),
                str(task.attempt or "-"), _cell(progress), _when(task.started_at or 0.0),
            )  # fmt: skip
        out.print(running)
    if info.concurrency:
        out.print(_limits_table(info))
    if _unknown(info):
        out.print(
            f"nothing is known of group {info.group!r} on this Redis (no instance, no message):"
            " check the group name, --redis, the key prefix, and --queue if the group reads"
            " a queue of another name"
        )
    if info.stats is not None and info.stats.tasks:
        stats = info.stats
        table = Table(
            title=f"last window ({stats.window:.0f} s, {stats.throughput:.1f} tasks/s, "
            f"predicted wait {stats.predicted_wait:.1f} s)",
            title_justify="left",
        )
        for column in ("task", "count", "avg ms", "p50 ms", "p95 ms", "p99 ms"):
            table.add_column(column, justify="right" if column != "task" else "left")
        for name, t in stats.tasks.items():
            table.add_row(
                _cell(name),
                str(t.count),
                *(f"{v * 1000:.1f}" for v in (t.average, t.p50, t.p95, t.p99)),
            )
        out.print(table)


async def _list_groups(args: argparse.Namespace, out: Console) -> int:
    """``trunner inspect`` without a group: the groups found on Redis (a bounded SCAN)."""
    found = await discover_groups(_shared_redis(args), prefix=args.prefix)
    if args.json:
        print(json.dumps(as_dict(found)))
        return 0
    if not found.groups:
        out.print(
            f"no group found under the prefix {_shown(args.prefix)!r}: a group is found once "
            "one of its runners has started (check --redis and --prefix)",
            highlight=False,
        )
    else:
        table = Table(title=f"groups (prefix {_shown(args.prefix)})", title_justify="left")
        table.add_column("group", no_wrap=True)
        table.add_column("queue", no_wrap=True)
        for g in found.groups:
            table.add_row(_cell(g.group), _cell(g.queue))
        out.print(table)
        out.print("trunner inspect GROUP (--queue QUEUE when it is another's) shows one")
    if not found.complete:
        out.print("the scan stopped at its bound: some groups may be missing")
    for why in found.ignored:
        out.print(f"ignored: {_shown(why)}", highlight=False, soft_wrap=True)
    return 0


async def _inspect(args: argparse.Namespace, out: Console) -> int:
    if args.group is None:
        if args.queue is not None:
            out.print("--queue needs a group: trunner inspect GROUP --queue QUEUE")
            return 2
        return await _list_groups(args, out)
    async with _group_client(args) as client:
        info = await client.inspect()
    if args.json:
        print(json.dumps(as_dict(info), default=str))
    else:
        _print_group(info, out)
    return 0


def _ask(question: str) -> str | None:
    """The user's answer, or None when there is nobody to ask (stdin closed)."""
    try:
        return input(question)
    except EOFError:
        print()
        return None


async def _dead_letter(args: argparse.Namespace, out: Console) -> int:
    async with _group_client(args) as client:
        if args.action == "list":
            letters = await client.dead_letters(args.count)
            if args.json:
                print(json.dumps([as_dict(d) for d in letters], default=str))
                return 0
            _print_dead_letters(args.group, letters, await client.dead_letter_count(), out)
            return 0
        if args.action == "replay":
            return await _replay(client, args, out)
        if args.action == "delete":
            return await _delete_dead(client, args, out)
        count = await client.dead_letter_count()
        if not args.yes:
            answer = await trio.to_thread.run_sync(
                _ask, f"delete {count} dead letters of {args.group}? [y/N] "
            )
            if answer is None:
                out.print("nothing deleted: no answer (stdin is closed); pass --yes in scripts")
                return 1
            if answer.strip().lower() not in ("y", "yes"):
                out.print("nothing deleted")
                return 1
        out.print(f"deleted {await client.purge_dead_letters()} dead letters", highlight=False)
        return 0


#: Control characters (C0, DEL, C1) as escapes: text read from Redis is anybody's, and a
#: newline or a terminal escape sequence in it would forge lines or drive the terminal.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}


def _shown(text: object) -> str:
    """``text`` as one line of the terminal: its control characters escaped."""
    return str(text).translate(_CONTROLS)


def _cell(text: object) -> Text:
    """A table cell of text read from Redis: plain text (never Rich markup, whatever the
    console), its control characters escaped."""
    return Text(_shown(text))


def _print_dead_letters(group: str, letters: list[DeadLetter], total: int, out: Console) -> None:
    """One block per dead letter, readable at any width: ids are never cut (they are
    copied into ``replay``), and errors are sentences."""
    if not letters:
        out.print(f"no dead letters in group {group}", highlight=False, markup=False)
        return
    shown = f"{len(letters)} of {total}" if total > len(letters) else str(total)
    out.print(f"dead letters of {group}, oldest first ({shown}):", highlight=False, markup=False)
    for d in letters:
        task = _shown(d.task) if d.task else "(undecodable)"
        lines = [
            "",
            f"{_shown(d.id)}  {task}  attempt {d.attempt}  {_when(d.failed_at)}",
            f"  reason:  {_shown(d.reason)}",
            f"  error:   {_shown(d.error)}",
        ]
        if d.cause and d.cause != d.error:
            lines.append(f"  cause:   {_shown(d.cause)}")
        if d.headers:
            shown_headers = ", ".join(f"{_shown(k)}={_shown(v)}" for k, v in d.headers.items())
            lines.append(f"  headers: {shown_headers}")
        lines.append(f"  task id: {_shown(d.task_id)}  (consumer {_shown(d.consumer or '-')})")
        out.print("\n".join(lines), highlight=False, soft_wrap=True, markup=False)
    if total > len(letters):
        out.print(f"\n{total - len(letters)} more: pass --count {total}", highlight=False)


async def _delete_dead(client: Client, args: argparse.Namespace, out: Console) -> int:
    """Delete the dead letters named, or those of one task (asking first, as purge)."""
    if not args.ids and not args.task:
        out.print("delete what? name dead-letter ids, or --task NAME (purge deletes all)")
        return 2
    what = (
        f"the dead letters of task {args.task!r}" if args.task else f"{len(args.ids)} dead letters"
    )
    if not args.yes:
        answer = await trio.to_thread.run_sync(_ask, f"delete {what} of {args.group}? [y/N] ")
        if answer is None or answer.strip().lower() not in ("y", "yes"):
            closed = " (stdin is closed; pass --yes)" if answer is None else ""
            out.print(f"nothing deleted{closed}")
            return 1
    if args.task:
        deleted = await client.delete_dead_letters(task=args.task)
    else:
        deleted = await client.delete_dead_letters(args.ids)
    out.print(f"deleted {deleted} dead letters", highlight=False)
    return 0


async def _replay(client: Client, args: argparse.Namespace, out: Console) -> int:
    """Replay, and say what became of each id asked for; 1 unless all were replayed."""
    result = await client.replay_dead_letters(args.ids or None, task=args.task)
    if args.json:
        print(json.dumps(attrs.asdict(result)))
        return 0 if result.skipped == {} else 1
    if not args.ids and not result.new_ids and not result.skipped:
        out.print(f"no dead letters in group {args.group}: nothing to replay", highlight=False)
        return 0
    for dead_id, new_id in result.new_ids.items():
        out.print(f"replayed {dead_id} as {new_id}", highlight=False, soft_wrap=True)
    for dead_id, why in result.skipped.items():
        out.print(f"not replayed {dead_id}: {why}", highlight=False, soft_wrap=True, markup=False)
    asked = len(result.new_ids) + len(result.skipped)
    out.print(f"replayed {len(result.new_ids)} of {asked} dead letters", highlight=False)
    return 0 if not result.skipped else 1


async def _cron(args: argparse.Namespace, out: Console) -> int:
    tasks = load_settings(args.tasks).tasks if args.tasks else None
    async with _group_client(args, tasks) as client:
        if args.action == "fire":
            if not args.name:
                out.print("fire which schedule? trunner cron fire GROUP NAME --tasks M:A")
                return 2
            task_id = await client.fire_cron(args.name)
            out.print(f"fired {args.name}: task {task_id}", highlight=False, soft_wrap=True)
            return 0
        entries = await client.cron_entries()
    if args.json:
        print(json.dumps([as_dict(e) for e in entries]))
        return 0
    if not entries:
        out.print(f"no cron schedule known for {args.group} (pass --tasks)", highlight=False)
        return 0
    table = Table()
    for column in ("name", "expression", "task", "last fired", "next tick"):
        table.add_column(column)
    for e in entries:
        table.add_row(
            e.name, e.expression or "?", e.task or "?", _when(e.last_fired_at or 0.0),
            _when(e.next_fire_at or 0.0),
        )  # fmt: skip
    out.print(table)
    return 0


async def _dashboard(args: argparse.Namespace) -> int:
    try:
        # The dashboard extra (starlette, hypercorn) is loaded only by this command.
        from .dashboard._serve import run_dashboard  # noqa: PLC0415
    except ImportError as exc:
        raise ImportError(
            f"the dashboard needs its extra: pip install 'trunner[dashboard]' ({exc})"
        ) from None
    token = args.token
    if args.token_file:
        token = (await trio.Path(args.token_file).read_text(encoding="utf-8")).strip()
        if not token:
            raise ValueError(f"the token file {args.token_file} is empty")
    return await run_dashboard(
        args.redis_url,
        args.groups or [],
        host=args.host,
        port=args.port,
        read_only=args.read_only,
        token=token,
        tasks=load_settings(args.tasks).tasks if args.tasks else None,
        prefix=args.prefix,
        interval=args.interval,
    )


async def _quarantine(args: argparse.Namespace, out: Console) -> int:
    async with _group_client(args) as client:
        if args.action == "list":
            records = await client.quarantined(args.count)
            if args.json:
                print(json.dumps([as_dict(r) for r in records], default=str))
                return 0
            if not records:
                out.print(f"nothing of group {args.group} was set aside", highlight=False)
                return 0
            # One block per record, readable at any width (reasons are sentences).
            out.print(f"bad data set aside in {args.group}:", highlight=False)
            for r in records:
                out.print(
                    f"\n{_shown(r.id)}  {_when(r.at)}  {_shown(r.source)}  {_shown(repr(r.item))}\n"
                    f"  reason: {_shown(r.reason)}\n  action: {_shown(r.action)}\n"
                    f"  by:     {_shown(r.instance)}",
                    highlight=False,
                    soft_wrap=True,
                    markup=False,
                )
            return 0
        count = await client.quarantine_count()
        if not args.yes:
            answer = await trio.to_thread.run_sync(
                _ask, f"delete {count} quarantine records of {args.group}? [y/N] "
            )
            if answer is None or answer.strip().lower() not in ("y", "yes"):
                closed = " (stdin is closed; pass --yes)" if answer is None else ""
                out.print(f"nothing deleted{closed}")
                return 1
        out.print(f"deleted {await client.purge_quarantine()} quarantine records", highlight=False)
        return 0


async def _demo(args: argparse.Namespace) -> int:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def stop_on_signal() -> None:
                async for signum in signals:
                    print(f"\n{signal.Signals(signum).name}: stopping", file=sys.stderr)
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(stop_on_signal)
            await run_demo(args.redis, instances=args.instances, images=args.images)
            nursery.cancel_scope.cancel()
    return 0


def _user_error(error: BaseException) -> BaseException | None:
    """The one trunner error (or bad value) inside ``error``, to print without traceback."""
    leaves = list(leaf_exceptions(error))
    if len(leaves) == 1 and isinstance(
        leaves[0], TrunnerError | ValueError | TypeError | ImportError
    ):
        return leaves[0]
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    default_level = {"demo": "CRITICAL", "worker": "INFO"}.get(args.command, "WARNING")
    configure_logging(
        getattr(args, "log_level", default_level), getattr(args, "log_format", "text")
    )
    # No markup: what is printed holds text from Redis and from tasks (progress messages,
    # errors, names), which must show as it is (a path in brackets is not a closing tag).
    out = Console(highlight=False, markup=False)
    if args.command == "demo" and (args.instances < 1 or args.images < 0):
        print("trunner demo: --instances must be >= 1 and --images >= 0", file=sys.stderr)
        return 2
    runs: dict[str, Any] = {
        "worker": lambda: _worker(args),
        "dispatch": lambda: _dispatch(args, out),
        "inspect": lambda: _inspect(args, out),
        "status": lambda: _status(args, out),
        "result": lambda: _result(args, out),
        "cancel": lambda: _cancel(args, out),
        "pause": lambda: _pause(args, out),
        "resume": lambda: _pause(args, out),
        "dead-letter": lambda: _dead_letter(args, out),
        "quarantine": lambda: _quarantine(args, out),
        "cron": lambda: _cron(args, out),
        "dashboard": lambda: _dashboard(args),
        "demo": lambda: _demo(args),
    }
    try:
        code: int = trio.run(runs[args.command])
    except BaseException as exc:
        error = _user_error(exc)
        if error is None:
            raise
        print(f"trunner {args.command}: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
