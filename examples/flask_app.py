"""Dispatching from Flask (or any synchronous code): ``REDIS_URL=... flask --app flask_app
run`` in examples/.

One ``trunner.sync.Client`` for the process, shared by every request thread; it connects
on first use. Run a worker beside it (``trunner worker images:settings`` in examples/).
``python examples/flask_app.py`` serves it on a free port and prints its address.
"""

from __future__ import annotations

import os

import flask
from images import ResizeRequest, make_thumbnail, tasks

import trunner

REDIS_URL = os.environ.get("REDIS_URL", "redis://localhost:6379/0")
client = trunner.sync.Client(REDIS_URL, queue="images", tasks=tasks)
app = flask.Flask(__name__)


@app.post("/thumbnails")
def thumbnail() -> tuple[dict[str, object], int]:
    path = flask.request.args["path"]
    width = int(flask.request.args.get("width", 128))
    handle = client.dispatch(make_thumbnail, ResizeRequest(path, width))
    try:
        thumb = handle.result(timeout=10)  # a Thumbnail, typed
    except trunner.ResultTimeout:
        return {"error": f"task {handle.id} is still running"}, 504
    return {"task_id": handle.id, "thumbnail": thumb.path, "width": thumb.width}, 200


if __name__ == "__main__":
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app, threaded=True)
    print(f"listening on http://127.0.0.1:{server.port}", flush=True)
    with client:
        server.serve_forever()
