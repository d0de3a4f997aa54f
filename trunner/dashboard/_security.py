"""Who may look and who may act: the token, the session cookie, CSRF and origin checks.

- Without a token, anyone who can reach the port may look (bind to loopback: the default).
  With one, a request shows it as ``Authorization: Bearer <token>``, or carries the session
  cookie the login form set (HttpOnly, SameSite=Strict) after the token was typed in.
- Every POST carries the session's CSRF token (a hidden form field, or the
  ``X-CSRF-Token`` header) and, when the browser sends one, an ``Origin`` (else
  ``Referer``) of this very site; a request authenticated by its bearer header, which a
  browser never adds by itself, may omit both.
- Read-only refuses every action (403).
- With ``allowed_hosts`` (:class:`HostCheck`), a request whose ``Host`` is not one of them
  gets 400: against DNS rebinding, where a page of another site reaches a dashboard that
  has no token through a name of the attacker's that resolves to loopback.

The session is a random id in a cookie signed with a key made at start (a restart logs
everyone out); the CSRF token is derived from it, so nothing is stored server-side.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["COOKIE", "Guard", "HostCheck", "host_name"]

#: The session cookie's name.
COOKIE = "trunner_dashboard"


class Guard:
    """The dashboard's checks: one per app, with its own signing key."""

    def __init__(self, token: str | None, *, read_only: bool) -> None:
        if token is not None and not token.strip():
            raise ValueError("the token must not be empty")
        self._token = token
        self.read_only = read_only
        self._key = secrets.token_bytes(32)

    @property
    def needs_login(self) -> bool:
        return self._token is not None

    def _mac(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()[:40]

    def new_session(self, *, authenticated: bool) -> str:
        """A signed cookie value for a new session."""
        body = f"{secrets.token_urlsafe(18)}.{int(authenticated)}"
        return f"{body}.{self._mac(body)}"

    def session(self, request: Request) -> tuple[str, bool] | None:
        """(session id, whether it logged in) from a valid cookie; None without one."""
        value = request.cookies.get(COOKIE, "")
        sid, _, rest = value.partition(".")
        flag, _, mac = rest.partition(".")
        if not sid or flag not in ("0", "1"):
            return None
        if not _same(mac, self._mac(f"{sid}.{flag}")):
            return None
        return sid, flag == "1"

    def token_matches(self, given: str) -> bool:
        return self._token is not None and _same(given, self._token)

    def bearer(self, request: Request) -> bool:
        """Whether the request shows the token in its Authorization header."""
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.token_matches(given.strip())

    def allowed(self, request: Request) -> bool:
        """Whether the request may see the dashboard."""
        if self._token is None or self.bearer(request):
            return True
        found = self.session(request)
        return found is not None and found[1]

    def csrf_token(self, sid: str) -> str:
        return self._mac(f"csrf:{sid}")

    def refuse_post(self, request: Request, submitted: str | None) -> str | None:
        """Why this POST is refused (None: it may go on). ``submitted``: the CSRF token
        the form or the X-CSRF-Token header carried."""
        bearer = self.bearer(request)
        origin = request.headers.get("origin") or _origin_of(request.headers.get("referer"))
        if origin is None or origin == "null":
            if not bearer:
                return "no Origin or Referer header: refused (cross-site request?)"
        elif origin != _own_origin(request):
            return f"cross-origin request from {origin}: refused"
        found = self.session(request)
        if found is None or not submitted:
            return "no CSRF token: reload the page and try again"
        if not _same(submitted, self.csrf_token(found[0])):
            return "wrong CSRF token: reload the page and try again"
        return None


def _same(given: str, expected: str) -> bool:
    """Whether ``given`` (from the request) is ``expected``, in constant time. As bytes:
    ``hmac.compare_digest`` raises TypeError on a str that is not ASCII, and what a
    request carries (a cookie, a header, a form field) may be anything."""
    return hmac.compare_digest(
        given.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape")
    )


def _origin_of(url: str | None) -> str | None:
    if not url:
        return None
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else None


def _own_origin(request: Request) -> str:
    host = request.headers.get("host", "")
    return f"{request.url.scheme}://{host}"


def host_name(host: str) -> str:
    """The name or address of a ``Host`` header (or of an allowed host), without its port
    and, for IPv6, without its brackets; lower case: ``[::1]:8080`` -> ``::1``."""
    host = host.strip().lower()
    if host.startswith("["):
        address, bracket, _ = host[1:].partition("]")
        return address if bracket else ""
    if host.count(":") > 1:  # a bare IPv6 address (an allowed host written without [])
        return host
    return host.partition(":")[0]


class HostCheck:
    """Answers 400 to a request (HTTP or websocket) whose ``Host`` is not allowed.

    Unlike Starlette's ``TrustedHostMiddleware``, it understands IPv6 hosts
    (``Host: [::1]:8080``), which that one never matches.
    """

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str]) -> None:
        self.app = app
        self.allowed = frozenset(host_name(h) for h in allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            host = host_name(Headers(scope=scope).get("host", ""))
            if host not in self.allowed:
                response = PlainTextResponse("Invalid host header", 400)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
