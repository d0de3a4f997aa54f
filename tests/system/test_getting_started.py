"""The code of the getting-started page runs as written, and prints what the page shows.

Each ```python block of ``docs/getting-started.md`` that is a whole program on
``memory://`` runs in its own process; when a ```text block follows it, the output must be
those lines (stream ids vary, and the page says the order of concurrent tasks' lines does:
ids are masked and the lines compared as a multiset). The modules are imported, the pytest
example is run by pytest, and the worker of the three-file example serves the producer's
tasks on a real Redis and stops on SIGTERM.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest
import redis

from ..conftest import REPO, run_python
from ..support.servers import RedisServer

PAGE = REPO / "docs" / "getting-started.md"
BLOCK = re.compile(r"^ *```(python|text)\n(.*?)^ *```", re.S | re.M)
STREAM_ID = re.compile(r"\b\d{13}-\d+\b")


def _blocks() -> list[tuple[str, str]]:
    return BLOCK.findall(PAGE.read_text())


def _named(first_line: str) -> str:
    """The python block whose first line is ``first_line`` (``# worker.py`` ...)."""
    [code] = [code for lang, code in _blocks() if lang == "python" and code.startswith(first_line)]
    return code


def _programs() -> list[Any]:
    """The blocks that are whole programs and stop by themselves, with the output shown
    after them (None when the page shows none)."""
    blocks = _blocks()
    found = []
    for index, (lang, code) in enumerate(blocks):
        if lang != "python" or not code.rstrip().endswith("\ntrio.run(main)"):
            continue
        after = blocks[index + 1] if index + 1 < len(blocks) else None
        expected = after[1] if after is not None and after[0] == "text" else None
        found.append(pytest.param(code, expected, id=f"block-{index}"))
    return found


def _masked(text: str) -> list[str]:
    return sorted(STREAM_ID.sub("ID", line) for line in text.strip().splitlines())


def test_the_page_has_the_programs_this_file_runs() -> None:
    """A change to the page's layout must not silently turn these tests into no-ops."""
    programs = _programs()
    assert len(programs) >= 5
    assert sum(p.values[1] is not None for p in programs) >= 4


@pytest.mark.parametrize(("code", "expected"), _programs())
def test_a_program_of_the_page_prints_what_the_page_shows(
    code: str, expected: str | None, tmp_path: Path
) -> None:
    (tmp_path / "program.py").write_text(code)
    done = run_python("program.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    if expected is not None:
        assert _masked(done.stdout) == _masked(expected)


def test_the_modules_of_the_page_import(tmp_path: Path) -> None:
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "tasks.py").write_text(_named("# myapp/tasks.py"))
    [registry] = [
        code
        for lang, code in _blocks()
        if lang == "python" and code.startswith("import trunner\n") and "email.send" in code
    ]
    (tmp_path / "registry.py").write_text(registry)
    check = (
        "import myapp.tasks, registry; "
        "print(sorted(myapp.tasks.settings.tasks.names), sorted(registry.tasks.names))"
    )
    done = run_python("-c", check, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['resize_image'] ['email.send', 'resize_image']"


def test_the_pytest_example_passes(tmp_path: Path) -> None:
    [test] = [code for lang, code in _blocks() if lang == "python" and "@pytest.fixture" in code]
    (tmp_path / "test_page.py").write_text(test)
    done = run_python("-m", "pytest", "-q", "-p", "no:cacheprovider", "test_page.py", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def _three_files(tmp_path: Path) -> None:
    (tmp_path / "tasks.py").write_text(_named("# tasks.py"))
    (tmp_path / "worker.py").write_text(_named("# worker.py\n"))
    (tmp_path / "stopping.py").write_text(_named("# worker.py, stopping at once"))
    (tmp_path / "producer.py").write_text(_named("# producer.py"))


def _start(script: str, cwd: Path, url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, script],
        cwd=cwd,
        env={**os.environ, "REDIS_URL": url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _read_until(stream: IO[str], wanted: str) -> list[str]:
    """The lines of ``stream`` up to the first that holds ``wanted`` (all of them if it
    ends first)."""
    lines = []
    for line in stream:
        lines.append(line.rstrip("\n"))
        if wanted in line:
            break
    return lines


def test_the_worker_runs_the_producers_tasks_and_stops_on_sigterm(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    _three_files(tmp_path)
    url = redis_server.url.rsplit("/", 1)[0] + "/13"
    raw = redis.Redis.from_url(url)
    raw.flushdb()
    worker = _start("worker.py", tmp_path, url)
    try:
        assert worker.stdout is not None
        assert " ready" in _read_until(worker.stdout, " ready")[-1]
        produced = run_python("producer.py", cwd=tmp_path, env={"REDIS_URL": url})
        assert produced.returncode == 0, produced.stderr
        assert STREAM_ID.sub("ID", produced.stdout.strip()) == "dispatched 100 tasks, first id ID"
        resized: set[str] = set()
        while len(resized) < 100:
            line = worker.stdout.readline()
            assert line, "the worker ended before it ran every task"
            resized.add(line.rstrip("\n"))
        assert resized == {f"resized /photos/{n}.jpg (attempt 1)" for n in range(100)}
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
        assert worker.returncode == 0, err
        assert out.strip().splitlines()[-2:] == [
            "SIGTERM: stopping",
            "stopped: 100 succeeded, 0 failed",
        ]
    finally:
        worker.kill()
        worker.communicate()
        raw.flushdb()
        raw.close()


def test_the_worker_that_stops_at_once_on_a_second_signal_drains_on_the_first(
    tmp_path: Path,
) -> None:
    _three_files(tmp_path)
    worker = _start("stopping.py", tmp_path, "memory://worker")
    try:
        assert worker.stderr is not None
        assert "runner started" in _read_until(worker.stderr, "runner started")[-1]
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
        assert worker.returncode == 0, err
        assert out.strip().splitlines() == [
            "SIGTERM: draining",
            "stopped: 0 succeeded, 0 interrupted",
        ]
    finally:
        worker.kill()
        worker.communicate()
