"""Every example runs, so the examples cannot rot."""

from __future__ import annotations

import pytest

from ..conftest import REPO, run_python
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
