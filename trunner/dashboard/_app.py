"""The dashboard as a Starlette application: pages, the event stream, actions, login."""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

import jinja2
import trio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from trunner import (
    FoundGroup,
    GroupsFound,
    RedisCommandError,
    TaskRegistry,
    TrunnerError,
    discover_groups,
    open_client,
    redact_url,
)
from trunner._util import utc_text as _when

from ._actions import ACTIONS, Action, Form
from ._sampler import Sampler
from ._security import COOKIE, Guard, HostCheck

__all__ = ["create_app"]

logger = logging.getLogger("trunner.dashboard")

HERE = Path(__file__).parent
#: Seconds between two discoveries of the groups (a ``SCAN`` of the database: see
#: ``trunner.discovery`` for its cost).
DISCOVER_INTERVAL = 60.0
#: The most groups a dashboard shows (each has a client and a sampler).
MAX_GROUPS = 100
#: Dead letters per page.
PAGE = 50
#: What every response says about where its content may come from: nothing external.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None (JSON has none)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _json(value: Any) -> str:
    return json.dumps(_finite(value), separators=(",", ":"))


def path_of(target: FoundGroup) -> str:
    """The path of a group's page: ``/group/<group>`` for a group reading the queue of its
    own name, else ``/queue/<queue>/group/<group>`` (quoted as the pages' links are)."""
    if target.own_queue:
        return f"/group/{quote(target.group)}"
    return f"/queue/{quote(target.queue)}/group/{quote(target.group)}"


def _narrowed(found: Sequence[FoundGroup], names: Sequence[str]) -> list[FoundGroup]:
    """The groups of ``found`` named in ``names`` (on whichever queue), and, for each name
    found on none, the group of that name on the queue of its own name."""
    shown: list[FoundGroup] = []
    for name in names:
        shown.extend([f for f in found if f.group == name] or [FoundGroup(name, name)])
    return shown


def label_of(target: FoundGroup) -> str:
    """How the pages name a group: its name, and the queue it reads if another's."""
    return target.group if target.own_queue else f"{target.group} (queue {target.queue})"


class _SnapshotEvents:
    """The server-sent events of one group page: its snapshot now, then each newer one.

    An iterator object, not an async generator: when the browser goes away, the response
    stops iterating while it waits between two events, and an async generator left
    suspended there would be finalized by the garbage collector (a ResourceWarning), at
    any later moment."""

    def __init__(self, sampler: Sampler) -> None:
        self._sampler = sampler
        self._version = -1

    def __aiter__(self) -> _SnapshotEvents:
        return self

    async def __anext__(self) -> str:
        sampler = self._sampler
        if not await sampler.wait_newer(self._version):
            raise StopAsyncIteration
        self._version = sampler.version
        return f"id: {self._version}\nevent: snapshot\ndata: {_json(sampler.latest)}\n\n"


