"""``run_in="process"`` tasks run in worker processes (trunner/_executors/processes.py).

Crosses _action.py (a process task must be importable by module path), the process
executor and its child side (payload and result as JSON, the message current in the
process, no runner there), the runner's lifecycle (the worker context opened and closed),
and the outcome scripts: a timeout or a cancel kills the process and records one outcome;
a process that dies is a failed attempt, retried, and the worker serves on.
"""

from __future__ import annotations

import functools
import os
import signal
from typing import Any

import pytest
import trio

import trunner
from trunner import Task, TaskState, prometheus
from trunner._executors.processes import ProcessExecutor

from ..conftest import config, open_checked_runner, parts
from . import _process_tasks as work

pytestmark = pytest.mark.deadline(60)  # worker processes start with spawn: slow when busy


def _registry(*tasks: Task) -> trunner.TaskRegistry:
    registry = trunner.TaskRegistry()
    for task in tasks:
        registry.register(task)
    return registry


def _gone(pid: int) -> bool:
    """Whether process ``pid`` no longer exists (killed and reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def _first_failure(runner: trunner.Runner) -> BaseException:
    """The exception of the first failed attempt the runner reported."""
    async for error in runner.errors():
        if isinstance(error, trunner.TaskFailed):
            return error.error
    raise AssertionError("no failed attempt reported")


async def _failures(runner: trunner.Runner, count: int) -> list[BaseException]:
    """The exceptions of the first ``count`` failed attempts the runner reported."""
    found: list[BaseException] = []
    async for error in runner.errors():
        if isinstance(error, trunner.TaskFailed):
            found.append(error.error)
            if len(found) == count:
                return found
    raise AssertionError(f"{len(found)} failed attempts reported, not {count}")


async def _pid_of_spinner(listener: trio.SocketListener) -> int:
    """The pid the spinning task sends once it runs in its worker process."""
    stream = await listener.accept()
    async with stream:
        data = b""
        while chunk := await stream.receive_some():
            data += chunk
    return int(data)


async def test_a_process_task_gets_json_in_and_out_and_its_message(
    memory_url: str, group: str
) -> None:
    tasks = _registry(Task("whoami", work.whoami, run_in="process", keep_result=60))
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        handle = await runner.dispatch("whoami", {"n": 21})
        seen = await handle.result()
    assert isinstance(seen, work.Seen)  # decoded into the declared type
    assert (seen.doubled, seen.task_name, seen.attempt) == (42, "whoami", 1)
    assert seen.pid != os.getpid()
    assert "worker process" in seen.runner_error


@pytest.mark.parametrize("end", ["timeout", "cancel"])
async def test_a_timeout_or_cancel_kills_the_process_and_records_one_outcome(
    url: str, group: str, end: str
) -> None:
    timeout = 1.0 if end == "timeout" else None
    tasks = _registry(Task("spin", work.spin, run_in="process", keep_result=60, timeout=timeout))
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    pids: list[int] = []
    running = trio.Event()

    async def learn_pid() -> None:
        pids.append(await _pid_of_spinner(listeners[0]))
        running.set()

    async with open_checked_runner(url, config(group), tasks) as runner, trio.open_nursery() as n:
        n.start_soon(learn_pid)  # a timeout may pass before the process runs: no pid then
        handle = await runner.dispatch("spin", port)
        if end == "timeout":
            with pytest.raises(trunner.TaskFailed) as info:
                await handle.result()
            assert info.value.error.type_name == "TaskTimeout"  # type: ignore[attr-defined]
            assert (await handle.status()).state is TaskState.FAILED
            assert await runner.admin.dead_letter_count() == 1
        else:
            await running.wait()  # the process runs the body: cancel it then
            await handle.cancel(wait=True)
            with pytest.raises(trunner.TaskCancelled):
                await handle.result()
            assert (await handle.status()).state is TaskState.CANCELLED
        executor = parts(runner).pool.executors["process"]
        assert isinstance(executor, ProcessExecutor)
        assert executor.killed == 1
        assert all(_gone(pid) for pid in pids)  # killed and reaped before the attempt ended
        stats = runner.statistics()
        assert (stats.succeeded, stats.failed + stats.cancelled) == (0, 1)
        assert (stats.processes_killed, stats.processes_died) == (1, 0)
        assert await runner.admin.pending_count() == 0
        n.cancel_scope.cancel()
    await listeners[0].aclose()


@pytest.mark.parametrize("how", ["abort", "exit", "sigkill", "segfault"])
async def test_a_process_that_dies_fails_its_attempt_and_the_worker_serves_on(
    memory_url: str, group: str, how: str
) -> None:
    tasks = _registry(
        Task("crash", work.crash, run_in="process", keep_result=60, max_retry=1, retry_backoff=0)
    )
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        handle = await runner.dispatch("crash", how)
        assert await handle.result() == "served on"  # attempt 2, in a new process
        stats = runner.statistics()
        assert (stats.succeeded, stats.retried) == (1, 1)
        assert (stats.processes_killed, stats.processes_died) == (0, 1)
        text = prometheus.collect(runner).decode()
        assert f'trunner_processes_died{{group="{group}"}} 1.0' in text
        assert f'trunner_processes_killed{{group="{group}"}} 0.0' in text
        died = await _first_failure(runner)
        assert isinstance(died, trunner.errors.WorkerProcessDied)
        expected = {"abort": -6, "exit": 3, "sigkill": -9, "segfault": -11}[how]
        assert died.exitcode == expected
        assert "worker process died" in str(died)


async def test_an_exception_comes_back_as_its_own_class(memory_url: str, group: str) -> None:
    tasks = _registry(
        Task(
            "refuse",
            work.refuse,
            run_in="process",
            keep_result=60,
            max_retry=3,
            give_up_on=(ValueError,),
        )
    )
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        handle = await runner.dispatch("refuse", "no thanks")
        with pytest.raises(trunner.TaskFailed) as info:
            await handle.result()
        assert info.value.error.type_name == "ValueError"  # type: ignore[attr-defined]
        assert runner.statistics().retried == 0  # given up at once: give_up_on matched
        failed = await _first_failure(runner)
        assert isinstance(failed, ValueError)
        assert str(failed) == "no thanks"
        assert isinstance(failed.__cause__, trunner.errors.RemoteFailure)
        assert "refuse" in failed.__cause__.traceback  # the process's traceback


async def test_an_exception_comes_back_with_its_attributes(memory_url: str, group: str) -> None:
    """Rebuilt without its ``__init__`` (whose parameters are not its ``args``), as
    unpickling would: its class, ``args`` and attributes; one with an attribute that has
    no JSON form comes back as the ``RemoteFailure`` that describes it."""
    tasks = _registry(
        Task("over_quota", work.over_quota, run_in="process", keep_result=60, max_retry=0)
    )
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        for kind in ("quota", "coded", "unsendable"):
            with pytest.raises(trunner.TaskFailed):
                await (await runner.dispatch("over_quota", kind)).result()
        failures = await _failures(runner, 3)
    quota, coded, unsendable = failures
    assert isinstance(quota, work.OverQuota)
    assert (quota.account, quota.limit, quota.args) == ("acme", 3, ("acme is over its quota of 3",))
    assert str(quota) == "acme is over its quota of 3"
    assert isinstance(coded, work.Coded)
    assert (coded.code, str(coded)) == (7, "code 7")
    assert isinstance(unsendable, trunner.errors.RemoteFailure)
    assert unsendable.type_name == "Unsendable"
    assert "a socket was open" in str(unsendable)


async def test_a_forked_child_left_running_delays_the_close_boundedly(
    memory_url: str, group: str
) -> None:
    """A child forked by a process task and left running holds the worker process's pipes:
    the runner's close waits the executor's grace for that worker, then goes on."""
    tasks = _registry(Task("fork", work.leave_a_fork, run_in="process", keep_result=60))
    async with open_checked_runner(memory_url, config(group), tasks) as runner:
        grandchild = await (await runner.dispatch("fork", None)).result()
    try:
        assert not _gone(grandchild)  # the runner closed with it still running
    finally:
        os.kill(grandchild, signal.SIGKILL)


def _wrapped(func: Any) -> Any:
    @functools.wraps(func)
    def wrapper(payload: Any) -> Any:
        return func(payload)

    return wrapper


def test_an_action_not_found_by_its_module_path_is_refused_at_start() -> None:
    with pytest.raises(TypeError, match="not the action"):
        ProcessExecutor(1).body(_wrapped(work.refuse), "wrapped")
    ProcessExecutor(1).body(work.refuse, "refuse")  # found: accepted


async def test_an_eager_call_runs_in_a_process() -> None:
    tasks = _registry(Task("whoami", work.whoami, run_in="process", keep_result=60))
    seen = await tasks.call("whoami", {"n": 2})
    assert seen.doubled == 4
    assert seen.pid != os.getpid()
