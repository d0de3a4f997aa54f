"""The web dashboard of trunner: groups live in the browser, and actions on them.

``pip install 'trunner[dashboard]'``; ``trunner dashboard REDIS_URL`` serves it, and
:func:`create_app` returns it as an ASGI application to mount in your own (see
[The dashboard](dashboard.md)). A top room: it uses trunner's public API only, and
nothing of trunner imports it.
"""

from __future__ import annotations

from .._public import fixup_module_metadata
from ._app import create_app
from ._serve import serve_dashboard

__all__ = ["create_app", "serve_dashboard"]

fixup_module_metadata(__name__, globals())