class Dashboard:
    """The state of one dashboard app: its groups' clients and samplers, its guard."""

    def __init__(
        self,
        redis_url: str,
        groups: Sequence[str],
        *,
        guard: Guard,
        prefix: str,
        tasks: TaskRegistry | None,
        interval: float,
        discover_interval: float = DISCOVER_INTERVAL,
    ) -> None:
        self.redis_url = redis_url
        self.shown_url = redact_url(redis_url)
        self.names = list(dict.fromkeys(groups))
        """The groups named (``--group``); none: every group found."""
        self.guard = guard
        self.prefix = prefix
        self.tasks = tasks
        self.interval = interval
        self.discover_interval = discover_interval
        self.samplers: dict[FoundGroup, Sampler] = {}
        self.found: GroupsFound | None = None
        """The last discovery's result (None before the first, or when it failed)."""
        self.found_at: float | None = None
        self.discovery_error: str | None = None
        self.left_out = 0
        """Groups found but not shown: beyond :data:`MAX_GROUPS`."""
        self._nursery: trio.Nursery | None = None
        self.started = False
        """Whether its startup (the lifespan's: finding the groups, opening their clients)
        is done and the app not stopped."""
        self._discovering = trio.Lock()
        self.flashes: dict[str, str] = {}
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.templates.filters["when"] = _when
        self.templates.filters["ms"] = lambda s: "-" if s is None else f"{s * 1000:.1f}"

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Find the groups, and open a client and a sampler per group, for the app's
        lifetime; look for new groups every ``discover_interval`` seconds."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                await self.discover(starting=True)
                nursery.start_soon(self._rediscover)
                self.started = True
                yield
            finally:
                self.started = False
                nursery.cancel_scope.cancel()
                self._nursery = None
                self.samplers.clear()

    async def _rediscover(self) -> None:
        while True:
            await trio.sleep(self.discover_interval)
            await self.discover()

    async def discover(self, *, starting: bool = False) -> list[FoundGroup]:
        """Look for the groups now (``SCAN``, see ``trunner.discovery``) and start showing
        those not shown yet; return them. A group shown stays shown.

        The groups named (``--group``) are narrowed to: each on the queues it was found
        reading, else on the queue of its own name. When discovery fails, the groups
        named are shown on their own queues; with none named, it raises at start and is
        logged later.
        """
        async with self._discovering:
            try:
                found = await discover_groups(self.redis_url, prefix=self.prefix)
            except TrunnerError as exc:
                self.discovery_error = f"{type(exc).__name__}: {exc}"
                if starting and not self.names:
                    if isinstance(exc, RedisCommandError):  # SCAN refused (an ACL ...)
                        raise RedisCommandError(
                            f"cannot list the groups on {self.shown_url}: {exc}; name them "
                            "(--group, or create_app's groups)"
                        ) from exc
                    raise
                logger.warning("dashboard: looking for groups failed: %s", exc)
                wanted = [FoundGroup(name, name) for name in self.names]
            else:
                self.found, self.found_at, self.discovery_error = found, time.time(), None
                if not found.complete:
                    logger.warning(
                        "dashboard: the scan for groups stopped at its bound: some may be "
                        "missing (name them with --group)"
                    )
                wanted = _narrowed(found.groups, self.names) if self.names else found.groups
            new = [w for w in wanted if w not in self.samplers]
            room = max(0, MAX_GROUPS - len(self.samplers))
            self.left_out = max(0, len(new) - room)
            for target in new[:room]:
                await self._show(target, starting=starting)
            return new[:room]

    async def _show(self, target: FoundGroup, *, starting: bool) -> None:
        assert self._nursery is not None
        try:
            sampler = await self._nursery.start(self._watch, target)
        except TrunnerError as exc:  # Redis gone meanwhile: tried again at the next round
            if starting:
                raise
            logger.warning("dashboard: cannot show group %s: %s", label_of(target), exc)
            return
        self.samplers[target] = sampler

    async def _watch(self, target: FoundGroup, *, task_status: trio.TaskStatus[Sampler]) -> None:
        async with open_client(
            self.redis_url, target.queue, group=target.group, prefix=self.prefix, tasks=self.tasks
        ) as client:
            sampler = Sampler(client, self.interval)
            async with trio.open_nursery() as nursery:
                await nursery.start(sampler.run)
                task_status.started(sampler)

    # -- helpers ----------------------------------------------------------------------------

    def page(self, request: Request, template: str, status: int = 200, **values: Any) -> Response:
        session = self.guard.session(request)
        values.setdefault("flash", self.flashes.pop(session[0], None) if session else None)
        sid = session[0] if session else None
        fresh = None
        if session is None:
            fresh = self.guard.new_session(authenticated=False)
            sid = fresh.split(".", 1)[0]
        assert sid is not None
        html = self.templates.get_template(template).render(
            base=request.scope.get("root_path", ""),
            csrf=self.guard.csrf_token(sid),
            read_only=self.guard.read_only,
            login=self.guard.needs_login,
            redis=self.shown_url,
            links=[(label_of(t), path_of(t)) for t in sorted(self.samplers)],
            actions=ACTIONS,
            **values,
        )
        response = HTMLResponse(html, status, headers=SECURITY_HEADERS)
        if fresh is not None:
            _set_cookie(request, response, fresh)
        return response

    def gate(self, request: Request) -> Response | None:
        """The response refusing a request that may not see the dashboard, if it may not."""
        if self.guard.allowed(request):
            return None
        if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
            base = request.scope.get("root_path", "")
            return RedirectResponse(f"{base}/login", 303, headers=SECURITY_HEADERS)
        return PlainTextResponse("the dashboard's token is needed", 401, headers=SECURITY_HEADERS)

    def sampler(self, request: Request) -> Sampler | None:
        group = request.path_params["group"]
        return self.samplers.get(FoundGroup(request.path_params.get("queue", group), group))

    # -- routes -----------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        if (refused := self.gate(request)) is not None:
            return refused
        rows = [
            (label_of(t), path_of(t), s.latest)
            for t, s in sorted(self.samplers.items(), key=lambda item: item[0])
        ]
        return self.page(
            request,
            "overview.html",
            rows=rows,
            named=self.names,
            found=self.found,
            found_at=self.found_at,
            discovery_error=self.discovery_error,
            left_out=self.left_out,
            max_groups=MAX_GROUPS,
            discover_interval=self.discover_interval,
            prefix=self.prefix,
        )

    async def group_page(self, request: Request) -> Response:
        if (refused := self.gate(request)) is not None:
            return refused
        sampler = self.sampler(request)
        if sampler is None:
            return self._unknown(request)
        client = sampler.client
        before = request.query_params.get("before", "+")
        problems: dict[str, str] = {}
        try:
            letters = await client.dead_letters_newest(PAGE + 1, before)
        except (TrunnerError, ValueError) as exc:
            letters, problems["dead letters"] = [], f"{type(exc).__name__}: {exc}"
        more = len(letters) > PAGE
        letters = letters[:PAGE]
        try:
            crons = await client.cron_entries()
        except (TrunnerError, ValueError) as exc:
            crons, problems["cron"] = [], f"{type(exc).__name__}: {exc}"
        target = FoundGroup(sampler.queue, sampler.group)
        return self.page(
            request,
            "group.html",
            group=sampler.group,
            queue=sampler.queue,
            label=label_of(target),
            path=path_of(target),
            snapshot=sampler.latest,
            letters=letters,
            next_page=f"({letters[-1].id}" if more and letters else None,
            first_page=before != "+",
            crons=crons,
            can_fire=self.tasks is not None,
            group_actions=[
                a for a in ACTIONS.values() if a.on_group and a.available(sampler.client)
            ],
            problems=problems,
        )

    async def snapshot(self, request: Request) -> Response:
        if (refused := self.gate(request)) is not None:
            return refused
        sampler = self.sampler(request)
        if sampler is None:
            return self._unknown(request)
        return Response(_json(sampler.latest), media_type="application/json")

    async def events(self, request: Request) -> Response:
        """Server-sent events: the group's snapshot now, then each newer one."""
        if (refused := self.gate(request)) is not None:
            return refused
        sampler = self.sampler(request)
        if sampler is None:
            return self._unknown(request)

        headers = {**SECURITY_HEADERS, "x-accel-buffering": "no"}
        events = _SnapshotEvents(sampler)
        return StreamingResponse(events, media_type="text/event-stream", headers=headers)

    async def act(self, request: Request) -> Response:
        if (refused := self.gate(request)) is not None:
            return refused
        if self.guard.read_only:
            return PlainTextResponse("read-only dashboard: no actions", 403)
        fields = await _form(request)
        if fields is None:
            return PlainTextResponse("form too large", 413)
        submitted = (fields.get("csrf") or [""])[0] or request.headers.get("x-csrf-token")
        if (why := self.guard.refuse_post(request, submitted)) is not None:
            return PlainTextResponse(why, 403, headers=SECURITY_HEADERS)
        sampler = self.sampler(request)
        action = ACTIONS.get(request.path_params["action"])
        if sampler is None or action is None or not action.available(sampler.client):
            return self._unknown(request)
        said = await self._run(action, sampler, fields)
        await sampler.sample()  # the next page and the event streams show the effect
        session = self.guard.session(request)
        if session is not None:
            self.flashes[session[0]] = said
            while len(self.flashes) > 1000:
                del self.flashes[next(iter(self.flashes))]
        if "application/json" in request.headers.get("accept", ""):
            return JSONResponse({"done": said})
        base = request.scope.get("root_path", "")
        # Quoted as the pages' links are: '#', '?' or '%' in a group's name would
        # otherwise end its path in the Location.
        where = f"{base}{path_of(FoundGroup(sampler.queue, sampler.group))}"
        return RedirectResponse(where, 303, headers=SECURITY_HEADERS)

    @staticmethod
    async def _run(action: Action, sampler: Sampler, fields: Form) -> str:
        try:
            return await action.run(sampler.client, fields)
        except (TrunnerError, ValueError, LookupError) as exc:
            return f"{action.label} failed: {type(exc).__name__}: {exc}"

    async def login_page(self, request: Request) -> Response:
        return self.page(request, "login.html", error=None)

    async def login(self, request: Request) -> Response:
        form = await _form(request) or {}
        submitted = (form.get("csrf") or [""])[0]
        why = self.guard.refuse_post(request, submitted)
        if why is None and not self.guard.token_matches((form.get("token") or [""])[0]):
            why = "wrong token"
        if why is not None:
            return self.page(request, "login.html", status=403, error=why)
        base = request.scope.get("root_path", "")
        response = RedirectResponse(f"{base}/", 303, headers=SECURITY_HEADERS)
        _set_cookie(request, response, self.guard.new_session(authenticated=True))
        return response

    def _unknown(self, request: Request) -> Response:
        if self._nursery is None:
            why = "the dashboard is not started: its lifespan did not run (see the docs)"
            return PlainTextResponse(why, 503)
        return PlainTextResponse("no such group or action on this dashboard", 404)


