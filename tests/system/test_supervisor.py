"""``trunner worker --processes N`` on real Redis: a supervisor and its worker processes
(tests/processes/supervised_app.py), from the outside: every process consumes, a killed one
is started again, a signal drains them all (also a terminal's Ctrl-C, sent to the whole
process group), a second stops them at once and a third kills them, a worker that cannot
start makes the supervisor give up, and a killed supervisor leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest
import trio

import trunner
from trunner._wire.keys import RELEASED_CONSUMER
from trunner.client import Client

from ..conftest import REPO, raw_client, redis_state
from ..support.servers import RedisServer

pytestmark = pytest.mark.redis

APP = "tests.processes.supervised_app:settings"


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, exited and not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


async def gone(pid: int) -> None:
    """Wait until process ``pid`` no longer runs (the test's deadline bounds the wait)."""
    while alive(pid):  # noqa: ASYNC110 - another process's state: nothing to await
        await trio.sleep(0.02)


class Supervised:
    """``trunner worker APP --processes N`` in a session of its own (so that a signal to
    its process group plays a terminal's Ctrl-C); its stderr goes to a file."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.log = tmp_path / f"supervisor-{uuid.uuid4().hex[:6]}.log"
        with self.log.open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "trunner", "worker", *args],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                start_new_session=True,
            )
        self.info: dict[str, object] = {}
        self.pids: list[int] = []

    async def ready(self) -> list[int]:
        """Wait for its ready line; the pids of its worker processes."""
        assert self.process.stdout is not None
        line = await trio.to_thread.run_sync(self.process.stdout.readline)
        assert line, f"exited before it was ready: {self.stderr()}"
        self.info = json.loads(line)
        assert self.info.pop("ready") is True
        pids = self.info["pids"]
        assert isinstance(pids, list)
        self.pids = [int(pid) for pid in pids]
        return self.pids

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    async def wait(self) -> int:
        return await trio.to_thread.run_sync(lambda: self.process.wait(timeout=60))

    def stderr(self) -> str:
        return self.log.read_text()

    def close(self) -> None:
        """Kill what is left, after a failure: the supervisor, and its worker processes (in
        process groups of their own) that it started first."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        for pid in self.pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if self.process.stdout is not None:
            self.process.stdout.close()


def options(redis_server: RedisServer, group: str, *more: str) -> list[str]:
    return [APP, "--redis", redis_server.url, "--group", group, "--workers", "1", *more]


def http_get(port: object, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


async def meet(client: Client, count: int) -> set[int]:
    """Run ``count`` tasks that each wait until all of them run: with ``--workers 1``,
    each in a different process. Their pids."""
    key = f"meet-{uuid.uuid4().hex}"
    handles = [await client.dispatch("meet", {"key": key, "count": count}) for _ in range(count)]
    return {int(await handle.result()) for handle in handles}


@pytest.mark.deadline(90)
async def test_every_worker_process_consumes_and_a_killed_one_is_started_again(
    redis_server: RedisServer, group: str, tmp_path: Path
) -> None:
    ports = ("--health-port", "0", "--metrics-port", "0")
    supervisor = Supervised(tmp_path, *options(redis_server, group, "--processes", "2", *ports))
    try:
        first, second = await supervisor.ready()
        health, metrics = supervisor.info["health"], supervisor.info["metrics"]
        assert await trio.to_thread.run_sync(http_get, health, "/healthz") == (200, "ok\n")
        ready = await trio.to_thread.run_sync(http_get, health, "/readyz")
        assert ready == (200, "ready (2 of 2 worker processes ready)\n")
        assert isinstance(metrics, list)
        assert len(set(metrics)) == 2, "each worker process serves its own /metrics"
        for port in metrics:
            status, text = await trio.to_thread.run_sync(http_get, port, "/metrics")
            assert status == 200
            assert f'trunner_capacity{{group="{group}"}} 1.0' in text
        async with trunner.open_client(redis_server.url, group) as client:
            assert await meet(client, 2) == {first, second}
            os.kill(first, signal.SIGKILL)

            async def disconnected() -> bool:
                # Until Redis saw its connections close, its blocked read could still take
                # the next message (which would wait for reclaim_delay).
                clients = await client.redis.execute("CLIENT", "LIST")
                text = clients.decode() if isinstance(clients, bytes) else str(clients)
                return f"@{first}." not in text

            await redis_state(disconnected)
            survivor, restarted = sorted(await meet(client, 2), key=lambda pid: pid != second)
            assert survivor == second
            assert restarted not in (first, second), "a new process took the killed one's place"
        supervisor.signal(signal.SIGTERM)
        assert await supervisor.wait() == 0
        assert not alive(second)
        assert not alive(restarted)
    finally:
        supervisor.close()


@pytest.mark.deadline(90)
async def test_a_worker_process_killed_under_its_task_loses_nothing(
    redis_server: RedisServer, group: str, tmp_path: Path
) -> None:
    """SIGKILL of one of three worker processes while it runs a task, with 30 more tasks
    queued: the task is taken over by another process after ``reclaim_delay`` and
    succeeds, every other task succeeds once, and the killed process's place is filled."""
    args = options(redis_server, group, "--processes", "3")
    args[0] = APP.replace(":settings", ":quick")
    supervisor = Supervised(tmp_path, *args)
    try:
        pids = await supervisor.ready()
        key = f"held-{uuid.uuid4().hex}"
        async with trunner.open_client(redis_server.url, group) as client:
            held = await client.dispatch("hold", key)

            async def holding() -> bool:
                return await client.redis.get(key) is not None

            await redis_state(holding)
            victim = int(await client.redis.get(key) or 0)
            assert victim in pids
            naps = [await client.dispatch("nap", 0.05) for _ in range(30)]
            os.kill(victim, signal.SIGKILL)
            taken_over_by = await held.result(timeout=60)
            assert taken_over_by != victim
            ran = [await nap.result(timeout=60) for nap in naps]
            assert victim not in ran
            assert len(ran) == 30
            stats = await client.admin.pending_count()
            assert stats == 0

            async def replaced() -> bool:
                ready = await trio.to_thread.run_sync(supervisor.stderr)
                return f"(pid {victim})" in ready and ready.count(" ready\n") >= 4

            await redis_state(replaced)
        supervisor.signal(signal.SIGTERM)
        assert await supervisor.wait() == 0, supervisor.stderr()
    finally:
        supervisor.close()


@pytest.mark.parametrize("how", ["sigterm", "ctrl-c-to-the-group", "sigterm-to-every-process"])
@pytest.mark.deadline(60)
async def test_a_signal_drains_every_worker_process_then_the_supervisor_exits_0(
    redis_server: RedisServer, group: str, tmp_path: Path, how: str
) -> None:
    """SIGTERM to the supervisor, SIGINT to its whole process group as a terminal's Ctrl-C
    does, or SIGTERM to every process at once as systemd's default ``KillMode`` does: each
    worker process drains (a second stop signal would stop it at once, cancelling the
    naps); the supervisor exits 0 once every one has exited."""
    supervisor = Supervised(tmp_path, *options(redis_server, group, "--processes", "2"))
    try:
        pids = await supervisor.ready()
        async with trunner.open_client(redis_server.url, group) as client:
            naps = [await client.dispatch("nap", 1.5) for _ in range(2)]

            async def both_running() -> bool:
                return await client.admin.pending_count() == 2

            await redis_state(both_running)
            if how == "ctrl-c-to-the-group":
                os.killpg(supervisor.process.pid, signal.SIGINT)
            elif how == "sigterm-to-every-process":
                for pid in pids:
                    os.kill(pid, signal.SIGTERM)
                supervisor.signal(signal.SIGTERM)  # which passes it on: a second SIGTERM
            else:
                supervisor.signal(signal.SIGTERM)
            assert await supervisor.wait() == 0, supervisor.stderr()
            assert {await nap.result() for nap in naps} == set(pids), "both finished"
            assert await client.admin.pending_count() == 0
        assert [pid for pid in pids if alive(pid)] == []
    finally:
        supervisor.close()


@pytest.mark.deadline(60)
async def test_a_second_signal_stops_the_worker_processes_at_once(
    redis_server: RedisServer, group: str, tmp_path: Path
) -> None:
    supervisor = Supervised(tmp_path, *options(redis_server, group, "--processes", "2"))
    try:
        pids = await supervisor.ready()
        async with trunner.open_client(redis_server.url, group) as client:
            await client.dispatch("nap", 600)

            async def running() -> bool:
                return await client.admin.pending_count() == 1

            await redis_state(running)
            supervisor.signal(signal.SIGTERM)
            supervisor.signal(signal.SIGINT)  # another number: the two never merge
            assert await supervisor.wait() == 1
        raw = raw_client(redis_server.url)
        (pending,) = raw.xpending_range(f"trunner:{{{group}}}:stream", group, "-", "+", 10)
        raw.close()
        assert pending["consumer"].decode() == RELEASED_CONSUMER, "released, not acknowledged"
        assert [pid for pid in pids if alive(pid)] == []
    finally:
        supervisor.close()


@pytest.mark.deadline(60)
async def test_a_third_signal_kills_a_worker_process_that_blocks(
    redis_server: RedisServer, group: str, tmp_path: Path
) -> None:
    """A task that blocks its event loop keeps its process from handling any signal: the
    third signal to the supervisor kills it (SIGKILL)."""
    supervisor = Supervised(tmp_path, *options(redis_server, group, "--processes", "2"))
    try:
        pids = await supervisor.ready()
        key = f"hog-{uuid.uuid4().hex}"
        async with trunner.open_client(redis_server.url, group) as client:
            await client.dispatch("hog", {"key": key, "seconds": 600})

            async def hogging() -> bool:
                return await client.redis.get(key) is not None

            await redis_state(hogging)
            hog_pid = await client.redis.get(key)
            assert hog_pid is not None
            hog = int(hog_pid)
        (idle,) = (pid for pid in pids if pid != hog)
        supervisor.signal(signal.SIGTERM)
        await gone(idle)  # the first signal was handled: the idle process drained
        assert alive(hog)
        supervisor.signal(signal.SIGINT)
        supervisor.signal(signal.SIGTERM)
        assert await supervisor.wait() == 1
        assert not alive(hog)
    finally:
        supervisor.close()


@pytest.mark.deadline(60)
async def test_worker_processes_that_cannot_start_make_the_supervisor_give_up(
    redis_server: RedisServer, group: str, tmp_path: Path
) -> None:
    app = "tests.processes.no_such_app:settings"
    supervisor = Supervised(
        tmp_path, app, "--redis", redis_server.url, "--group", group, "--processes", "2"
    )
    try:
        assert await supervisor.wait() == 1
        assert supervisor.process.stdout is not None
        assert supervisor.process.stdout.read() == "", "never ready"
        last = supervisor.stderr().strip().splitlines()[-1]
        assert last.startswith("trunner worker: worker "), last
        assert "failed to start 3 times in a row" in last
        assert "No module named 'tests.processes.no_such_app'" in last
    finally:
        supervisor.close()


@pytest.mark.deadline(60)
async def test_a_killed_supervisor_leaves_no_worker_process_behind(
    redis_server: RedisServer, group: str, tmp_path: Path
) -> None:
    """SIGKILL gives the supervisor no chance to pass anything on: each worker process
    sees it gone (end of file on its stdin) and drains by itself."""
    supervisor = Supervised(tmp_path, *options(redis_server, group, "--processes", "2"))
    try:
        pids = await supervisor.ready()
        async with trunner.open_client(redis_server.url, group) as client:
            nap = await client.dispatch("nap", 0.5)

            async def running() -> bool:
                return await client.admin.pending_count() == 1

            await redis_state(running)
            supervisor.signal(signal.SIGKILL)
            assert await supervisor.wait() == -signal.SIGKILL
            for pid in pids:
                await gone(pid)
            assert await nap.result() in pids, "drained: the running task finished"
    finally:
        supervisor.close()


@pytest.mark.deadline(60)
async def test_processes_1_is_the_single_process_worker(
    redis_server: RedisServer, group: str, tmp_path: Path
) -> None:
    supervisor = Supervised(tmp_path, *options(redis_server, group, "--processes", "1"))
    try:
        assert supervisor.process.stdout is not None
        line = await trio.to_thread.run_sync(supervisor.process.stdout.readline)
        assert json.loads(line) == {"ready": True}, "no supervisor: the worker's own ready line"
        async with trunner.open_client(redis_server.url, group) as client:
            nap = await client.dispatch("nap", 0)
            assert await nap.result() == supervisor.process.pid
        supervisor.signal(signal.SIGTERM)
        assert await supervisor.wait() == 0
    finally:
        supervisor.close()
