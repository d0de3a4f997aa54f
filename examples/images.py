"""The tasks of the web examples, and their worker: ``trunner worker images:settings
--redis redis://localhost:6379/0`` in examples/.

examples/fastapi_app.py (asyncio) and examples/flask_app.py (synchronous) dispatch
``make_thumbnail`` to it and answer with its result.
"""

from __future__ import annotations

import attrs
import trio

import trunner

tasks = trunner.TaskRegistry()


@attrs.frozen
class ResizeRequest:
    path: str
    width: int = 128


@attrs.frozen
class Thumbnail:
    path: str
    width: int


@tasks.task(keep_result=60)  # the result is kept a minute for handle.result()
async def make_thumbnail(request: ResizeRequest) -> Thumbnail:
    await trio.sleep(0.01)  # the real work goes here
    stem, _, suffix = request.path.rpartition(".")
    return Thumbnail(f"{stem}.thumb-{request.width}.{suffix}", request.width)


settings = trunner.WorkerSettings(tasks, trunner.RunnerConfig(consumer_group="images"))
