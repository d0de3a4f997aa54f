"""The README's first command: ``trunner demo``."""

from __future__ import annotations

import pytest
import redis

from trunner.cli import main
from trunner.cli._demo import run_demo

from ..conftest import run_python
from ..support.servers import RedisServer


async def test_demo_shares_the_work_and_finishes_clean(url: str) -> None:
    lines: list[str] = []
    summary = await run_demo(url, instances=3, images=15, out=lines.append, seed=1)
    assert summary["tasks"] == 19
    # 15 images once; emails fail 0, 1 and 2 times; the card fails on both of its attempts.
    assert summary["runs"] == 15 + (1 + 2 + 3) + 2
    assert (summary["succeeded"], summary["retried"], summary["dead_lettered"]) == (18, 4, 1)
    assert (summary["queued"], summary["pending"], summary["dead_letter_stream"]) == (0, 0, 1)
    assert sum(summary["per_instance"].values()) == summary["runs"]
    assert sum(1 for n in summary["per_instance"].values() if n) >= 2
    text = "\n".join(lines)
    assert "who ran what:" in text
    assert "Each task ended once: 18 succeeded + 1 dead-lettered = 19 of 19 tasks;" in text
    assert "[dead-letter] charge_card given up after 2 attempts: ValueError: card declined" in text
    assert text.endswith("all instances stopped: STOPPED, STOPPED, STOPPED")


@pytest.mark.deadline(60)
def test_the_demo_command(redis_server: RedisServer) -> None:
    for env in ({}, {"REDIS_URL": redis_server.url}):
        result = run_python("-m", "trunner", "demo", env=env)
        assert result.returncode == 0, result.stderr
        assert "all instances stopped" in result.stdout
        assert result.stderr == ""
        expected = redis_server.url if env else "memory://demo"
        assert f"Redis: {expected}" in result.stdout


def test_demo_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--instances", "0"]) == 2
    assert "--instances must be >= 1" in capsys.readouterr().err


def test_the_command_reports_a_bad_redis_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--redis", "redis://127.0.0.1:1/0"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0]]
    assert err[0].startswith("trunner demo: RedisUnavailable: cannot reach Redis at")
    with pytest.raises(SystemExit):
        main(["demo", "--log-level", "loud"])


async def test_the_demo_leaves_no_key_on_a_real_redis(redis_server: RedisServer) -> None:
    await run_demo(redis_server.url, instances=2, images=2, out=lambda _: None)
    with redis.Redis.from_url(redis_server.url) as client:
        assert [k for k in client.keys("trunner:{demo-*") if b"demo-" in k] == []
