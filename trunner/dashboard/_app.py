"""The dashboard as a Starlette application: its options checked, its routes, its lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from trunner import TaskRegistry

from ._groups import DISCOVER_INTERVAL, Dashboard
from ._pages import Pages
from ._security import Guard, HostCheck

__all__ = ["create_app"]

HERE = Path(__file__).parent


#: The shortest token the dashboard takes: it is the only guard of actions on the groups,
#: and nothing limits how many a client may try.
MIN_TOKEN = 16


def create_app(
    redis_url: str,
    groups: Sequence[str] | None = None,
    *,
    read_only: bool = False,
    token: str | None = None,
    tasks: TaskRegistry | None = None,
    prefix: str = "trunner",
    interval: float = 1.0,
    allowed_hosts: Sequence[str] | None = None,
    discover_interval: float = DISCOVER_INTERVAL,
) -> Starlette:
    """The dashboard of the groups on a Redis as a Starlette ASGI application.

    Serve it with any ASGI server running Trio (``trunner dashboard`` runs hypercorn's
    Trio worker), or mount it in your own Starlette app (then enter its lifespan from
    yours: see the docs). Its lifespan finds the groups
    ([``discover_groups``][trunner.admin.discover_groups]) and opens one trunner client per
    group shown; it looks for new groups every ``discover_interval`` seconds.

    Args:
        redis_url: The groups' Redis (never shown: the page shows it redacted).
        groups: The consumer groups to show, by name: each on the queues it is found
            reading, else on the queue of its own name. None or empty: every group
            found (at most :data:`MAX_GROUPS`).
        read_only: Show no action, and refuse every POST (403).
        token: Require this token (at least :data:`MIN_TOKEN` characters): as
            ``Authorization: Bearer <token>``, or typed into the login form (which sets an
            HttpOnly, SameSite=Strict session cookie).
        tasks: The workers' registry: its cron schedules are shown with their
            expressions and next ticks, and can be fired now.
        prefix: The groups' key prefix.
        interval: Seconds between two snapshots of a group (what the pages show live).
        discover_interval: Seconds between two discoveries of the groups (each a
            ``SCAN`` of the database, see [The dashboard](dashboard.md#finding-the-groups)).
        allowed_hosts: Host headers accepted (others get 400): against DNS rebinding
            when there is no token. Names or addresses, without a port; IPv6 ones with or
            without brackets (``::1``). None accepts any.

    Returns:
        The application.
    """
    groups = [] if groups is None else list(groups)
    if token is not None and len(token) < MIN_TOKEN:
        raise ValueError(
            f"a token of at least {MIN_TOKEN} characters, please (the dashboard acts on "
            "the groups, and a short one can be guessed): for example "
            "python -c 'import secrets; print(secrets.token_urlsafe(24))'"
        )
    if not interval > 0:
        raise ValueError(f"interval must be > 0, got {interval!r}")
    if not discover_interval > 0:
        raise ValueError(f"discover_interval must be > 0, got {discover_interval!r}")
    dashboard = Dashboard(
        redis_url,
        groups,
        prefix=prefix,
        tasks=tasks,
        interval=interval,
        discover_interval=discover_interval,
    )
    pages = Pages(dashboard, Guard(token, read_only=read_only))

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with dashboard.running():
            yield

    routes = [
        Route("/", pages.overview),
        Route("/login", pages.login_page, methods=["GET"]),
        Route("/login", pages.login, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    # A group's pages; under /queue/<queue> for a group reading another queue than its
    # own name's (fan-out). Routes, not a Mount: a Mount would change the root path.
    for above in ("", "/queue/{queue}"):
        routes += [
            Route(f"{above}/group/{{group}}", pages.group_page),
            Route(f"{above}/group/{{group}}/snapshot", pages.snapshot),
            Route(f"{above}/group/{{group}}/events", pages.events),
            Route(f"{above}/group/{{group}}/action/{{action}}", pages.act, methods=["POST"]),
            # A workflow id may hold a '/': the rest of the path is the id.
            Route(f"{above}/group/{{group}}/workflow/{{workflow:path}}", pages.workflow_page),
        ]
    middleware = []
    if allowed_hosts is not None:
        middleware.append(Middleware(HostCheck, allowed_hosts=list(allowed_hosts)))
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.dashboard = dashboard
    return app
