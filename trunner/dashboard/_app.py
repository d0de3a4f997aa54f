"""The dashboard as a Starlette application: pages, the event stream, actions, login."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
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

from trunner import TaskRegistry, TrunnerError, open_client, redact_url
from trunner._util import utc_text as _when

from ._actions import ACTIONS, Action, Form
from ._sampler import Sampler
from ._security import COOKIE, Guard, HostCheck

__all__ = ["create_app"]

HERE = Path(__file__).parent
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
    ) -> None:
        self.redis_url = redis_url
        self.shown_url = redact_url(redis_url)
        self.groups = list(dict.fromkeys(groups))
        self.guard = guard
        self.prefix = prefix
        self.tasks = tasks
        self.interval = interval
        self.samplers: dict[str, Sampler] = {}
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
        """Open a client and a sampler per group, for the app's lifetime."""
        async with AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(
                    open_client(self.redis_url, group, prefix=self.prefix, tasks=self.tasks)
                )
                for group in self.groups
            ]
            async with trio.open_nursery() as nursery:
                for client in clients:
                    sampler = Sampler(client, self.interval)
                    await nursery.start(sampler.run)
                    self.samplers[client.consumer_group] = sampler
                try:
                    yield
                finally:
                    nursery.cancel_scope.cancel()
                    self.samplers.clear()

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
            groups=self.groups,
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
        return self.samplers.get(request.path_params["group"])

    # -- routes -----------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        if (refused := self.gate(request)) is not None:
            return refused
        snapshots = [s.latest for s in self.samplers.values()]
        return self.page(request, "overview.html", snapshots=snapshots)

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
        return self.page(
            request,
            "group.html",
            group=sampler.group,
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
        # Quoted as the pages' links are (Jinja's urlencode): '#', '?' or '%' in a group's
        # name would otherwise end its path in the Location.
        where = f"{base}/group/{quote(sampler.group)}"
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
        if not self.samplers:
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
    groups: Sequence[str],
    *,
    read_only: bool = False,
    token: str | None = None,
    tasks: TaskRegistry | None = None,
    prefix: str = "trunner",
    interval: float = 1.0,
    allowed_hosts: Sequence[str] | None = None,
) -> Starlette:
    """The dashboard of ``groups`` as a Starlette ASGI application.

    Serve it with any ASGI server running Trio (``trunner dashboard`` runs hypercorn's
    Trio worker), or mount it in your own Starlette app (then enter its lifespan from
    yours: see the docs). It opens one trunner client per group in its lifespan.

    Args:
        redis_url: The groups' Redis (never shown: the page shows it redacted).
        groups: The consumer groups to show.
        read_only: Show no action, and refuse every POST (403).
        token: Require this token (at least :data:`MIN_TOKEN` characters): as
            ``Authorization: Bearer <token>``, or typed into the login form (which sets an
            HttpOnly, SameSite=Strict session cookie).
        tasks: The workers' registry: its cron schedules are shown with their
            expressions and next ticks, and can be fired now.
        prefix: The groups' key prefix.
        interval: Seconds between two snapshots of a group (what the pages show live).
        allowed_hosts: Host headers accepted (others get 400): against DNS rebinding
            when there is no token. Names or addresses, without a port; IPv6 ones with or
            without brackets (``::1``). None accepts any.

    Returns:
        The application.
    """
    if not groups:
        raise ValueError("name at least one group to show")
    if token is not None and len(token) < MIN_TOKEN:
        raise ValueError(
            f"a token of at least {MIN_TOKEN} characters, please (the dashboard acts on "
            "the groups, and a short one can be guessed): for example "
            "python -c 'import secrets; print(secrets.token_urlsafe(24))'"
        )
    if not interval > 0:
        raise ValueError(f"interval must be > 0, got {interval!r}")
    dashboard = Dashboard(
        redis_url,
        groups,
        guard=Guard(token, read_only=read_only),
        prefix=prefix,
        tasks=tasks,
        interval=interval,
    )

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with dashboard.running():
            yield

    routes = [
        Route("/", dashboard.overview),
        Route("/login", dashboard.login_page, methods=["GET"]),
        Route("/login", dashboard.login, methods=["POST"]),
        Route("/group/{group}", dashboard.group_page),
        Route("/group/{group}/snapshot", dashboard.snapshot),
        Route("/group/{group}/events", dashboard.events),
        Route("/group/{group}/action/{action}", dashboard.act, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = []
    if allowed_hosts is not None:
        middleware.append(Middleware(HostCheck, allowed_hosts=list(allowed_hosts)))
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.dashboard = dashboard
    return app
