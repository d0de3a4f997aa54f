"""The ``trunner`` command (also ``python -m trunner``).

::

    trunner worker myapp.worker:settings [--group G] [--workers N] [--processes N]
                   [--redis URL] [--health-port P] [--metrics-port P] [--log-format text|json]
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
    trunner workflow status|steps|cancel GROUP WORKFLOW_ID [--json]
    trunner workflow ls GROUP [--count N] [--offset N] [--json]
    trunner demo
    trunner --version

The command, not the library, owns signals: SIGINT/SIGTERM stop a worker gracefully, a
second one stops it at once (with ``--processes``, a third kills the worker processes).

The package has one module per command group (``_tasks``, ``_group``, ``_dead``, ...), the
parser in ``_arguments`` and the terminal helpers they share in ``_render``; this module
reads the command line and runs the command asked for.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import trio
from rich.console import Console

from .._util import leaf_exceptions
from .._worker.serve import configure_logging
from ..errors import TrunnerError
from . import _cron, _dashboard, _dead, _demo, _group, _quarantine, _tasks, _worker, _workflows
from ._arguments import _parser as _parser

# Its times are shown by one guarded formatter, the dashboard's too (a test pins it here).
from ._render import _when as _when

__all__ = ["main"]


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
        "worker": lambda: _worker.worker(args),
        "dispatch": lambda: _tasks.dispatch(args, out),
        "inspect": lambda: _group.inspect(args, out),
        "status": lambda: _tasks.status(args, out),
        "result": lambda: _tasks.result(args, out),
        "cancel": lambda: _tasks.cancel(args, out),
        "pause": lambda: _group.pause(args, out),
        "resume": lambda: _group.pause(args, out),
        "dead-letter": lambda: _dead.dead_letter(args, out),
        "quarantine": lambda: _quarantine.quarantine(args, out),
        "cron": lambda: _cron.cron(args, out),
        "workflow": lambda: _workflows.workflow(args, out),
        "dashboard": lambda: _dashboard.dashboard(args),
        "demo": lambda: _demo.demo(args),
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
