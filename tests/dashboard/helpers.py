"""Helpers of the dashboard's tests: the app opened in-process (httpx's ASGI transport),
or served by hypercorn on a free loopback port; the CSRF token of a page."""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio

pytest.importorskip("starlette", reason="the dashboard extra is not installed")

from trunner.dashboard import create_app, serve_dashboard

#: The origin the in-process app is reached at.
ORIGIN = "http://127.0.0.1"


@asynccontextmanager
async def open_app(
    redis: str, groups: list[str] | None, **options: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """The dashboard, its lifespan entered, behind an httpx client (no server)."""
    async with open_dashboard(redis, groups, **options) as (_, http):
        yield http


@asynccontextmanager
async def open_dashboard(
    redis: str, groups: list[str] | None, **options: Any
) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    """As :func:`open_app`, with the app's ``Dashboard`` (to make it look for groups now)."""
    options.setdefault("interval", 0.2)
    app = create_app(redis, groups, **options)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as http:
            yield app.state.dashboard, http


@asynccontextmanager
async def served(redis: str, groups: list[str], **options: Any) -> AsyncIterator[str]:
    """The dashboard served by hypercorn's Trio worker on a free port: its base URL."""
    options.setdefault("interval", 0.2)
    app = create_app(redis, groups, **options)
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(functools.partial(serve_dashboard, app, "127.0.0.1", 0))
        yield urls[0]
        nursery.cancel_scope.cancel()


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, "the page has a CSRF field"
    return found.group(1)


async def post(
    http: httpx.AsyncClient, path: str, data: dict[str, Any], *, origin: str | None = ORIGIN
) -> httpx.Response:
    """POST a form as a browser of this site would (with its Origin header)."""
    headers = {"origin": origin} if origin is not None else {}
    return await http.post(path, data=data, headers=headers)
