"""The Redis boundary is literal: only ``trunner/_redis/`` imports a Redis client library or
asyncio, and code outside imports ``trunner._redis`` as one package, never its modules."""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterator

import pytest

import trunner

from ..conftest import run_python

PACKAGE = pathlib.Path(trunner.__file__).parent
TESTS = pathlib.Path(__file__).parent.parent
BOUNDARY = PACKAGE / "_redis"
#: What only the boundary may import (first component of the module name).
CLIENT_LIBRARIES = frozenset({"redis", "asyncio", "trio_asyncio", "fakeredis", "hiredis"})
#: The asyncio client's driver: beside the boundary, it may import asyncio itself (its
#: event loop's primitives), and nothing else of CLIENT_LIBRARIES.
ASYNCIO_DRIVER = PACKAGE / "aio.py"
#: The boundary's own modules and sub-packages, which code outside must not import one by
#: one.
BOUNDARY_MODULES = frozenset(
    p.stem
    for p in BOUNDARY.iterdir()
    if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
)
#: Unit tests of one module of the boundary, which may import that module.
UNIT_TESTS = {"unit/test_redis_errors.py": {"trunner._redis.errors"}}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path``; ``from m import n`` gives
    ``m.n`` too, since ``n`` may be a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def _outside(root: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in root.rglob("*.py") if BOUNDARY not in p.parents)


def _reaches_into_boundary(name: str) -> bool:
    parts = name.split(".")
    return parts[:2] == ["trunner", "_redis"] and len(parts) > 2 and parts[2] in BOUNDARY_MODULES


def _tested_unit(path: pathlib.Path, name: str) -> bool:
    if TESTS not in path.parents:
        return False
    units = UNIT_TESTS.get(path.relative_to(TESTS).as_posix(), set())
    return any(name == unit or name.startswith(f"{unit}.") for unit in units)


def test_only_the_boundary_imports_redis_clients_or_asyncio() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: import {name}"
        for path in _outside(PACKAGE)
        for line, name in _imports(path)
        if name.split(".")[0] in CLIENT_LIBRARIES
        and not (path == ASYNCIO_DRIVER and name == "asyncio")
    ]
    assert found == []


@pytest.mark.parametrize("root", [PACKAGE, TESTS], ids=["trunner", "tests"])
def test_code_outside_imports_the_boundary_as_one_package(root: pathlib.Path) -> None:
    assert {"transports", "broker"} <= BOUNDARY_MODULES
    assert _reaches_into_boundary("trunner._redis.transports.native"), "sub-packages count"
    assert "lua" not in BOUNDARY_MODULES, "a folder of scripts is not a module"
    found = [
        f"{path.name}:{line}: import {name}"
        for path in _outside(root)
        for line, name in _imports(path)
        if _reaches_into_boundary(name) and not _tested_unit(path, name)
    ]
    assert found == []


LIGHT = """
import sys, trio, trunner, trunner.testing

tasks = trunner.TaskRegistry()

@tasks.task
async def echo(payload):
    return payload

assert trio.run(tasks.call, "echo", 1) == 1
heavy = {"redis", "fakeredis", "lupa", "trio_asyncio", "asyncio"}
print(sorted({name.split(".")[0] for name in sys.modules} & heavy))
"""


def test_the_test_kit_and_eager_mode_load_no_redis_client() -> None:
    """``import trunner.testing`` (and ``TaskRegistry.call``, which uses it) load neither
    redis-py nor fakeredis nor an asyncio loop: the leak check's probe imports them when
    it looks at a server."""
    done = run_python("-c", LIGHT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]"]
