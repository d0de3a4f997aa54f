"""The trunner command: worker, dispatch, inspect, dead-letter; health and metrics."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request

import pytest
import trio

import trunner
from trunner.cli import main
from trunner.keys import RELEASED_CONSUMER

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


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_python("-m", "trunner", *args)


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
        done = cli("dispatch", group, "resize", '{"image": "a.png"}', "--redis", redis_server.url)
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
                return await client.pending_count() == 1

            await redis_state(running)
            worker.signal(signal.SIGTERM)
            assert await worker.wait() == 0
            assert await client.pending_count() == 0, "drained: acknowledged"
            assert await client.queue_length() == 0
        log = worker.stderr()
        assert "SIGTERM: stopping gracefully" in log
        assert "resized slow.png (attempt 1)" in log
    finally:
        worker.close()


@pytest.mark.deadline(60)
async def test_a_second_signal_stops_at_once_and_releases(
    redis_server: RedisServer, group: str
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
                return await client.pending_count() == 1

            await redis_state(running)
            worker.signal(signal.SIGINT)
            await trio.sleep(0.3)
            worker.signal(signal.SIGINT)
            assert await worker.wait() == 1
        raw = raw_client(redis_server.url)
        (pending,) = raw.xpending_range(f"trunner:{{{group}}}:stream", group, "-", "+", 10)
        assert pending["consumer"].decode() == RELEASED_CONSUMER, "released, not acknowledged"
        raw.close()
        lines = [json.loads(line) for line in worker.stderr().splitlines() if line.strip()]
        assert any("stopping at once" in line["message"] for line in lines)
        interrupted = [line for line in lines if "interrupted by shutdown" in line["message"]]
        assert interrupted[0]["task"] == "resize"
        assert interrupted[0]["attempt"] == 1
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


async def test_dispatch_inspect_and_dead_letters(redis_server: RedisServer, group: str) -> None:
    url = ["--redis", redis_server.url]
    assert cli("dispatch", group, "ghost", '{"a": 1}', *url).returncode == 0
    delayed = cli("dispatch", group, "ghost", "2", "--delay", "60", *url)
    assert delayed.returncode == 0
    tasks = trunner.TaskRegistry()  # 'ghost' is unknown to this runner: dead-lettered
    config = trunner.RunnerConfig(consumer_group=group, block_duration=1.0)
    async with trunner.open_runner(redis_server.url, config, tasks) as runner:

        async def dead() -> bool:
            return await runner.dead_letter_count() == 1

        await redis_state(dead)
        shown = cli("inspect", group, "--json", *url)
        info = json.loads(shown.stdout)
        assert info["group"] == group
        assert (info["queue_length"], info["delayed"], info["dead_letters"]) == (0, 1, 1)
        assert info["leader"] == runner.consumer_name
        assert [i["id"] for i in info["instances"]] == [runner.consumer_name]
        text = cli("inspect", group, *url).stdout
        assert "dead letters" in text
        assert runner.consumer_name in text
    listed = json.loads(cli("dead-letter", "list", group, "--json", *url).stdout)
    assert [(d["task"], d["reason"]) for d in listed] == [("ghost", "unknown task")]
    assert "unknown task" in cli("dead-letter", "list", group, *url).stdout
    narrow = run_python("-m", "trunner", "dead-letter", "list", group, *url, env={"COLUMNS": "50"})
    assert listed[0]["id"] in narrow.stdout, "ids are never cut: they are copied into replay"
    replayed = cli("dead-letter", "replay", group, listed[0]["id"], *url)
    assert "replayed 1 dead letters" in replayed.stdout
    async with trunner.open_client(redis_server.url, group) as client:
        assert await client.dead_letter_count() == 0
        assert await client.queue_length() == 1, "back in the stream"
    refused = run_python(
        "-m", "trunner", "dead-letter", "purge", group, *url, stdin=subprocess.DEVNULL
    )
    assert refused.returncode == 1, "purge asks first; no answer: nothing deleted"
    assert "pass --yes in scripts" in refused.stdout
    assert "Traceback" not in refused.stderr
    assert cli("dead-letter", "purge", group, "--yes", *url).returncode == 0


def test_inspecting_an_unknown_group_says_so(redis_server: RedisServer, group: str) -> None:
    shown = cli("inspect", f"{group}-typo", "--redis", redis_server.url)
    assert shown.returncode == 0
    assert f"nothing is known of group '{group}-typo'" in " ".join(shown.stdout.split())


def test_bad_payload_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dispatch", "g", "t", "{not json", "--redis", "memory://cli"]) == 1
    assert "the payload is not valid JSON" in capsys.readouterr().err
