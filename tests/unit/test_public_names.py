"""Every public name that resolves today still resolves, from where users import it.

The layout of the package is changing (implementation modules move into private
sub-packages); the names users type must not move with them. This is a snapshot: each
public module's ``__all__`` exactly, and the few names the docs spell with a module path.
A name leaves only deliberately: through ``_DEPRECATED`` (a warning for one release,
checked in ``test_deprecated.py``), then by editing this file at the release that
removes it.
"""

from __future__ import annotations

import importlib
import warnings

import pytest

#: The ``__all__`` of each public module, as released.
PUBLIC: dict[str, frozenset[str]] = {
    "trunner": frozenset(
        {
            "Admin",
            "AttemptInfo",
            "AttemptOutcome",
            "BackendError",
            "BadData",
            "CancelOutcome",
            "Client",
            "CommandNotAllowed",
            "Crashed",
            "CronEntry",
            "CronSchedule",
            "DeadLetter",
            "DelayedTask",
            "DispatchInfo",
            "ElectorCrashed",
            "FailedTaskHandler",
            "FoundGroup",
            "GiveUp",
            "GroupInfo",
            "GroupStats",
            "GroupsFound",
            "InstanceInfo",
            "InvalidArgument",
            "InvalidHeaders",
            "InvalidMessage",
            "InvalidPayload",
            "InvalidResult",
            "Keys",
            "LeadershipLost",
            "LongQueueHook",
            "MaxRetryExceeded",
            "Middleware",
            "MiddlewareError",
            "PayloadTooLarge",
            "Pipeline",
            "QuarantineRecord",
            "RedisCommandError",
            "RedisHandle",
            "RedisUnavailable",
            "RemoteError",
            "RemoteFailure",
            "ReplayResult",
            "ReservationLost",
            "ResultExpired",
            "ResultNotFound",
            "ResultNotKept",
            "ResultTimeout",
            "Runner",
            "RunnerAlreadyStarted",
            "RunnerConfig",
            "RunnerCrashed",
            "RunnerNotRunning",
            "RunnerState",
            "RunnerStatistics",
            "SelfWait",
            "Task",
            "TaskAlreadyDispatched",
            "TaskCancelled",
            "TaskDefaults",
            "TaskExpired",
            "TaskFailed",
            "TaskHandle",
            "TaskMessage",
            "TaskNotFound",
            "TaskRegistry",
            "TaskState",
            "TaskStatus",
            "TaskTimeout",
            "TaskTiming",
            "TrunnerError",
            "WorkerSettings",
            "__version__",
            "current_message",
            "current_runner",
            "discover_groups",
            "election",
            "forget_memory_server",
            "open_admin",
            "open_client",
            "open_redis",
            "open_runner",
            "redact_url",
            "report_progress",
        }
    ),
    "trunner.testing": frozenset(
        {
            "CapturedErrors",
            "CleanShutdown",
            "IdleState",
            "NotIdle",
            "RunnerFactory",
            "ShutdownLeak",
            "assert_clean_shutdown",
            "call_task",
            "capture_errors",
            "clean_keys",
            "open_runner_factory",
            "run_until_idle",
        }
    ),
    "trunner.election": frozenset(
        {
            "Demoted",
            "ElectionEvent",
            "ElectionFailed",
            "Elector",
            "Promoted",
            "open_elector",
        }
    ),
    "trunner.otel": frozenset(
        {
            "OpenTelemetryMiddleware",
            "instrument_runner",
        }
    ),
    "trunner.prometheus": frozenset(
        {
            "RunnerCollector",
            "collect",
        }
    ),
    "trunner.admin": frozenset(
        {
            "Admin",
            "CronEntry",
            "DeadLetter",
            "DelayedTask",
            "GroupInfo",
            "GroupStats",
            "InstanceInfo",
            "QuarantineRecord",
            "ReplayResult",
            "TaskTiming",
            "as_dict",
            "open_admin",
        }
    ),
    "trunner.aio": frozenset({"Client"}),
    "trunner.sync": frozenset(
        {
            "Admin",
            "Client",
            "DispatchOptions",
            "TaskHandle",
        }
    ),
    "trunner.serve": frozenset(
        {
            "WorkerSettings",
            "load_settings",
            "run_worker",
        }
    ),
    "trunner.dashboard": frozenset(
        {
            "create_app",
            "serve_dashboard",
        }
    ),
}

#: Names the docs write with a module path, outside any ``__all__`` above.
DOCUMENTED = (
    "trunner.cli.main",  # the `trunner` script's entry point (pyproject.toml)
    "trunner.pytest_plugin.pytest_addoption",  # the pytest11 entry point's module
    "trunner.message.DEFAULT_UNIQUE_FOR",  # docs/redis-layout.md
    "trunner.keys.UniqueLock",  # docs/redis-layout.md
    "trunner.runner.Runner",  # the task name in docs/testing.md's leak report
)

#: Names that still resolve, with a DeprecationWarning, until the release they name.
DEPRECATED = ("trunner.Stats",)


@pytest.mark.parametrize("module_name", sorted(PUBLIC))
def test_a_public_module_exports_the_same_names(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert set(module.__all__) == PUBLIC[module_name]
    assert len(module.__all__) == len(PUBLIC[module_name]), "a name listed twice"


@pytest.mark.parametrize(
    "dotted", sorted(f"{m}.{n}" for m, names in PUBLIC.items() for n in names) + list(DOCUMENTED)
)
def test_a_public_name_resolves(dotted: str) -> None:
    module_name, _, name = dotted.rpartition(".")
    module = importlib.import_module(module_name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        getattr(module, name)


@pytest.mark.parametrize("dotted", DEPRECATED)
def test_a_deprecated_name_resolves_with_a_warning(dotted: str) -> None:
    module_name, _, name = dotted.rpartition(".")
    module = importlib.import_module(module_name)
    with pytest.warns(DeprecationWarning, match=f"{dotted} is deprecated"):
        getattr(module, name)
