"""The import graph of trunner/ has no cycle, and runs one way through the layers of
:data:`LAYERS`: values, then the Redis boundary, then the duties, then the runner, then
the tools.

Read from the source with ``ast``: module-level imports count, ``if TYPE_CHECKING:`` ones
too (a type-only cycle still ties the modules together for a reader and for mypy). An
import inside a function is allowed where the file says why, on its line or in a comment
just above it, and never closes a cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import trunner

from ..conftest import run_python

PACKAGE = Path(trunner.__file__).resolve().parent

#: Cycles known and not cut yet, each exactly as found; tighten by deleting an entry.
ALLOWED_CYCLES: set[frozenset[str]] = set()

#: The layers of the package, bottom first (DESIGN.md §2): a module imports from its own
#: layer and those below, never from one above. Each entry is a module, or a sub-package
#: with all its modules; every module of the package is in exactly one layer, so a new
#: module must be given one here.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "values",
        frozenset(
            {
                "trunner._action",
                "trunner._context",
                "trunner._deprecate",
                "trunner._public",
                "trunner._wording",
                # The middleware hooks, run by producers, the engine and eager calls: beside
                # the Middleware they run, below every caller.
                "trunner._hooks",
                "trunner._util",
                "trunner._validate",
                "trunner._wire",
                "trunner.config",
                "trunner.errors",
                "trunner._errors",  # the classes trunner.errors re-exports, in parts
                "trunner.keys",  # the public path of Keys and UniqueLock
                "trunner.message",
                "trunner.middleware",
                "trunner.schedule",
                "trunner.statistics",
                "trunner.status",
                "trunner._task",
                # A workflow as values (its steps, its plan), dispatched by the producers;
                # ``trunner.workflows`` is their public path.
                "trunner._workflows",
                "trunner.workflows",
            }
        ),
    ),
    ("redis", frozenset({"trunner._redis"})),
    # Waiting for a task's outcome, on any event loop: under the handles and the producer.
    ("waiting", frozenset({"trunner._waiting"})),
    ("executors", frozenset({"trunner._executors"})),
    # The registry sits above the executors, not among the values: its ``call`` runs a task
    # eagerly through ``_executors.eager``. ``Task`` and ``CronSchedule`` stay values;
    # ``trunner.task``, their public path, re-exports the registry too.
    ("definitions", frozenset({"trunner._schedules", "trunner.registry", "trunner.task"})),
    (
        "engine",
        frozenset({"trunner._engine"}),
    ),
    (
        "leader",
        frozenset(
            {
                "trunner._leader",
                "trunner.election",  # the public path of the elector
            }
        ),
    ),
    (
        "face",
        frozenset(
            {
                # The runner's composition root and ordered shutdown: they wire the engine,
                # the leader's chores and the handles task code holds, so they sit here,
                # beside the runner, above all they import.
                "trunner._lifecycle",
                "trunner._admin_calls",  # the admin methods runners and clients still carry
                "trunner._producer",
                "trunner.admin",
                "trunner.client",
                "trunner._discovery",
                "trunner.handles",
                "trunner._workflow_handle",  # beside the task handles
                "trunner.progress",
                "trunner.redis_handle",
                "trunner._runner_view",
                "trunner.runner",
            }
        ),
    ),
    # The clients of asyncio and synchronous code: drivers of the producer (``_producer``,
    # in the face) on another event loop, or from threads; nothing below imports them.
    (
        "drivers",
        frozenset(
            {"trunner.aio", "trunner.sync", "trunner._client_thread", "trunner._sync_handles"}
        ),
    ),
    (
        "tools",
        frozenset(
            {
                "trunner",  # the package's surface re-exports names from every layer
                "trunner.__main__",
                "trunner.cli",
                "trunner.dashboard",
                "trunner.otel",
                "trunner.prometheus",
                "trunner.pytest_plugin",
                "trunner._worker",
                "trunner.serve",  # the public path of the worker's settings
                "trunner.testing",
                "trunner.worker",
            }
        ),
    ),
)

#: Arrows running back up, known and not cut yet (each a seam named in the layout
#: review), as (importer, imported); tighten by deleting an entry.
ALLOWED_UPWARD: set[tuple[str, str]] = set()


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package: dotted name -> (file, whether it is a package)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


MODULES = _modules()


def _base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    parts = parts[: len(parts) - node.level + 1]
    return ".".join([*parts, *([node.module] if node.module else [])])


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The modules of the package that ``node`` runs: the one named, and (implicitly)
    the packages above it, except those ``module`` is inside of."""
    if isinstance(node, ast.Import):
        named = {alias.name for alias in node.names}
    else:
        base = _base(module, is_package, node)
        named = {f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names}
    targets = set()
    for name in named:
        parts = name.split(".")
        for end in range(1, len(parts) + 1):
            target = ".".join(parts[:end])
            above_us = module == target or module.startswith(target + ".")
            if target in MODULES and (target == name or not above_us):
                targets.add(target)
    targets.discard(module)
    return targets


