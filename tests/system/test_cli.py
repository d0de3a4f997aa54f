"""The trunner command (trunner/cli.py): dispatch, inspect, dead-letter.

The worker command, which serves a runner, is tested in test_serve.py."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

import trunner
from trunner.cli import main

from ..conftest import open_checked_runner, raw_client, redis_state, run_python
from ..support.servers import RedisServer


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_python("-m", "trunner", *args)


async def test_dispatch_inspect_and_dead_letters(redis_server: RedisServer, group: str) -> None:
    url = ["--redis", redis_server.url]
    assert cli("dispatch", group, "ghost", '{"a": 1}', *url).returncode == 0
    delayed = cli("dispatch", group, "ghost", "2", "--delay", "60", *url)
    assert delayed.returncode == 0
    tasks = trunner.TaskRegistry()  # 'ghost' is unknown to this runner: dead-lettered
    config = trunner.RunnerConfig(consumer_group=group, block_duration=1.0)
    async with open_checked_runner(redis_server.url, config, tasks) as runner:

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


async def test_quarantine_list_inspect_and_purge(
    redis_server: RedisServer, group: str, keys: trunner.Keys
) -> None:
    url = ["--redis", redis_server.url]
    raw = raw_client(redis_server.url)
    raw.hset(keys.cron, "nightly", "not a tick")  # read as no tick by the leader's cron
    tasks = trunner.TaskRegistry()

    @tasks.cron("0 3 * * *", name="nightly")
    async def nightly(_: Any) -> None: ...

    config = trunner.RunnerConfig(consumer_group=group, block_duration=1.0)
    async with open_checked_runner(redis_server.url, config, tasks) as runner:

        async def set_aside() -> bool:
            return await runner.quarantine_count() == 1

        await redis_state(set_aside)
    [record] = json.loads(cli("quarantine", "list", group, "--json", *url).stdout)
    assert (record["source"], record["item"]) == ("cron", "nightly")
    assert record["value"] == "not a tick"
    text = " ".join(cli("quarantine", "list", group, *url).stdout.split())
    assert "the last tick fired is not a number" in text
    assert "set aside" in cli("inspect", group, *url).stdout
    assert json.loads(cli("inspect", group, "--json", *url).stdout)["quarantined"] == 1
    assert cli("quarantine", "purge", group, "--yes", *url).returncode == 0
    assert "nothing of group" in cli("quarantine", "list", group, *url).stdout
    raw.close()
