"""The trunner command (trunner/cli.py): dispatch, inspect, dead-letter.

The worker command, which serves a runner, is tested in test_serve.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from typing import Any

import pytest
import trio

import trunner
from trunner.cli import main

from ..conftest import open_checked_runner, raw_client, redis_state, run_python
from ..support.seeding import seed_dead
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
            return await runner.admin.dead_letter_count() == 1

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
    assert replayed.returncode == 0
    assert "replayed 1 of 1 dead letters" in replayed.stdout
    async with trunner.open_client(redis_server.url, group) as client:
        assert await client.admin.dead_letter_count() == 0
        assert await client.admin.queue_length() == 1, "back in the stream"
    refused = run_python(
        "-m", "trunner", "dead-letter", "purge", group, *url, stdin=subprocess.DEVNULL
    )
    assert refused.returncode == 1, "purge asks first; no answer: nothing deleted"
    assert "pass --yes in scripts" in refused.stdout
    assert "Traceback" not in refused.stderr
    assert cli("dead-letter", "purge", group, "--yes", *url).returncode == 0


async def test_pause_and_resume_a_group(redis_server: RedisServer, group: str) -> None:
    url = ["--redis", redis_server.url]
    config = trunner.RunnerConfig(consumer_group=group, block_duration=1.0)
    async with open_checked_runner(redis_server.url, config, trunner.TaskRegistry()) as runner:
        paused = cli("pause", group, *url)
        assert paused.returncode == 0, paused.stderr
        assert f"group {group} paused: its runners stop fetching" in paused.stdout
        assert "nothing is known" not in paused.stdout
        await runner.wait_paused()
        again = cli("pause", group, *url)
        assert again.returncode == 0
        assert f"group {group} was paused already (since " in again.stdout
        assert json.loads(cli("inspect", group, "--json", *url).stdout)["paused_since"] > 0
        assert "paused" in cli("inspect", group, *url).stdout.split()
        resumed = cli("resume", group, *url)
        assert resumed.returncode == 0
        assert f"group {group} resumed: its runners fetch again" in resumed.stdout
        await runner.wait_resumed()
        assert f"group {group} was not paused" in cli("resume", group, *url).stdout
        assert json.loads(cli("inspect", group, "--json", *url).stdout)["paused_since"] is None
        assert "paused" not in cli("inspect", group, *url).stdout.split()


def test_pausing_an_unknown_group_says_so(redis_server: RedisServer, group: str) -> None:
    """A mistyped group name pauses nobody: the command says nothing is known of it."""
    url = ["--redis", redis_server.url]
    paused = cli("pause", f"{group}-typo", *url)
    assert paused.returncode == 0, paused.stderr
    assert f"group {group}-typo paused" in paused.stdout
    assert f"nothing is known of group '{group}-typo' on this Redis" in paused.stdout
    assert cli("resume", f"{group}-typo", *url).returncode == 0


def test_inspecting_an_unknown_group_says_so(redis_server: RedisServer, group: str) -> None:
    shown = cli("inspect", f"{group}-typo", "--redis", redis_server.url)
    assert shown.returncode == 0
    assert f"nothing is known of group '{group}-typo'" in " ".join(shown.stdout.split())


def test_a_pause_mark_out_of_the_calendar_is_shown_not_a_crash(
    redis_server: RedisServer, group: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pause mark of twenty digits, which the runners accept, crashed inspect and pause
    (OSError: Value too large, formatting its time); the dashboard's formatting did not."""
    raw = raw_client(redis_server.url)
    raw.set(trunner.keys.Keys("trunner", group).paused, "99999999999999999999")
    raw.close()
    assert main(["inspect", group, "--redis", redis_server.url]) == 0
    assert "since ? UTC" in capsys.readouterr().out
    assert main(["pause", group, "--redis", redis_server.url]) == 0
    assert f"group {group} was paused already (since ? UTC)" in capsys.readouterr().out


