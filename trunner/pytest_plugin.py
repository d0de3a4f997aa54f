"""trunner's pytest plugin: fixtures for testing code that uses trunner.

pytest loads this module through the ``pytest11`` entry point ``trunner``, but it only adds
its command-line and ini options until you enable it, with any of:

* ``pytest --trunner``;
* ``trunner = true`` in the ``[tool.pytest.ini_options]`` of ``pyproject.toml`` (or in
  ``pytest.ini``);
* ``--trunner-redis URL`` (or the ``trunner_redis`` ini option), which also makes the
  fixtures use that Redis instead of an in-process ``memory://`` server per test.

(With ``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` set, add ``-p trunner`` as well.)

Enabled, it provides these fixtures for Trio tests (pytest-trio): ``trunner_redis_url``,
``trunner_group``, ``trunner_tasks`` (the registry under test: override it),
``trunner_runner`` (a :class:`~trunner.testing.RunnerFactory`) and ``trunner_client``.
See ``docs/testing.md``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from ._redis import check_url, forget_memory_server, redact_url
from .client import Client, open_client
from .registry import TaskRegistry
from .testing import RunnerFactory, clean_keys, open_runner_factory

__all__ = ["TrunnerFixtures"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("trunner", "trunner fixtures")
    group.addoption(
        "--trunner",
        action="store_true",
        default=False,
        help="enable trunner's fixtures (trunner_redis_url, trunner_runner, trunner_client)",
    )
    group.addoption(
        "--trunner-redis",
        metavar="URL",
        default=None,
        help="run trunner's fixtures on this Redis database instead of a fresh memory:// "
        "server per test; every key under 'trunner:' (and the runners' prefixes) is "
        "deleted before and after each test. Implies --trunner.",
    )
    parser.addini("trunner", type="bool", default=False, help="enable trunner's fixtures")
    parser.addini("trunner_redis", default="", help="like --trunner-redis URL")


def _redis_option(config: pytest.Config) -> str | None:
    url = config.getoption("trunner_redis") or config.getini("trunner_redis")
    return str(url) if url else None


def pytest_configure(config: pytest.Config) -> None:
    url = _redis_option(config)
    if not (config.getoption("trunner") or config.getini("trunner") or url):
        return
    if not config.pluginmanager.hasplugin("trio"):
        raise pytest.UsageError(
            "trunner's fixtures need pytest-trio, installed (pip install pytest-trio) and "
            "loaded (with PYTEST_DISABLE_PLUGIN_AUTOLOAD set, pass -p trio as well)"
        )
    if url is not None:
        try:
            check_url(url)
        except (TypeError, ValueError) as exc:
            raise pytest.UsageError(f"--trunner-redis: {exc}") from None
    config.pluginmanager.register(TrunnerFixtures(url), "trunner-fixtures")


class TrunnerFixtures:
    """The fixtures, registered as a plugin when enabled."""

    def __init__(self, redis_url: str | None) -> None:
        self.redis_url = redis_url

    def pytest_report_header(self) -> str:
        where = self.redis_url or "a fresh memory:// server per test"
        return f"trunner fixtures: Redis at {redact_url(where)}"

    @pytest.fixture
    async def trunner_redis_url(self) -> AsyncIterator[str]:
        """A Redis URL for the test: a fresh ``memory://`` server (forgotten afterwards), or
        the ``--trunner-redis`` database, its ``trunner:`` keys deleted before and after."""
        if self.redis_url is None:
            name = f"trunner-test-{uuid.uuid4().hex[:12]}"
            try:
                yield f"memory://{name}"
            finally:
                forget_memory_server(name)
            return
        await clean_keys(self.redis_url)
        yield self.redis_url
        await clean_keys(self.redis_url)

    @pytest.fixture
    def trunner_group(self) -> str:
        """A consumer group name of the test's own (``trunner_runner`` and
        ``trunner_client`` use it)."""
        return f"test-{uuid.uuid4().hex[:10]}"

    @pytest.fixture
    def trunner_tasks(self) -> TaskRegistry | None:
        """The registry of the code under test: ``None`` here; override it in your
        ``conftest.py`` to return yours. ``trunner_client`` then checks task names and
        dispatches unique tasks as unique, and ``await trunner_runner()`` runs it."""
        return None

    @pytest.fixture
    async def trunner_runner(
        self, trunner_redis_url: str, trunner_group: str, trunner_tasks: TaskRegistry | None
    ) -> AsyncIterator[RunnerFactory]:
        """Opens runners: ``runner = await trunner_runner(tasks, num_workers=2)``
        (``tasks`` defaults to ``trunner_tasks``).

        Every runner is stopped at the end of the test, which then fails if one left a
        task, a connection, or a message neither acknowledged nor released.
        """
        async with open_runner_factory(
            trunner_redis_url, trunner_group, tasks=trunner_tasks
        ) as factory:
            yield factory
        if self.redis_url is not None:
            await clean_keys(self.redis_url, {r.config.prefix for r in factory.runners})

    @pytest.fixture
    async def trunner_client(
        self, trunner_redis_url: str, trunner_group: str, trunner_tasks: TaskRegistry | None
    ) -> AsyncIterator[Client]:
        """A :class:`~trunner.Client` of ``trunner_group`` with the registry
        ``trunner_tasks``, closed at the end of the test."""
        async with open_client(trunner_redis_url, trunner_group, tasks=trunner_tasks) as client:
            yield client
