"""The web examples, served for real: a FastAPI app on uvicorn (examples/fastapi_app.py,
``trunner.aio``) and a Flask app (examples/flask_app.py, ``trunner.sync``) each answer
HTTP requests with the result of a task that a ``trunner worker`` process ran."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from ..conftest import REPO
from ..support.servers import RedisServer

EXAMPLES = REPO / "examples"


def start(url: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=EXAMPLES,
        env={**os.environ, "PYTHONPATH": str(REPO), "REDIS_URL": url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(process: subprocess.Popen[str], signum: int = signal.SIGINT) -> int:
    process.send_signal(signum)
    code = process.wait(timeout=30)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()
    return code


def post(address: str, path: str, width: int) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{address}/thumbnails?path={path}&width={width}", data=b"", method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        answer: dict[str, Any] = json.loads(response.read())
        return answer


@pytest.fixture
def worker(redis_server: RedisServer) -> Iterator[str]:
    """``trunner worker images:settings`` on a database of its own; yields its URL."""
    url = redis_server.url.rsplit("/", 1)[0] + "/14"  # the examples' queue is 'images'
    redis.Redis.from_url(url).flushdb()
    process = start(url, "-m", "trunner", "worker", "images:settings", "--redis", url)
    try:
        assert process.stdout is not None
        assert json.loads(process.stdout.readline()) == {"ready": True}
        yield url
    finally:
        assert stop(process) == 0


def check_answers(address: str) -> None:
    def ask(i: int) -> dict[str, Any]:
        return post(address, f"cat{i}.png", 64 + i)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, range(24)))
    for i, answer in enumerate(answers):
        assert answer["thumbnail"] == f"cat{i}.thumb-{64 + i}.png"
        assert answer["width"] == 64 + i
    assert len({answer["task_id"] for answer in answers}) == 24


def serving_address(app: subprocess.Popen[str]) -> str:
    """The address uvicorn says it listens on, read from its log on stderr: its lifespan's
    "startup complete" comes before the socket is bound, this line after. When uvicorn
    ends first, the failure quotes what it said."""
    assert app.stderr is not None
    said: list[str] = []
    for line in app.stderr:
        said.append(line)
        if "Uvicorn running on " in line:
            return line.split("Uvicorn running on ", 1)[1].split()[0]
    pytest.fail(f"uvicorn ended ({app.wait()}) before listening:\n{''.join(said)}")


def test_a_fastapi_app_on_uvicorn_answers_with_task_results(worker: str) -> None:
    app = start(worker, "-m", "uvicorn", "fastapi_app:app", "--port", "0")
    try:
        check_answers(serving_address(app))
    finally:
        assert stop(app) == 0  # the lifespan closed the client


def test_a_flask_app_answers_with_task_results(worker: str) -> None:
    app = start(worker, "flask_app.py")
    try:
        assert app.stdout is not None
        line = app.stdout.readline()
        assert line.startswith("listening on "), line
        check_answers(line.split()[-1])
    finally:
        stop(app, signal.SIGKILL)


@pytest.mark.parametrize("example", ["fastapi_app.py", "flask_app.py", "images.py"])
def test_the_docs_show_the_examples_the_suite_runs(example: str) -> None:
    page = (REPO / "docs" / "dispatching-from-asyncio-and-sync.md").read_text()
    assert f"```python\n{(EXAMPLES / example).read_text()}```" in page