def _top_level(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports run when the module is imported (``if``/``try`` blocks included)."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, *(h.body for h in node.handlers), node.orelse):
                yield from _top_level(block)
            yield from _top_level(node.finalbody)


def _graph(*, lazy: bool = False) -> dict[str, set[str]]:
    """Module -> the modules it imports when imported (with ``lazy``: also in functions)."""
    graph = {}
    for module, (path, is_package) in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        nodes = (
            [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
            if lazy
            else _top_level(tree.body)
        )
        graph[module] = {target for node in nodes for target in _targets(module, is_package, node)}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _describe(cycle: frozenset[str], graph: dict[str, set[str]]) -> str:
    edges = [f"{a} -> {b}" for a in sorted(cycle) for b in sorted(graph[a] & cycle)]
    return "; ".join(edges)


def _reason_given(lines: list[str], lineno: int) -> bool:
    """Whether the import at ``lineno`` (1-based) says why it is not at the top."""
    line = lines[lineno - 1]
    if "#" in line:
        comment = line.split("#", 1)[1].replace("noqa: PLC0415", "").strip(" -")
        if comment:
            return True
    return any(text.strip().startswith("#") for text in lines[max(0, lineno - 4) : lineno - 1])


def test_the_import_graph_has_no_cycle() -> None:
    graph = _graph()
    assert "trunner.runner" in graph, "the graph was read from the package's files"
    cycles = _cycles(graph)
    new = [_describe(c, graph) for c in cycles if c not in ALLOWED_CYCLES]
    assert new == [], "import cycles"
    stale = [sorted(c) for c in ALLOWED_CYCLES if c not in cycles]
    assert stale == [], "these cycles are gone: remove them from ALLOWED_CYCLES"


def _layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of ``module``'s layer (its own entry, else that of the
    innermost sub-package holding it, the package itself aside), or None when it has
    none."""
    found: tuple[int, int] | None = None
    for index, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            inside = entry != "trunner" and module.startswith(entry + ".")
            if module == entry or inside:
                depth = entry.count(".")
                if found is None or depth > found[1]:
                    found = (index, depth)
    return None if found is None else found[0]


def test_every_module_has_one_layer() -> None:
    entries = [entry for _, layer in LAYERS for entry in layer]
    assert len(entries) == len(set(entries)), "a module in two layers"
    assert sorted(e for e in entries if e not in MODULES) == [], "no such module"
    assert sorted(m for m in MODULES if _layer_of(m) is None) == []


def test_no_import_runs_back_up_the_layers() -> None:
    """Function-level imports count too: a lazy import still ties the two modules."""
    graph = _graph(lazy=True)
    upward = {
        (module, target)
        for module, targets in graph.items()
        for target in targets
        # An import of a sub-package's module counts once, as that module.
        if not any(other.startswith(target + ".") for other in targets)
        and (_layer_of(target) or 0) > (_layer_of(module) or 0)
    }
    names = [name for name, _ in LAYERS]
    new = [
        f"{a} ({names[_layer_of(a) or 0]}) -> {b} ({names[_layer_of(b) or 0]})"
        for a, b in sorted(upward - ALLOWED_UPWARD)
    ]
    assert new == [], "imports running back up the layers"
    assert sorted(ALLOWED_UPWARD - upward) == [], "cut: remove them from ALLOWED_UPWARD"


def test_the_layer_check_sees_an_arrow_back_up() -> None:
    assert _layer_of("trunner._redis.broker") == _layer_of("trunner._redis")
    assert _layer_of("trunner.message") == 0
    assert (_layer_of("trunner.runner") or 0) > (_layer_of("trunner._engine.pool") or 0)
    assert _layer_of("trunner.not_a_module") is None


#: Public modules that only re-export names from a private sub-package, so that users keep
#: their import paths; with the modules that may import them.
REEXPORTS = {"trunner.election", "trunner.keys", "trunner.serve"}
REEXPORT_IMPORTERS = {"trunner", "trunner.worker"}


def test_the_package_imports_its_own_code_not_the_public_reexports() -> None:
    """Code inside the package names a module where its code is, never a public
    re-export of it (a re-export stays a thin list of names users import)."""
    graph = _graph(lazy=True)
    found = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module not in REEXPORT_IMPORTERS
        for target in targets & REEXPORTS
    )
    assert found == []


def test_no_import_inside_a_function_closes_a_cycle() -> None:
    """A lazy import is for a cost (an optional extra, a heavy client), never to hide a
    cycle: importing the module at the top instead would not create one either."""
    graph = _graph(lazy=True)
    new = [_describe(c, graph) for c in _cycles(graph) if c not in ALLOWED_CYCLES]
    assert new == [], "import cycles through imports inside functions"


def test_an_import_inside_a_function_says_why() -> None:
    silent = []
    for module, (path, is_package) in MODULES.items():
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source, str(path))
        top = {id(node) for node in _top_level(tree.body)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom) or id(node) in top:
                continue
            if _targets(module, is_package, node) and not _reason_given(lines, node.lineno):
                silent.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert silent == []


def test_the_checks_see_type_only_imports_packages_and_cycles() -> None:
    source = "if TYPE_CHECKING:\n    from .message import TaskMessage\n"
    (node,) = _top_level(ast.parse(source).body)
    assert _targets("trunner.config", False, node) == {"trunner.message"}
    (node,) = _top_level(ast.parse("from ._redis.lease import LeaseStore").body)
    assert _targets("trunner.election", False, node) == {"trunner._redis", "trunner._redis.lease"}
    (node,) = _top_level(ast.parse("from .lease import LeaseStore").body)
    assert _targets("trunner._redis.broker", False, node) == {"trunner._redis.lease"}
    (node,) = _top_level(ast.parse("from . import _validate as v, election").body)
    assert _targets("trunner.task", False, node) == {"trunner._validate", "trunner.election"}
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [frozenset({"a", "b", "c"})]
    lines = [
        "def f():",
        "    # Loaded on first use only.",
        "",
        "    from . import x  # noqa: PLC0415",
    ]
    assert _reason_given(lines, 4)
    assert _reason_given(["    from . import x  # noqa: PLC0415 - loads fakeredis"], 1)
    assert not _reason_given(["def f():", "    from . import x  # noqa: PLC0415"], 2)


def test_importing_trunner_or_calling_a_task_eagerly_loads_no_test_kit() -> None:
    code = """
import sys
import trio
import trunner

tasks = trunner.TaskRegistry()

@tasks.task
async def echo(payload):
    return payload

assert trio.run(tasks.call, "echo", [1]) == [1]
loaded = sorted(m for m in sys.modules if m.startswith("trunner.testing"))
print(loaded)
"""
    result = run_python("-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_importing_trunner_or_its_command_loads_no_web_stack() -> None:
    """The dashboard is a top room of its own extra: nothing below it imports it."""
    code = """
import sys
import trunner, trunner.cli, trunner.admin, trunner.client
web = sorted(m for m in sys.modules if m.split(".")[0] in {"starlette", "hypercorn", "jinja2"}
             or m.startswith("trunner.dashboard"))
print(web)
"""
    result = run_python("-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_importing_trunner_or_its_command_loads_no_opentelemetry() -> None:
    """OpenTelemetry is a top room of its own extra: nothing below it imports it, so a
    runner without the middleware pays nothing for it."""
    code = """
import sys
import trunner, trunner.cli, trunner.admin, trunner.client, trunner.prometheus
otel = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"
              or m == "trunner.otel")
print(otel)
"""
    result = run_python("-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def _room(module: str) -> str:
    """The room a module is in: a top-level module, or a sub-package of ``trunner``."""
    return ".".join(module.split(".")[:2])


def test_no_two_rooms_import_each_other() -> None:
    """Seen as rooms (a top-level module, or a sub-package with all its modules), the
    package has no cycle either: a folder is a layer, and none reaches back into one that
    imports it."""
    graph = _graph()
    rooms: dict[str, set[str]] = {_room(m): set() for m in graph}
    for module, targets in graph.items():
        rooms[_room(module)] |= {_room(t) for t in targets} - {_room(module)}
    assert "trunner._engine" in rooms
    found = [_describe(c, rooms) for c in _cycles(rooms)]
    assert found == [], "rooms that import each other"