#: The largest form accepted (a page's worth of selected ids is a few kB).
MAX_FORM = 256 * 1024


async def _form(request: Request) -> Form | None:
    """The fields of a URL-encoded form (what the pages post); None when too large."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            return None
    return parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)


def _set_cookie(request: Request, response: Response, value: str) -> None:
    response.set_cookie(
        COOKIE,
        value,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path=request.scope.get("root_path", "") or "/",
    )


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
    ([``discover_groups``][trunner.discover_groups]) and opens one trunner client per
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
        guard=Guard(token, read_only=read_only),
        prefix=prefix,
        tasks=tasks,
        interval=interval,
        discover_interval=discover_interval,
    )

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with dashboard.running():
            yield

    routes = [
        Route("/", dashboard.overview),
        Route("/login", dashboard.login_page, methods=["GET"]),
        Route("/login", dashboard.login, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    # A group's pages; under /queue/<queue> for a group reading another queue than its
    # own name's (fan-out). Routes, not a Mount: a Mount would change the root path.
    for above in ("", "/queue/{queue}"):
        routes += [
            Route(f"{above}/group/{{group}}", dashboard.group_page),
            Route(f"{above}/group/{{group}}/snapshot", dashboard.snapshot),
            Route(f"{above}/group/{{group}}/events", dashboard.events),
            Route(f"{above}/group/{{group}}/action/{{action}}", dashboard.act, methods=["POST"]),
        ]
    middleware = []
    if allowed_hosts is not None:
        middleware.append(Middleware(HostCheck, allowed_hosts=list(allowed_hosts)))
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.dashboard = dashboard
    return app
