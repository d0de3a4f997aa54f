"""``trunner workflow status|steps|cancel|ls`` and the line of ``trunner inspect``, run as
the command is, on a real Redis."""

from __future__ import annotations

import json
import subprocess

import pytest

import trunner
from trunner import chain, chord, step
from trunner import workflows as wf
from trunner.errors import WorkflowFailed

from ..conftest import config, open_checked_runner, run_python
from ..support.servers import RedisServer

tasks = trunner.TaskRegistry()


@tasks.task()
async def double(number: int) -> int:
    return 2 * number


@tasks.task()
async def total(numbers: list[int]) -> int:
    return sum(numbers)


@tasks.task(max_retry=0)
async def broken(_: object) -> int:
    raise ValueError("broken\x1b[31m")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_python("-m", "trunner", *args)


async def test_live_workflows_listed_shown_and_cancelled(
    redis_server: RedisServer, group: str
) -> None:
    url = ["--redis", redis_server.url]
    async with trunner.open_client(redis_server.url, group, tasks=tasks) as client:
        await client.dispatch(chain(step(double, 1), step(double)), workflow_id="a-one")
        fan = chord(wf.group(step(double, n) for n in range(4)), step(total))
        await client.dispatch(fan, workflow_id="b-two", name="fan in")
    listed = json.loads(cli("workflow", "ls", group, "--json", *url).stdout)
    assert [w["id"] for w in listed] == ["a-one", "b-two"]
    assert listed[1]["status"]["name"] == "fan in"
    paged = cli("workflow", "ls", group, "--count", "1", *url).stdout
    assert "a-one" in paged
    assert "b-two" not in paged
    assert "--offset 1" in paged
    assert "2 live" in cli("inspect", group, *url).stdout
    assert json.loads(cli("inspect", group, "--json", *url).stdout)["workflows"] == 2
    shown = cli("workflow", "steps", group, "b-two", *url)
    assert shown.returncode == 0
    assert "0-3" in shown.stdout
    assert "live" in shown.stdout
    assert "waiting" in shown.stdout
    states = json.loads(cli("workflow", "steps", group, "b-two", "--json", *url).stdout)
    beyond = cli("workflow", "steps", group, "b-two", "--start", "9", *url).stdout
    assert "no step from 9 on (it has 5)" in beyond
    assert states["states"] == ["live"] * 4 + ["waiting"]
    cancelled = cli("workflow", "cancel", group, "b-two", *url)  # no runner holds a step:
    assert cancelled.returncode == 0  # it settles within the call, and says so
    assert "b-two: cancelled: none of its steps was running" in cancelled.stdout
    again = cli("workflow", "cancel", group, "b-two", *url)
    assert "it had settled already (cancelled): nothing to cancel" in again.stdout
    status = json.loads(cli("workflow", "status", group, "b-two", "--json", *url).stdout)
    assert (status["state"], status["steps"], status["live"]) == ("cancelled", 5, 0)
    told = cli("status", group, "a-one", *url)
    assert told.returncode == 1
    assert f"a-one is a workflow: trunner workflow status {group} a-one" in told.stdout
    unknown = cli("workflow", "status", group, "no-such", *url)
    assert unknown.returncode == 1
    assert "nothing is known" in unknown.stdout
    assert cli("workflow", "cancel", group, "no-such", *url).returncode == 1


async def test_the_failures_of_a_workflow_are_shown_escaped(
    redis_server: RedisServer, group: str
) -> None:
    async with open_checked_runner(redis_server.url, config(group), tasks) as runner:
        handle = await runner.dispatch(
            chain(wf.group([step(double, 1), step(broken, 2)]), step(total)), fail_fast=False
        )
        with pytest.raises(WorkflowFailed):
            await handle.result()
    url = ["--redis", redis_server.url]
    shown = cli("workflow", "status", group, handle.id, *url)
    assert shown.returncode == 0
    assert "failed" in shown.stdout
    assert "step 1 (broken, attempt 1): ValueError: broken\\x1b[31m" in shown.stdout
    assert "\x1b" not in shown.stdout, "no terminal escape from a task's error"
    steps = json.loads(cli("workflow", "steps", group, handle.id, "--json", *url).stdout)
    assert steps["states"] == ["succeeded", "failed", "never"]
    assert steps["failures"][0]["type"] == "ValueError"
    failed = cli("workflow", "steps", group, handle.id, "--failed", *url).stdout
    assert "step 1 (broken" in failed
    assert cli("workflow", "ls", group, *url).stdout.startswith("no live workflow")
