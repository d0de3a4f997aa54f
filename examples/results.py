"""Task handles: ``python examples/results.py``.

A typed task whose result comes back as its declared type, a failure that comes back
with its traceback, a long task that reports its progress and is cancelled, and a task
that expired before it could start. Uses an in-process Redis unless REDIS_URL is set.
"""

from __future__ import annotations

import datetime
import os

import attrs
import trio

import trunner

tasks = trunner.TaskRegistry()
halfway = trio.Event()


@attrs.frozen
class ResizeRequest:
    path: str
    width: int
    requested_at: datetime.datetime


@attrs.frozen
class Thumbnail:
    path: str
    width: int


@tasks.task(keep_result=3600, timeout=30)
async def resize(request: ResizeRequest) -> Thumbnail:
    return Thumbnail(f"{request.path}.thumb.png", request.width)


@tasks.task(keep_result=3600)
async def charge(amount: int) -> None:
    raise ValueError(f"card declined for {amount}")


@tasks.task(keep_result=3600)
async def transcode(chunks: int) -> str:
    for chunk in range(chunks):
        await trunner.report_progress(chunk / chunks, f"chunk {chunk} of {chunks}")
        if chunk == chunks // 2:
            halfway.set()
        await trio.sleep(0.1)
    return "transcoded"


async def main() -> None:
    url = os.environ.get("REDIS_URL", "memory://results-example")
    config = trunner.RunnerConfig(consumer_group="media")
    async with trunner.open_runner(url, config, tasks) as runner:
        now = datetime.datetime.now(datetime.UTC)
        handle = await runner.dispatch(resize, ResizeRequest("cat.png", 128, now))
        thumbnail = await handle.result(timeout=10)  # a Thumbnail, typed as one
        print(f"resized: {thumbnail.path} ({thumbnail.width} px)")

        failing = await runner.dispatch(charge, 42)
        try:
            await failing.result(timeout=10)
        except trunner.TaskFailed as failure:
            print(f"charge failed: {failure.error}")

        long = await runner.dispatch(transcode, 20)
        await halfway.wait()
        status = await long.status()
        print(f"transcode: {status.state.value}, {status.progress:.0%}")
        print(f"cancel: {(await long.cancel(wait=True)).value}")
        try:
            await long.result(timeout=10)
        except trunner.TaskCancelled:
            print("transcode: cancelled")

    async with trunner.open_client(url, "media") as client:
        stale = await client.dispatch("resize", None, expires=0.001)
        await trio.sleep(0.01)  # nobody runs it before it expires
    async with trunner.open_runner(url, config, tasks) as runner:
        try:
            await runner.handle(str(stale)).result(timeout=10)
        except trunner.TaskExpired:
            print("stale resize: expired, never ran")


if __name__ == "__main__":
    trio.run(main)
