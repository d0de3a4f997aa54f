"""Real ``redis-server`` processes the suite starts itself, on free loopback ports."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import redis

REDIS_SERVER = shutil.which("redis-server")


def require_redis_server() -> str:
    """The redis-server binary; skip the test without one (fail it when ``CI=true``)."""
    if REDIS_SERVER is None:
        message = "redis-server is not installed: real-Redis tests cannot run"
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(message + " (CI=true makes this an error)")
        pytest.skip(message)
    return REDIS_SERVER


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def stop_process(process: subprocess.Popen[Any]) -> None:
    """Terminate a process this suite started; kill it if it does not exit in 10 s."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def free_port(cluster: bool = False) -> int:
    """A free loopback port; ``cluster``: one whose cluster bus port (+10000) is free too."""
    if cluster:
        for _ in range(1000):
            port = random.randint(20000, 55000)
            if _bindable(port) and _bindable(port + 10000):
                return port
        raise RuntimeError("no free port pair for a cluster node")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        bound: int = sock.getsockname()[1]
        return bound


def _ping(port: int, tls: dict[str, str] | None = None) -> bool:
    if tls is not None:
        try:
            with redis.Redis(port=port, ssl=True, socket_timeout=0.5, **tls) as client:  # type: ignore[arg-type]
                return bool(client.ping())
        except (redis.RedisError, OSError):
            return False
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One redis-server on 127.0.0.1; can be stopped and started again on the same port."""

    def __init__(self, *extra_args: str, port: int | None = None) -> None:
        self.binary = require_redis_server()
        self.port = port or free_port()
        self.extra_args = list(extra_args)
        self.dir = Path(tempfile.mkdtemp(prefix="trunner-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0, tls: dict[str, str] | None = None) -> None:
        assert self.process is None, "already running"
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.dir),
            "--logfile", str(self.dir / "redis.log"),
            *self.extra_args,
        ]  # fmt: skip
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while not _ping(self.port, tls):
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode() if self.process.stderr else ""
                logfile = self.dir / "redis.log"
                log = logfile.read_text() if logfile.exists() else ""
                self.process = None
                raise RuntimeError(f"redis-server exited at start: {err}\n{log}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server on port {self.port} did not answer")
            time.sleep(0.02)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        stop_process(process)
        if process.stderr:
            process.stderr.close()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