def test_bad_payload_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dispatch", "g", "t", "{not json", "--redis", "memory://cli"]) == 1
    assert "the payload is not valid JSON" in capsys.readouterr().err


async def test_quarantine_list_inspect_and_purge(
    redis_server: RedisServer, group: str, keys: trunner.keys.Keys
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
            return await runner.admin.quarantine_count() == 1

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


def dead_letters_of(url: str, group: str) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = json.loads(
        cli("dead-letter", "list", group, "--json", "--redis", url).stdout
    )
    return listed


async def dead_letter_everything(url: str, group: str, count: int) -> None:
    """Run a runner without tasks until ``count`` messages are dead-lettered."""
    config = trunner.RunnerConfig(consumer_group=group, block_duration=1.0)
    async with open_checked_runner(url, config, trunner.TaskRegistry()) as runner:

        async def dead() -> bool:
            return await runner.admin.dead_letter_count() == count

        await redis_state(dead)


@pytest.mark.parametrize("columns", ["80", "40"])
async def test_dead_letters_are_readable_at_any_width(
    redis_server: RedisServer, group: str, columns: str
) -> None:
    url = redis_server.url
    task = "reports.quarterly.rebuild_for_every_region_and_currency"
    error = "the warehouse answered 503 Service Unavailable after 30 s; try again later"
    tasks = trunner.TaskRegistry()

    @tasks.task(task)
    async def rebuild(_: Any) -> None:
        raise RuntimeError(error)

    config = trunner.RunnerConfig(consumer_group=group, block_duration=1.0)
    async with open_checked_runner(url, config, tasks) as runner:
        await runner.dispatch(task, {"region": "emea"})

        async def dead() -> bool:
            return await runner.admin.dead_letter_count() == 1

        await redis_state(dead)
    [letter] = dead_letters_of(url, group)
    shown = run_python(
        "-m", "trunner", "dead-letter", "list", group, "--redis", url, env={"COLUMNS": columns}
    )
    assert shown.returncode == 0
    lines = shown.stdout.splitlines()
    assert any(line.startswith(f"{letter['id']}  {task}  attempt 1") for line in lines), lines
    assert any(line.endswith(f"RuntimeError: {error}") for line in lines), lines
    assert f"  task id: {letter['task_id']}" in shown.stdout


async def test_replay_says_what_it_did_with_each_id(redis_server: RedisServer, group: str) -> None:
    url = ["--redis", redis_server.url]
    printed = [cli("dispatch", group, "ghost", str(n), *url).stdout.strip() for n in range(2)]
    await dead_letter_everything(redis_server.url, group, 2)
    first, second = dead_letters_of(redis_server.url, group)
    assert [first["task_id"], second["task_id"]] == printed

    # The task id that `trunner dispatch` printed is not the dead letter's id: said so.
    task_id = cli("dead-letter", "replay", group, printed[0], *url)
    assert task_id.returncode == 1, "nothing replayed of what was asked"
    assert (
        f"not replayed {printed[0]}: this is a task id (what dispatch returns), not a "
        f"dead-letter id: the dead letter of that task is {first['id']}; replay that id"
    ) in task_id.stdout
    assert "replayed 0 of 1 dead letters" in task_id.stdout

    malformed = cli("dead-letter", "replay", group, "nonsense", *url)
    assert malformed.returncode == 1
    assert "not replayed nonsense: not a dead-letter id: ids look like" in malformed.stdout
    assert "XRANGE" not in malformed.stdout + malformed.stderr

    mixed = cli("dead-letter", "replay", group, first["id"], "1-1", first["id"], *url)
    assert mixed.returncode == 1, "one of the ids was not replayed"
    lines = mixed.stdout.splitlines()
    assert lines[0].startswith(f"replayed {first['id']} as ")
    assert lines[1].startswith("not replayed 1-1: not in the dead-letter stream")
    assert lines[2] == "replayed 1 of 2 dead letters"

    again = cli("dead-letter", "replay", group, first["id"], "--json", *url)
    assert again.returncode == 1, "already replayed"
    assert json.loads(again.stdout)["skipped"][first["id"]].startswith(
        "not in the dead-letter stream: already replayed"
    )

    rest = cli("dead-letter", "replay", group, *url)
    assert rest.returncode == 0
    assert rest.stdout.splitlines()[-1] == "replayed 1 of 1 dead letters"
    nothing = cli("dead-letter", "replay", group, *url)
    assert (nothing.returncode, nothing.stdout.strip()) == (
        0,
        f"no dead letters in group {group}: nothing to replay",
    )


@pytest.mark.parametrize(
    ("command", "why"),
    [
        (["dispatch", "g", "t", "{}"], "a task dispatched there would be lost"),
        (["inspect", "g"], "there is nothing to inspect there"),
        (["dead-letter", "replay", "g"], "there are no dead letters there"),
        (["quarantine", "list", "g"], "there is nothing set aside there"),
        (["pause", "g"], "no runner would see the pause"),
        (["resume", "g"], "no runner would see the resume"),
    ],
)
def test_group_commands_refuse_an_in_process_redis(
    command: list[str], why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command, "--redis", "memory://cli"]) == 1
    out, err = capsys.readouterr()
    assert out == "", "no task id printed: nothing was dispatched"
    assert err.startswith(f"trunner {command[0]}: ValueError: memory://cli is a Redis inside ")
    assert why in err
    assert "--redis redis://host:6379/0, or set REDIS_URL" in err


def test_metrics_without_the_extra_fail_before_the_runner_starts(
    redis_server: RedisServer,
    group: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
    monkeypatch.delitem(sys.modules, "trunner.prometheus", raising=False)
    target = "examples.worker:settings"
    args = ["worker", target, "--redis", redis_server.url, "--group", group, "--metrics-port", "0"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "pip install 'trunner[prometheus]'" in err
    raw = raw_client(redis_server.url)
    assert raw.keys(f"trunner:{{{group}}}:*") == [], "the runner never started"
    raw.close()


def test_dispatch_with_the_registry_says_which_name_was_meant(
    redis_server: RedisServer, group: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ["--redis", redis_server.url]
    registry = ["--tasks", "examples.worker:settings"]
    assert main(["dispatch", group, "resise", "{}", *url, *registry]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "no task named 'resise' is registered; did you mean 'resize'?" in err
    assert main(["dispatch", group, "resize", '{"image": "a.png"}', *url, *registry]) == 0


async def test_status_result_and_cancel_of_one_task(redis_server: RedisServer, group: str) -> None:
    """What a task handle does, from the command line: dispatch keeping the result, wait
    for it, look at a running task (and its progress, in inspect), cancel it."""
    url = ["--redis", redis_server.url]
    tasks = trunner.TaskRegistry()
    blocked = trio.Event()

    @tasks.task
    async def double(n: int) -> int:
        return n * 2

    @tasks.task(keep_result=60)
    async def block(_: Any) -> None:
        await trunner.report_progress(0.25, "a quarter")
        blocked.set()
        await trio.sleep_forever()

    async def run(*args: str) -> subprocess.CompletedProcess[str]:
        return await trio.to_thread.run_sync(lambda: cli(*args, *url))

    sent = await run("dispatch", group, "double", "21", "--keep-result", "60")
    assert sent.returncode == 0, sent.stderr
    task_id = sent.stdout.strip()
    waiting = await run("result", group, task_id, "--timeout", "0.2")
    assert waiting.returncode == 2, "nobody runs it yet"
    assert "no outcome within 0.2 s" in waiting.stderr
    config = trunner.RunnerConfig(consumer_group=group, block_duration=1.0)
    async with open_checked_runner(redis_server.url, config, tasks) as runner:
        got = await run("result", group, task_id)
        assert (got.returncode, got.stdout) == (0, "42\n"), got.stderr
        status = json.loads((await run("status", group, task_id, "--json")).stdout)
        assert status["state"] == "succeeded"
        assert status["attempt"] == 1
        assert status["instance"] == runner.consumer_name

        long = (await run("dispatch", group, "block", "null")).stdout.strip()
        await blocked.wait()
        shown = await run("inspect", group, *("--json",))
        running = json.loads(shown.stdout)["running"]
        assert [(t["id"], t["state"], t["progress"]) for t in running] == [(long, "running", 0.25)]
        table = await run("inspect", group)  # 80 columns: cells wrap, ids do not
        assert "25%" in table.stdout
        assert "quarter" in table.stdout
        assert long in table.stdout
        said = await run("status", group, long)
        assert "running" in said.stdout
        assert "25% (a quarter)" in said.stdout
        cancelled = await run("cancel", group, long, "--wait")
        assert cancelled.returncode == 0, cancelled.stderr
        assert cancelled.stdout.strip() == f"{long}: cancelled while it ran"
        outcome = await run("result", group, long)
        assert outcome.returncode == 1
        assert "TaskCancelled" in outcome.stderr
        again = await run("cancel", group, long)
        assert again.stdout.strip() == f"{long}: it had finished already: nothing to cancel"
        nobody = await run("cancel", group, "no-such-task")
        assert nobody.returncode == 1
        assert "no task no-such-task" in nobody.stdout
        assert (await run("status", group, "no-such-task")).returncode == 1


async def test_status_and_inspect_show_what_tasks_wrote_as_text(
    redis_server: RedisServer, group: str
) -> None:
    """A progress message or an error is the task's text: what looks like console markup
    in it (a path in brackets) is shown as it is, never read as markup (a closing tag
    that matches nothing stopped the command with a traceback)."""
    url = ["--redis", redis_server.url]
    tasks = trunner.TaskRegistry()
    blocked = trio.Event()

    @tasks.task(keep_result=60, max_retry=1, retry_backoff=3600)
    async def copy(_: Any) -> None:
        raise ValueError("bad path [/data/in.csv]")

    @tasks.task(keep_result=60)
    async def stuck(_: Any) -> None:
        await trunner.report_progress(0.5, "copying [/data/in.csv] [bold]")
        blocked.set()
        await trio.sleep_forever()

    async def run(*args: str) -> subprocess.CompletedProcess[str]:
        return await trio.to_thread.run_sync(lambda: cli(*args, *url))

    config = trunner.RunnerConfig(consumer_group=group, block_duration=1.0)
    async with open_checked_runner(redis_server.url, config, tasks) as runner:
        failing = await runner.dispatch("copy", None)

        async def retrying() -> bool:
            return (await failing.status()).state is trunner.TaskState.RETRYING

        await redis_state(retrying)
        said = await run("status", group, str(failing))
        assert said.returncode == 0, said.stderr
        assert "ValueError: bad path [/data/in.csv]" in said.stdout
        await failing.cancel()

        running = await runner.dispatch("stuck", None)
        await blocked.wait()
        await redis_state(lambda: _progress_written(running))
        said = await run("status", group, str(running))
        assert said.returncode == 0, said.stderr
        assert "50% (copying [/data/in.csv] [bold])" in said.stdout
        shown = await trio.to_thread.run_sync(
            lambda: run_python("-m", "trunner", "inspect", group, *url, env={"COLUMNS": "200"})
        )
        assert shown.returncode == 0, shown.stderr
        assert "copying [/data/in.csv] [bold]" in shown.stdout
        await running.cancel(wait=True)


async def _progress_written(handle: trunner.TaskHandle[Any]) -> bool:
    return (await handle.status()).progress == 0.5


def test_dead_letters_deleted_by_task_and_cron_fired_now(
    redis_server: RedisServer, group: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ["--redis", redis_server.url]
    raw = raw_client(redis_server.url)
    keys = trunner.keys.Keys("trunner", group)
    jobs = seed_dead(raw, keys, 2, task="job")
    seed_dead(raw, keys, 3, task="other")
    assert main(["dead-letter", "delete", group, jobs[0], "--yes", *url]) == 0
    assert main(["dead-letter", "delete", group, "--task", "other", "--yes", *url]) == 0
    out = capsys.readouterr().out
    assert "deleted 1 dead letters" in out
    assert "deleted 3 dead letters" in out
    assert raw.xlen(keys.dead) == 1
    assert main(["dead-letter", "delete", group, *url]) == 2, "delete what?"
    assert "delete what?" in capsys.readouterr().out
    registry = ["--tasks", "examples.scheduled:tasks"]
    assert main(["cron", "list", group, "--json", *url, *registry]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert (entry["name"], entry["expression"]) == ("health_probe", "* * * * * *")
    assert main(["cron", "fire", group, "health_probe", *url, *registry]) == 0
    assert "fired health_probe" in capsys.readouterr().out
    assert raw.xlen(keys.stream) == 1
    raw.close()


async def test_dispatch_sends_headers_and_dead_letters_show_them(
    redis_server: RedisServer, group: str
) -> None:
    url = ["--redis", redis_server.url]
    sent = cli(
        "dispatch", group, "ghost", "1", "--header", "tenant=acme", "--header", "a=b=c", *url
    )
    assert sent.returncode == 0, sent.stderr
    await dead_letter_everything(redis_server.url, group, 1)
    (listed,) = dead_letters_of(redis_server.url, group)
    assert listed["headers"] == {"tenant": "acme", "a": "b=c"}
    assert "headers: tenant=acme, a=b=c" in cli("dead-letter", "list", group, *url).stdout
    bad = cli("dispatch", group, "ghost", "1", "--header", "no-equals", *url)
    assert bad.returncode == 1
    assert "--header takes NAME=VALUE" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_dead_letters_are_listed_with_control_characters_escaped(
    redis_server: RedisServer, group: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a dead letter holds is anybody's text: a newline forged a line of the listing,
    an escape sequence drove the terminal."""
    raw = raw_client(redis_server.url)
    keys = trunner.keys.Keys("trunner", group)
    forged = "boom\n  task id: 0-0  (consumer admin)\x1b[2J"
    seed_dead(raw, keys, 1, task="job\rx", error=forged, reason="r\x85")
    raw.close()
    assert main(["dead-letter", "list", group, "--redis", redis_server.url]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "\r" not in out
    assert "\x85" not in out
    assert "error:   boom\\x0a  task id: 0-0  (consumer admin)\\x1b[2J" in out
    assert "job\\x0dx" in out
    assert out.count("task id:") == 2, "one real, one shown escaped inside the error"
    assert [line for line in out.splitlines() if line.startswith("  task id:")] == [
        "  task id: 0-0  (consumer seeded)"
    ]


def test_inspect_shows_what_redis_holds_as_text(
    redis_server: RedisServer, group: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Text read from Redis reached the terminal as it was: an escape sequence in an
    instance id drove it. Shown as text, markup-like brackets included."""
    raw = raw_client(redis_server.url)
    keys = trunner.keys.Keys("trunner", group)
    now_ms = int(raw.time()[0]) * 1000
    raw.zadd(keys.instances, {"ghost[/x]\x1b[2J": now_ms})
    raw.hset(keys.instances_info, "ghost[/x]\x1b[2J", '{"host": "[b]h[/no]", "pid": 1}')
    raw.close()
    assert main(["inspect", group, "--redis", redis_server.url]) == 0
    out = capsys.readouterr().out
    assert "\x1b[2J" not in out
    assert "ghost[/x]\\x1b[2J" in out
    assert "[b]h[/no]" in out


async def test_group_commands_take_the_key_prefix(redis_server: RedisServer, group: str) -> None:
    """A group under another prefix than trunner's default could not be reached."""
    url = ["--redis", redis_server.url, "--prefix", "other"]
    config = trunner.RunnerConfig(consumer_group=group, prefix="other", block_duration=1.0)
    async with open_checked_runner(redis_server.url, config, trunner.TaskRegistry()) as runner:
        paused = cli("pause", group, *url)
        assert paused.returncode == 0, paused.stderr
        assert "nothing is known" not in paused.stdout
        await runner.wait_paused()
        assert json.loads(cli("inspect", group, "--json", *url).stdout)["paused_since"] > 0
        assert cli("resume", group, *url).returncode == 0
        await runner.wait_resumed()
        listed = cli("dead-letter", "list", group, *url)
        assert listed.returncode == 0
        assert f"no dead letters in group {group}" in listed.stdout


async def test_dispatch_into_a_lane_and_inspect_it_by_lane(
    redis_server: RedisServer, group: str
) -> None:
    url = ["--redis", redis_server.url]
    tasks = trunner.TaskRegistry()
    config = trunner.RunnerConfig(consumer_group=group, lanes={"urgent": 2, "default": 1})
    async with open_checked_runner(redis_server.url, config, tasks):
        pass  # the lanes are declared
    sent = cli("dispatch", group, "ghost", "1", "--priority", "urgent", *url)
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.strip().endswith("@urgent")
    assert cli("dispatch", group, "ghost", "2", *url).returncode == 0
    info = json.loads(cli("inspect", group, "--json", *url).stdout)
    assert info["lanes"] == {"default": 1, "urgent": 1}
    assert info["queue_length"] == 2
    text = cli("inspect", group, *url).stdout
    assert "by lane" in text
    assert "urgent 1" in text
    status = json.loads(cli("status", group, sent.stdout.strip(), "--json", *url).stdout)
    assert status["state"] == "queued"
    bad = cli("dispatch", group, "ghost", "3", "--priority", "no lane!", *url)
    assert bad.returncode != 0
    assert "lane name" in bad.stderr
    typo = cli("dispatch", group, "ghost", "4", "--priority", "urgnet", *url)
    assert typo.returncode != 0
    assert "'urgnet' is not a declared lane" in typo.stderr
    assert "the known lanes are 'default', 'urgent'" in typo.stderr
    assert "on the command line, --tasks MODULE:settings" in typo.stderr


def test_inspect_without_a_group_lists_the_groups_found(
    redis_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = f"d{uuid.uuid4().hex[:8]}"  # the session's Redis holds other tests' groups
    raw = raw_client(redis_server.url)
    raw.sadd(trunner.keys.Keys(prefix, "emails").groups, "emails")
    raw.sadd(trunner.keys.Keys(prefix, "events").groups, "audit", "mailer")
    raw.close()
    url = ["--redis", redis_server.url, "--prefix", prefix]
    assert main(["inspect", *url, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["complete"] is True
    assert [(g["queue"], g["group"]) for g in listed["groups"]] == [
        ("emails", "emails"),
        ("events", "audit"),
        ("events", "mailer"),
    ]
    assert main(["inspect", *url]) == 0
    table = capsys.readouterr().out
    rows = re.findall(r"│ (\S+) +│ (\S+) +│", table)
    assert rows == [("emails", "emails"), ("audit", "events"), ("mailer", "events")]
    assert main(["inspect", "--redis", redis_server.url, "--prefix", f"{prefix}-none"]) == 0
    assert "no group found under the prefix" in capsys.readouterr().out
