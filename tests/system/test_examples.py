"""Every example runs, so the examples cannot rot."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis
import trio

from ..conftest import REPO, redis_state, run_python
from ..support.servers import RedisServer

EXAMPLES = REPO / "examples"


def run_example(name: str, env: dict[str, str], *args: str) -> str:
    result = run_python(str(EXAMPLES / name), *args, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("tier", ["memory", "redis"])
def test_quickstart(tier: str, redis_server: RedisServer) -> None:
    env = {"REDIS_URL": redis_server.url} if tier == "redis" else {}
    out = run_example("quickstart.py", env)
    assert out.count("sent to ") == 3
    assert out.strip().endswith("runner stopped: 3 tasks done")


def test_workflows() -> None:
    out = run_example("workflows.py", {})
    assert out.splitlines() == [
        "6 words in 3 pages",
        "3 words, the longest 'three'",
        "step 3 (fetch) failed: no page at https://example.com/x",
    ]


def test_producer() -> None:
    out = run_example("producer.py", {})
    assert out.strip() == "dispatched 100 tasks; 100 in the stream"


@pytest.mark.parametrize("tier", ["memory", "redis"])
def test_elector(tier: str, redis_server: RedisServer) -> None:
    env = {"REDIS_URL": redis_server.url} if tier == "redis" else {}
    out = run_example("elector.py", env).splitlines()
    assert [line.split(" (fence ")[1][0] for line in out[:3]] == ["1", "2", "3"]
    assert [line.split("run #")[1].split(";")[0] for line in out[:3]] == ["1", "2", "3"]
    assert out[3] == "every candidate led once, one at a time"


def test_web_producer() -> None:
    out = run_example("web_producer.py", {}, "--self-test").splitlines()
    assert out[0].startswith("listening on http://127.0.0.1:")
    assert out[1].startswith('HTTP/1.1 202 Accepted {"task_id": "')
    assert out[2] == "queued: 1"


@pytest.mark.parametrize("tier", ["memory", "redis"])
def test_scheduled(tier: str, redis_server: RedisServer) -> None:
    env = {"REDIS_URL": redis_server.url} if tier == "redis" else {}
    out = run_example("scheduled.py", env).splitlines()
    assert out == [
        "cancelled: True",
        "reminder: stretch",
        "reminder: drink water",
        "cron fired 2 ticks, each once: True",
    ]


def test_worker_example_loads() -> None:
    from trunner.serve import load_settings  # noqa: PLC0415

    settings = load_settings("examples.worker:settings")
    assert settings.tasks.names == {"resize", "rebuild_feed"}
    assert settings.config is not None
    assert settings.config.consumer_group == "thumbnails"


def readme_blocks(language: str) -> list[str]:
    text = (REPO / "README.md").read_text()
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def start(args: list[str], cwd: Path, url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO), "REDIS_URL": url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def stopped_by_sigterm(process: subprocess.Popen[str]) -> int:
    process.send_signal(signal.SIGTERM)
    return await trio.to_thread.run_sync(lambda: process.wait(timeout=30))


@pytest.mark.deadline(60)
async def test_the_readme_runs_and_drains_on_sigterm(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """The README's snippets, as written: a tasks module, ``trunner worker`` and
    ``trunner dispatch`` on it, and the library form; SIGTERM drains both."""
    url = redis_server.url.rsplit("/", 1)[0] + "/12"  # the README's group is 'emails'
    module, program = readme_blocks("python")[:2]
    commands = readme_blocks("sh")[0].splitlines()
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "tasks.py").write_text(module)
    (tmp_path / "main.py").write_text(program.replace("redis://localhost:6379/0", url))
    worker_args, dispatch_args = (
        shlex.split(line.replace("redis://localhost:6379/0", url)) for line in commands[:2]
    )
    assert worker_args[:2] == ["trunner", "worker"]
    raw = redis.Redis.from_url(url)
    raw.flushdb()

    async def acknowledged(count: int) -> bool:
        groups = (
            raw.xinfo_groups("trunner:{emails}:stream")
            if raw.exists("trunner:{emails}:stream")
            else []
        )
        return bool(groups) and groups[0]["entries-read"] == count and groups[0]["pending"] == 0

    worker = start(["-m", *worker_args], tmp_path, url)
    try:
        assert worker.stdout is not None
        ready = await trio.to_thread.run_sync(worker.stdout.readline)
        assert json.loads(ready) == {"ready": True}
        done = await trio.to_thread.run_sync(
            lambda: run_python("-m", *dispatch_args, cwd=tmp_path, env={"REDIS_URL": url})
        )
        assert done.returncode == 0, done.stderr
        await redis_state(lambda: acknowledged(1))
        assert await stopped_by_sigterm(worker) == 0
    finally:
        worker.kill()
        worker.communicate()
    library = start(["main.py"], tmp_path, url)
    try:
        await redis_state(lambda: acknowledged(2))
        assert await stopped_by_sigterm(library) == 0
    finally:
        library.kill()
        library.communicate()
        raw.flushdb()
        raw.close()


@pytest.mark.parametrize("tier", ["memory", "redis"])
def test_results(tier: str, redis_server: RedisServer) -> None:
    env = {"REDIS_URL": redis_server.url} if tier == "redis" else {}
    out = run_example("results.py", env).splitlines()
    assert out[:2] == [
        "resized: cat.png.thumb.png (128 px)",
        "charge failed: ValueError: card declined for 42",
    ]
    assert out[2].startswith("transcode: running, ")
    assert out[2].endswith("%")
    assert out[3:] == [
        "cancel: cancelling",
        "transcode: cancelled",
        "stale resize: expired, never ran",
    ]


@pytest.mark.parametrize("tier", ["memory", "redis"])
def test_middleware_logging(tier: str, redis_server: RedisServer) -> None:
    env = {"REDIS_URL": redis_server.url} if tier == "redis" else {}
    lines = [json.loads(line) for line in run_example("middleware_logging.py", env).splitlines()]
    assert [line["message"] for line in lines] == [
        "charging 1250 cents",
        "attempt failed",
        "charging 1250 cents",
        "attempt succeeded",
        "runner stopped",
    ]
    first, _, second, _, last = lines
    assert (first["task"], first["attempt"], first["tenant"]) == ("charge", 1, "acme")
    assert (second["attempt"], second["tenant"]) == (2, "acme")
    assert first["task_id"] == second["task_id"]
    assert first["message_id"] != second["message_id"]
    assert "task" not in last, "outside of a task, no attempt's fields"


@pytest.mark.parametrize("tier", ["memory", "redis"])
def test_middleware_sentry(tier: str, redis_server: RedisServer) -> None:
    """Sentry gets a transport that keeps the events: nothing is sent anywhere."""
    if os.environ.get("CI") != "true":
        pytest.importorskip("sentry_sdk", reason="pip install 'trunner[sentry]'")
    env = {"REDIS_URL": redis_server.url} if tier == "redis" else {}
    assert run_example("middleware_sentry.py", env).splitlines() == [
        "captured ValueError: dog.txt is not an image "
        "(task corrupt, attempt 1, group images, headers {})",
        "captured OSError: cat.png: storage not reachable "
        "(task resize, attempt 1, group images, headers {'tenant': 'acme'})",
    ]
