"""``trunner dashboard``: serve the web dashboard, whose extra only this command loads."""

from __future__ import annotations

import argparse

import trio

from .._worker.serve import load_settings

__all__ = ["dashboard"]


async def dashboard(args: argparse.Namespace) -> int:
    try:
        # The dashboard extra (starlette, hypercorn) is loaded only by this command.
        from ..dashboard._serve import run_dashboard  # noqa: PLC0415
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
