"""The suite's own conventions (tests/conftest.py): a skip inside an async test or fixture
states its reason in the summary."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

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


def _imported_modules(root: Path) -> dict[str, str]:
    """Top-level modules imported anywhere under ``root`` (at any depth of the code), each
    with one file that imports it; relative imports left out."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.partition(".")[0], str(path.relative_to(REPO)))
    return found


def _closure(requirements: list[str], extras: set[str]) -> set[str]:
    """The distributions ``requirements`` install (with ``extras`` of the first level),
    following the installed metadata of each, markers evaluated for this interpreter."""
    wanted = [(Requirement(r), extras) for r in requirements]
    seen: set[tuple[str, frozenset[str]]] = set()
    while wanted:
        requirement, chosen = wanted.pop()
        if requirement.marker and not any(
            requirement.marker.evaluate({"extra": extra}) for extra in chosen or {""}
        ):
            continue
        key = (canonicalize_name(requirement.name), frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        for child in importlib.metadata.requires(requirement.name) or []:
            wanted.append((Requirement(child), set(requirement.extras)))
    return {name for name, _ in seen}


def test_the_test_extra_installs_what_the_suite_imports() -> None:
    """The README's test command installs only ``.[test]``: a module the suite imports
    from another extra stops pytest at collection (mypy, from ``dev``, once did), and CI,
    which installed more, did not see it."""
    metadata = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    installed = _closure(
        [*metadata["dependencies"], *metadata["optional-dependencies"]["test"]], set()
    )
    local = {path.stem for path in (REPO / "tests").rglob("*.py")} | {"tests", "trunner"}
    providers = importlib.metadata.packages_distributions()
    missing = {
        f"{module} ({where})"
        for module, where in _imported_modules(REPO / "tests").items()
        if module not in sys.stdlib_module_names and module not in local
        and not any(canonicalize_name(d) in installed for d in providers.get(module, ["?"]))
    }  # fmt: skip
    assert not missing, f"imported by the suite but not installed by '.[test]': {sorted(missing)}"
