"""Dispatching from FastAPI: ``REDIS_URL=... uvicorn fastapi_app:app`` in examples/.

One ``trunner.aio.Client`` for the application's life, opened by its lifespan and shared
by every request. Run a worker beside it (``trunner worker images:settings`` in examples/).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import fastapi
from images import ResizeRequest, make_thumbnail, tasks

import trunner

REDIS_URL = os.environ.get("REDIS_URL", "redis://localhost:6379/0")
client = trunner.aio.Client(REDIS_URL, queue="images", tasks=tasks)


@asynccontextmanager
async def lifespan(app: fastapi.FastAPI) -> AsyncIterator[None]:
    async with client:  # connects at startup, closes at shutdown
        yield


app = fastapi.FastAPI(lifespan=lifespan)


@app.post("/thumbnails")
async def thumbnail(path: str, width: int = 128) -> dict[str, object]:
    handle = await client.dispatch(make_thumbnail, ResizeRequest(path, width))
    try:
        thumb = await handle.result(timeout=10)  # a Thumbnail, typed
    except trunner.ResultTimeout:
        raise fastapi.HTTPException(504, f"task {handle.id} is still running") from None
    return {"task_id": handle.id, "thumbnail": thumb.path, "width": thumb.width}
