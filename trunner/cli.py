"""The ``trunner`` command (also ``python -m trunner``).

The command, not the library, owns signals: SIGINT/SIGTERM stop it gracefully.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence

import trio

from ._demo import run_demo
from ._util import leaf_exceptions
from .errors import TrunnerError

__all__ = ["main"]

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _level(value: str) -> str:
    level = value.upper()
    if level not in LEVELS:
        raise argparse.ArgumentTypeError(f"choose from {', '.join(LEVELS)} (got {value!r})")
    return level


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--log-level",
        type=_level,
        default=argparse.SUPPRESS,
        help="level of the 'trunner' logger (default: WARNING; the demo: CRITICAL)",
    )
    parser = argparse.ArgumentParser(
        prog="trunner",
        description="A Trio-native distributed task runner on Redis Streams.",
        parents=[common],
    )
    commands = parser.add_subparsers(dest="command", required=True)
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


async def _demo(args: argparse.Namespace) -> None:
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


def _user_error(error: BaseException) -> BaseException | None:
    """The one trunner error (or bad value) inside ``error``, to print without traceback."""
    leaves = list(leaf_exceptions(error))
    if len(leaves) == 1 and isinstance(leaves[0], TrunnerError | ValueError | TypeError):
        return leaves[0]
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    default_level = "CRITICAL" if args.command == "demo" else "WARNING"
    logging.getLogger("trunner").setLevel(getattr(args, "log_level", default_level))
    if args.command == "demo":
        if args.instances < 1 or args.images < 0:
            print("trunner demo: --instances must be >= 1 and --images >= 0", file=sys.stderr)
            return 2
        try:
            trio.run(_demo, args)
        except BaseException as exc:
            error = _user_error(exc)
            if error is None:
                raise
            print(f"trunner {args.command}: {type(error).__name__}: {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
