"""The API reference is generated from the docstrings, so it cannot drift from the code.

``docs/api.md`` is the one reference page: ``::: trunner.name`` directives that
mkdocstrings renders from the docstrings. These tests check that every public name is on
it, that no public name lacks a docstring (mkdocstrings leaves undocumented members out),
and that the links the docstrings hold lead somewhere. Building the page needs mkdocs and
mkdocstrings (the ``test`` extra): without them those tests are skipped, and fail when
``CI=true``.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import os
import re
import types
import typing
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urljoin

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: The modules whose ``__all__`` is the public API: the top level, then its namespaces.
PUBLIC_MODULES = (
    "trunner",
    "trunner.errors",
    "trunner.admin",
    "trunner.middleware",
    "trunner.keys",
    "trunner.testing",
    "trunner.election",
    "trunner.otel",
    "trunner.aio",
    "trunner.sync",
)
#: The admin methods a runner and a client keep from before ``Admin``, deprecated.
DEPRECATED_ADMIN_CALLS = (
    "queue_length",
    "lane_lengths",
    "pending_count",
    "delayed_count",
    "dead_letter_count",
    "waiting_age",
    "group_stats",
    "instances",
    "inspect",
    "pause",
    "resume",
    "dead_letters",
    "dead_letters_newest",
    "replay_dead_letters",
    "delete_dead_letters",
    "purge_dead_letters",
    "delayed_tasks",
    "cron_entries",
    "quarantined",
    "quarantine_count",
    "purge_quarantine",
)
#: Members that are public names but documented only as deprecated (docs/api.md lists them).
DEPRECATED_MEMBERS = {"trunner.Runner.stats", "trunner.Client.stats"} | {
    f"trunner.{cls}.{name}" for cls in ("Runner", "Client") for name in DEPRECATED_ADMIN_CALLS
}
#: Sphinx roles render as raw text in mkdocstrings: docstrings use Markdown links instead.
SPHINX_ROLE = re.compile(r":(class|func|meth|mod|data|attr|exc|obj):`")


def _public_names() -> Iterator[tuple[str, Any]]:
    """``(dotted name, object)`` for every name of the public modules' ``__all__``: an
    object that two of them export (``trunner.TaskFailed`` is ``trunner.errors.TaskFailed``)
    under the first, where the page documents it."""
    seen: set[int] = set()
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            if id(value) not in seen:
                seen.add(id(value))
                yield f"{module_name}.{name}", value


def _is_type_alias(value: object) -> bool:
    return isinstance(value, types.UnionType | types.GenericAlias) or (
        type(value).__module__ == "typing" and typing.get_origin(value) is not None
    )


def _public_members(cls: type) -> dict[str, Any]:
    """The public members trunner defines on ``cls`` or its trunner bases, with attrs
    fields and enum members: what the reference page shows under the class."""
    members: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.split(".")[0] != "trunner":
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_"):
                members[name] = value
    if attrs.has(cls):
        members.update({f.name: f for f in attrs.fields(cls) if not f.name.startswith("_")})
    if issubclass(cls, enum.Enum):
        members.update(cls.__members__)
    return members


def _member_id(cls_id: str, cls: type, name: str) -> list[str]:
    """The heading ids under which a member may appear on the page."""
    ids = [f"{cls_id}.{name}"]
    if cls_id in {"trunner.Client", "trunner.aio.Client"}:  # the shared dispatch methods
        ids.append(f"trunner.Runner.{name}")
    if cls_id == "trunner.sync.Admin":  # blocking forms of the Admin methods
        ids.append(f"trunner.admin.Admin.{name}")
    return ids


def _own_doc(value: Any) -> str | None:
    if isinstance(value, property):
        value = value.fget
    elif isinstance(value, classmethod | staticmethod):
        value = value.__func__
    if inspect.isclass(value):
        return value.__dict__.get("__doc__")
    return getattr(value, "__doc__", None)


def test_every_public_callable_has_a_docstring() -> None:
    missing = []
    for dotted, value in _public_names():
        if _is_type_alias(value) or not (
            inspect.isclass(value) or inspect.isroutine(value) or inspect.ismodule(value)
        ):
            continue
        if not (_own_doc(value) or "").strip():
            missing.append(dotted)
        if not inspect.isclass(value):
            continue
        for name, member in _public_members(value).items():
            is_callable = isinstance(member, property | classmethod | staticmethod) or (
                inspect.isroutine(member)
            )
            if is_callable and not (_own_doc(member) or "").strip():
                missing.append(f"{dotted}.{name}")
    assert not missing, f"public names without a docstring: {missing}"


def test_there_is_one_reference_page() -> None:
    pages = [p.name for p in sorted(DOCS.glob("*.md")) if re.search(r"^::: ", p.read_text(), re.M)]
    assert pages == ["api.md"]
    assert not (DOCS / "reference.md").exists()


def test_the_reference_page_reads_without_rendering() -> None:
    """Unrendered (on the forge, in an editor) the ``:::`` directives show nothing: the
    head of the page says how to read the reference and lists the main names."""
    text = (DOCS / "api.md").read_text()
    head = text[: text.index("\n::: ")]
    assert "mkdocs serve" in head
    assert "pydoc" in head
    main = ["open_runner", "Runner", "open_client", "Client", "RunnerConfig", "TaskRegistry"]
    main += ["TaskHandle", "current_message", "WorkerSettings", "open_elector", "Middleware"]
    assert [name for name in main if f"`{name}" not in head] == []
    assert re.search(r"\]\(getting-started\.md#", head), "the names link to the guide"


def test_the_redis_layout_page_names_every_lua_script() -> None:
    """docs/redis-layout.md says it describes every Lua script: one added without a row
    there would be undocumented."""
    text = (DOCS / "redis-layout.md").read_text()
    scripts = sorted(p.name for p in (ROOT / "trunner" / "_redis" / "lua").glob("*.lua"))
    assert scripts
    assert [name for name in scripts if f"| `{name}` |" not in text] == []


def _require(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        message = f"{module} is not installed (pip install -e '.[test]')"
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(message + " (CI=true makes this an error)")
        pytest.skip(message)


class _Page(HTMLParser):
    """The ids, links and text of one HTML page."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.text: list[str] = []
        self.feed(path.read_text(encoding="utf-8"))

    def handle_starttag(self, tag: str, attributes: list[tuple[str, str | None]]) -> None:
        values = dict(attributes)
        if values.get("id"):
            self.ids.add(values["id"] or "")
        if tag == "a" and values.get("href"):
            self.links.append(values["href"] or "")

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documentation, built into a temporary directory (not strict: CI's own
    ``mkdocs build --strict`` reports warnings)."""
    _require("yaml")
    config_module = _require("mkdocs.config")
    build_module = _require("mkdocs.commands.build")
    _require("mkdocstrings_handlers.python")
    site_dir = tmp_path_factory.mktemp("site")
    config = config_module.load_config(
        str(ROOT / "mkdocs.yml"), site_dir=str(site_dir), strict=False
    )
    build_module.build(config)
    return site_dir


def test_every_public_name_is_on_the_reference_page(site: Path) -> None:
    page = _Page(site / "api" / "index.html")
    missing = []
    for dotted, value in _public_names():
        if dotted not in page.ids:
            missing.append(dotted)
            continue
        if not inspect.isclass(value):
            continue
        for name in _public_members(value):
            ids = _member_id(dotted, value, name)
            if not any(i in page.ids for i in ids) and ids[0] not in DEPRECATED_MEMBERS:
                missing.append(ids[0])
    assert not missing, f"not on the reference page (or without a docstring): {missing}"


def test_the_reference_page_has_no_sphinx_roles(site: Path) -> None:
    text = "".join(_Page(site / "api" / "index.html").text)
    assert not SPHINX_ROLE.findall(text), "use Markdown links: [`Name`][trunner.Name]"


def test_the_links_of_the_reference_page_lead_somewhere(site: Path) -> None:
    """mkdocs checks the links of hand-written Markdown, not those in docstrings."""
    base = "https://site.invalid/api/"
    page = _Page(site / "api" / "index.html")
    pages: dict[Path, _Page] = {}
    broken = []
    for link in page.links:
        url, fragment = urldefrag(urljoin(base, link))
        if not url.startswith("https://site.invalid/"):
            continue  # another site
        path = site / url.removeprefix("https://site.invalid/")
        if path.is_dir() or not path.suffix:
            path = path / "index.html"
        if not path.exists():
            broken.append(link)
        elif fragment and path.suffix == ".html":
            if path not in pages:
                pages[path] = _Page(path)
            if fragment not in pages[path].ids:
                broken.append(link)
    assert not broken, f"links of the reference page that lead nowhere: {broken}"
