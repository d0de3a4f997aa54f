"""The suite's own conventions (tests/conftest.py): a skip inside an async test or fixture
states its reason in the summary."""

from __future__ import annotations

import re

from ..conftest import REPO, run_python


def test_a_skip_in_an_async_test_states_its_reason() -> None:
    # pytest-trio re-raises a skip from inside trio.run without its reason: the summary
    # said "_pytest/python.py:187: Skipped" for every such skip.
    in_test = "tests/redis/test_redis_handle.py::test_blocking_commands_do_not_hold_up_a_batch"
    in_fixture = "tests/redis/test_handle_isolation.py::test_a_blocking_command_has_a_connection"
    result = run_python(
        "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "-k", "memory",
        f"{in_test}[memory]", f"{in_fixture}_of_its_own",
        env={"PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("SKIPPED"))
    expected = [
        r"tests/redis/test_handle_isolation\.py:\d+: memory:// has one transport",
        r"tests/redis/test_redis_handle\.py:\d+: the in-process server does not block",
    ]
    assert len(lines) == len(expected), result.stdout
    for line, pattern in zip(lines, expected, strict=True):
        assert re.fullmatch(r"SKIPPED \[1\] " + pattern, line), line
