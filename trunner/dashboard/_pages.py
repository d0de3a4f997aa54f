"""The dashboard's answers to requests: its pages, a group's snapshot and event stream,
the actions and the login, each behind the guard."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import jinja2
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)

from trunner import TrunnerError
from trunner._util import utc_text as _when
from trunner.admin import FoundGroup

from ._actions import ACTIONS, Action, Form
from ._groups import MAX_GROUPS, Dashboard, label_of, path_of
from ._sampler import Sampler
from ._security import COOKIE, Guard

__all__ = ["Pages"]

HERE = Path(__file__).parent
#: Dead letters per page.
PAGE = 50
#: Steps per page of a workflow's grid, and failures shown (of the 100 kept).
GRID = 2500
FAILURES_SHOWN = 20
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


class Pages:
    """The request handlers of one dashboard app: pages rendered from its groups' latest
    snapshots, and actions on its groups, each request checked by its guard."""

    def __init__(self, dashboard: Dashboard, guard: Guard) -> None:
        self.dashboard = dashboard
        self.guard = guard
        self.flashes: dict[str, str] = {}
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.templates.filters["when"] = _when
        self.templates.filters["ms"] = lambda s: "-" if s is None else f"{s * 1000:.1f}"

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
            redis=self.dashboard.shown_url,
            links=[(label_of(t), path_of(t)) for t in sorted(self.dashboard.samplers)],
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
        return self.dashboard.samplers.get(
            FoundGroup(request.path_params.get("queue", group), group)
        )

    # -- routes -----------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        if (refused := self.gate(request)) is not None:
            return refused
        rows = [
            (label_of(t), path_of(t), s.latest)
            for t, s in sorted(self.dashboard.samplers.items(), key=lambda item: item[0])
        ]
        return self.page(
            request,
            "overview.html",
            rows=rows,
            named=self.dashboard.names,
            found=self.dashboard.found,
            found_at=self.dashboard.found_at,
            discovery_error=self.dashboard.discovery_error,
            left_out=self.dashboard.left_out,
            max_groups=MAX_GROUPS,
            discover_interval=self.dashboard.discover_interval,
            prefix=self.dashboard.prefix,
        )

    async def group_page(self, request: Request) -> Response:
        if (refused := self.gate(request)) is not None:
            return refused
        sampler = self.sampler(request)
        if sampler is None:
            return self._unknown(request)
        admin = sampler.admin
        before = request.query_params.get("before", "+")
        problems: dict[str, str] = {}
        try:
            letters = await admin.dead_letters_newest(PAGE + 1, before)
        except (TrunnerError, ValueError) as exc:
            letters, problems["dead letters"] = [], f"{type(exc).__name__}: {exc}"
        more = len(letters) > PAGE
        letters = letters[:PAGE]
        try:
            crons = await admin.cron_entries()
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
            can_fire=self.dashboard.tasks is not None,
            group_actions=[
                a for a in ACTIONS.values() if a.on_group and a.available(sampler.client)
            ],
            problems=problems,
        )

    async def workflow_page(self, request: Request) -> Response:
        """One workflow: its state and counts, a page of its steps as a grid, and the
        failures it keeps (read when asked: a workflow of 100 000 steps has 40 pages)."""
        if (refused := self.gate(request)) is not None:
            return refused
        sampler = self.sampler(request)
        if sampler is None:
            return self._unknown(request)
        workflow_id = request.path_params["workflow"]
        start = _page_start(request.query_params.get("start", "0"))
        steps, problem = None, None
        try:
            steps = await sampler.admin.workflow_steps(workflow_id, start, GRID)
        except (TrunnerError, ValueError) as exc:
            problem = f"{type(exc).__name__}: {exc}"[:500]
        target = FoundGroup(sampler.queue, sampler.group)
        return self.page(
            request,
            "workflow.html",
            workflow_id=workflow_id,
            label=label_of(target),
            path=path_of(target),
            steps=steps,
            problem=problem,
            grid=GRID,
            failures_shown=FAILURES_SHOWN,
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
        if not self.dashboard.in_lifespan:
            why = "the dashboard is not started: its lifespan did not run (see the docs)"
            return PlainTextResponse(why, 503)
        return PlainTextResponse("no such group or action on this dashboard", 404)


def _page_start(given: str) -> int:
    """The first step of a page of the grid asked for (0 for anything but a count)."""
    return int(given) if given.isdigit() and len(given) < 10 else 0


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
