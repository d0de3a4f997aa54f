"""Task functions for tests/runner/test_processes.py, at the top level of a module of their
own: a worker process imports them by this module path (and imports nothing heavier)."""

from __future__ import annotations

import ctypes
import os
import signal
import socket

import attrs

import trunner


@attrs.frozen
class Job:
    n: int


@attrs.frozen
class Seen:
    pid: int
    doubled: int
    task_name: str
    attempt: int
    runner_error: str


def whoami(job: Job) -> Seen:
    """Where it ran, what it saw of its message, and what current_runner() said there."""
    message = trunner.current_message()
    try:
        trunner.current_runner()
    except trunner.errors.RunnerNotRunning as exc:
        error = str(exc)
    else:
        error = ""
    return Seen(os.getpid(), job.n * 2, message.task_name, message.attempt, error)


def spin(port: int) -> None:
    """Tell the test its pid over a socket, then burn CPU forever (only a kill stops it)."""
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(str(os.getpid()).encode())
    while True:
        pass


def crash(how: str) -> str:
    """Die the way ``how`` says on the first attempt; return on the next."""
    if trunner.current_message().attempt > 1:
        return "served on"
    if how == "abort":
        os.abort()
    elif how == "exit":
        os._exit(3)
    elif how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "segfault":
        ctypes.string_at(0)
    return "not crashed"


def refuse(reason: str) -> None:
    raise ValueError(reason)


class OverQuota(Exception):
    """An exception whose ``__init__`` takes other parameters than its ``args``."""

    def __init__(self, account: str, limit: int) -> None:
        super().__init__(f"{account} is over its quota of {limit}")
        self.account = account
        self.limit = limit


class Coded(Exception):
    """One whose ``__init__`` accepts its ``args`` but would read them wrong."""

    def __init__(self, code: int) -> None:
        super().__init__(f"code {code}")
        self.code = code


class Unsendable(Exception):
    """One with an attribute that has no JSON form."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.handle = object()


def over_quota(kind: str) -> None:
    if kind == "quota":
        raise OverQuota("acme", 3)
    if kind == "coded":
        raise Coded(7)
    raise Unsendable("a socket was open")


def leave_a_fork(_: None) -> int:
    """Fork a child that outlives the task (it holds the worker process's pipes)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked child waits to be killed
        signal.pause()
        os._exit(0)
    return pid
