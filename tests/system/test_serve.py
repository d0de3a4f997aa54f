"""Serving (trunner/_worker/serve.py) through ``trunner worker``: the settings it loads, health
checks and metrics over HTTP, and the process's signals (drain, then stop at once)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request

import pytest
import trio

import trunner
from trunner._wire.keys import RELEASED_CONSUMER
from trunner.cli import main
from trunner.keys import Keys

from ..conftest import REPO, raw_client, redis_state, run_python
from ..support.servers import RedisServer


class WorkerProcess:
    """``trunner worker`` in a subprocess; reads its ready line (the HTTP ports)."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "trunner", "worker", *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.ports: dict[str, int] = {}

    async def ready(self) -> None:
        assert self.process.stdout is not None
        line = await trio.to_thread.run_sync(self.process.stdout.readline)
        data = json.loads(line)
        assert data.pop("ready") is True
        self.ports = data

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    async def wait(self) -> int:
        return await trio.to_thread.run_sync(lambda: self.process.wait(timeout=30))

    def stderr(self) -> str:
        assert self.process.stderr is not None
        return self.process.stderr.read()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.mark.deadline(60)
async def test_worker_serves_health_and_metrics_and_drains_on_sigterm(
    redis_server: RedisServer, group: str
) -> None:
    worker = WorkerProcess(
        "examples.worker:settings", "--redis", redis_server.url, "--group", group,
        "--workers", "4", "--health-port", "0", "--metrics-port", "0",
    )  # fmt: skip
    try:
        await worker.ready()
        health, metrics = worker.ports["health"], worker.ports["metrics"]
        assert await trio.to_thread.run_sync(http_get, health, "/healthz") == (200, "ok\n")
        assert await trio.to_thread.run_sync(http_get, health, "/readyz") == (200, "ready\n")
        assert (await trio.to_thread.run_sync(http_get, health, "/nope"))[0] == 404
        done = run_python(
            "-m", "trunner", "dispatch", group, "resize", '{"image": "a.png"}',
            "--redis", redis_server.url,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        async with trunner.open_client(redis_server.url, group) as client:

            async def processed() -> bool:
                _, text = await trio.to_thread.run_sync(http_get, metrics, "/metrics")
                line = f'trunner_tasks_processed_total{{group="{group}",task="resize"}} 1.0'
                return line in text

            await redis_state(processed, poll=0.1)
            status, text = await trio.to_thread.run_sync(http_get, metrics, "/metrics")
            assert status == 200
            assert f'trunner_capacity{{group="{group}"}} 4.0' in text
            assert f'trunner_leader{{group="{group}"}} 1.0' in text
            assert "trunner_task_duration_seconds_bucket" in text
            # A slow task is running when SIGTERM comes: it finishes, then the worker exits 0.
            await client.dispatch("resize", {"image": "slow.png", "seconds": 1.0})

            async def running() -> bool:
                return await client.admin.pending_count() == 1

            await redis_state(running)
            worker.signal(signal.SIGTERM)
            assert await worker.wait() == 0
            assert await client.admin.pending_count() == 0, "drained: acknowledged"
            assert await client.admin.queue_length() == 0
        log = worker.stderr()
        assert "SIGTERM: stopping gracefully" in log
        assert "resized slow.png (attempt 1)" in log
    finally:
        worker.close()


@pytest.mark.deadline(60)
async def test_a_second_signal_stops_at_once_and_releases(
    redis_server: RedisServer, group: str, keys: Keys
) -> None:
    worker = WorkerProcess(
        "examples.worker:settings", "--redis", redis_server.url, "--group", group,
        "--log-format", "json",
    )  # fmt: skip
    try:
        await worker.ready()
        async with trunner.open_client(redis_server.url, group) as client:
            await client.dispatch("resize", {"image": "huge.png", "seconds": 60})

            async def running() -> bool:
                return await client.admin.pending_count() == 1

            await redis_state(running)
            worker.signal(signal.SIGINT)
            await trio.sleep(0.3)
            worker.signal(signal.SIGINT)
            assert await worker.wait() == 1
        raw = raw_client(redis_server.url)
        (pending,) = raw.xpending_range(keys.stream, group, "-", "+", 10)
        assert pending["consumer"].decode() == RELEASED_CONSUMER, "released, not acknowledged"
        raw.close()
        lines = [json.loads(line) for line in worker.stderr().splitlines() if line.strip()]
        assert any("stopping at once" in line["message"] for line in lines)
        interrupted = [line for line in lines if "interrupted by shutdown" in line["message"]]
        assert interrupted[0]["task"] == "resize"
        assert interrupted[0]["attempt"] == 1
    finally:
        worker.close()


@pytest.mark.deadline(60)
async def test_two_signals_that_come_together_are_two(
    redis_server: RedisServer, group: str, keys: Keys
) -> None:
    """SIGTERM and SIGINT at once (as the supervisor of ``--processes`` passes on a second
    signal right after the first): the second stops the worker at once, though the runner
    had not yet begun stopping when the worker saw it (it used to drain for 20 s)."""
    worker = WorkerProcess(
        "examples.worker:settings", "--redis", redis_server.url, "--group", group
    )
    try:
        await worker.ready()
        async with trunner.open_client(redis_server.url, group) as client:
            await client.dispatch("resize", {"image": "huge.png", "seconds": 60})

            async def running() -> bool:
                return await client.admin.pending_count() == 1

            await redis_state(running)
            worker.signal(signal.SIGTERM)
            worker.signal(signal.SIGINT)
            assert await worker.wait() == 1
        raw = raw_client(redis_server.url)
        (pending,) = raw.xpending_range(keys.stream, group, "-", "+", 10)
        assert pending["consumer"].decode() == RELEASED_CONSUMER, "released, not acknowledged"
        raw.close()
    finally:
        worker.close()


def test_worker_settings_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    cases = {
        "examples.worker": "expected module:attribute",
        "examples.worker:nope": "has no attribute 'nope'",
        "examples.worker:log": "must be a WorkerSettings, a TaskRegistry",
        "no_such_module_xyz:settings": "No module named 'no_such_module_xyz'",
        "examples.worker:tasks": "no RunnerConfig in the settings: pass --group",
    }
    for target, message in cases.items():
        assert main(["worker", target, "--redis", "memory://x"]) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("trunner worker: "), err
        assert message in err
        assert "\n" not in err
