"""Every public name that resolves today still resolves, from where users import it.

The layout of the package is changing (implementation modules move into private
sub-packages); the names users type must not move with them. This is a snapshot: each
public module's ``__all__`` exactly, and the few names the docs spell with a module path.
A name leaves only deliberately: through ``deprecate_attributes`` (``trunner/_deprecate.py``:
a warning for one release, checked in ``test_deprecated.py``), then by editing this file at
the release that removes it.
"""

from __future__ import annotations

import importlib
import inspect
import typing
import warnings

import pytest

#: The ``__all__`` of each public module, as released.
PUBLIC: dict[str, frozenset[str]] = {
    "trunner": frozenset(
        {
            "BackendError",
            "CancelOutcome",
            "Client",
            "CronSchedule",
            "FailedTaskHandler",
            "GiveUp",
            "Graph",
            "InvalidPayload",
            "LongQueueHook",
            "MaxRetryExceeded",
            "Middleware",
            "Node",
            "PayloadTooLarge",
            "Pipeline",
            "RedisHandle",
            "RedisUnavailable",
            "RemoteError",
            "ResultNotFound",
            "ResultTimeout",
            "Runner",
            "RunnerConfig",
            "RunnerState",
            "RunnerStatistics",
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
            "TrunnerError",
            "WorkerSettings",
            "WorkflowCancelled",
            "WorkflowFailed",
            "WorkflowHandle",
            "__version__",
            "admin",
            "chain",
            "chord",
            "current_message",
            "current_runner",
            "election",
            "errors",
            "graph",
            "group",
            "keys",
            "middleware",
            "open_client",
            "open_redis",
            "open_runner",
            "redact_url",
            "report_progress",
            "step",
            "workflows",
        }
    ),
    "trunner.errors": frozenset(
        {
            "BackendError",
            "BadData",
            "CommandNotAllowed",
            "Crashed",
            "ElectorCrashed",
            "GiveUp",
            "InvalidArgument",
            "InvalidHeaders",
            "InvalidMessage",
            "InvalidPayload",
            "InvalidResult",
            "LeadershipLost",
            "MaxRetryExceeded",
            "MiddlewareError",
            "PayloadTooLarge",
            "RedisCommandError",
            "RedisUnavailable",
            "RemoteFailure",
            "ReservationLost",
            "ResultExpired",
            "ResultNotFound",
            "ResultNotKept",
            "ResultTimeout",
            "RunnerAlreadyStarted",
            "RunnerCrashed",
            "RunnerNotRunning",
            "SelfWait",
            "TaskAlreadyDispatched",
            "TaskCancelled",
            "TaskExpired",
            "TaskFailed",
            "TaskNotFound",
            "TaskTimeout",
            "TrunnerError",
            "WorkerProcessDied",
            "StepFailed",
            "WorkflowCancelled",
            "WorkflowFailed",
        }
    ),
    "trunner.middleware": frozenset(
        {
            "AttemptInfo",
            "AttemptOutcome",
            "DispatchInfo",
            "Middleware",
            "WorkflowInfo",
        }
    ),
    "trunner.keys": frozenset(
        {
            "Keys",
            "UniqueLock",
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
            "call_workflow",
            "capture_errors",
            "clean_keys",
            "forget_memory_server",
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
            "FoundGroup",
            "GroupInfo",
            "GroupStats",
            "GroupsFound",
            "InstanceInfo",
            "LiveWorkflow",
            "QuarantineRecord",
            "ReplayResult",
            "StepState",
            "TaskTiming",
            "WorkflowSteps",
            "as_dict",
            "discover_groups",
            "open_admin",
        }
    ),
    "trunner.aio": frozenset({"Client"}),
    "trunner.workflows": frozenset(
        {"MAX_NODES", "Graph", "Node", "Step", "chain", "chord", "graph", "group", "step"}
    ),
    "trunner.sync": frozenset(
        {
            "Admin",
            "Client",
            "DispatchOptions",
            "TaskHandle",
            "WorkflowHandle",
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
    "trunner.runner.Runner",  # the task name in docs/testing.md's leak report
)

#: Names that still resolve, with a DeprecationWarning, until the release they name: the
#: names that left ``trunner``'s ``__all__`` for a namespace (``test_deprecated.py`` checks
#: each), and ``Stats``, renamed.
DEPRECATED = tuple(
    f"trunner.{name}"
    for name in (
        "AttemptInfo",
        "AttemptOutcome",
        "BadData",
        "CommandNotAllowed",
        "Crashed",
        "CronEntry",
        "DeadLetter",
        "DelayedTask",
        "DispatchInfo",
        "ElectorCrashed",
        "FoundGroup",
        "GroupInfo",
        "GroupStats",
        "GroupsFound",
        "InstanceInfo",
        "InvalidArgument",
        "InvalidHeaders",
        "InvalidMessage",
        "InvalidResult",
        "Keys",
        "LeadershipLost",
        "MiddlewareError",
        "QuarantineRecord",
        "RedisCommandError",
        "RemoteFailure",
        "ReplayResult",
        "ReservationLost",
        "ResultExpired",
        "ResultNotKept",
        "RunnerAlreadyStarted",
        "RunnerCrashed",
        "RunnerNotRunning",
        "SelfWait",
        "Stats",
        "TaskTiming",
        "discover_groups",
        "forget_memory_server",
    )
)
#: Names that left ``trunner``'s ``__all__`` with no deprecation: never released.
REMOVED = tuple(f"trunner.{name}" for name in ("Admin", "open_admin"))


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


@pytest.mark.parametrize("dotted", REMOVED)
def test_a_removed_name_is_gone(dotted: str) -> None:
    module_name, _, name = dotted.rpartition(".")
    with pytest.raises(AttributeError, match=f"no attribute {name!r}"):
        getattr(importlib.import_module(module_name), name)


def _defined_in_trunner(dotted: str) -> bool:
    module_name, _, name = dotted.rpartition(".")
    value = getattr(importlib.import_module(module_name), name)
    return (inspect.isclass(value) or inspect.isfunction(value)) and value.__module__.startswith(
        "trunner"
    )


@pytest.mark.parametrize(
    "dotted",
    [
        d
        for d in sorted(f"{m}.{n}" for m, names in PUBLIC.items() for n in names)
        if _defined_in_trunner(d)
    ],
)
def test_a_public_object_names_a_public_home(dotted: str) -> None:
    """Its ``__module__`` (what tracebacks, reprs and pickle use) is a public module that
    holds it, never a private one; the annotations of a class renamed so still resolve."""
    module_name, _, name = dotted.rpartition(".")
    value = getattr(importlib.import_module(module_name), name)
    home = importlib.import_module(value.__module__)
    assert not any(part.startswith("_") for part in home.__name__.split(".")), home.__name__
    assert getattr(home, value.__qualname__) is value
    if inspect.isclass(value) and inspect.getsourcefile(value) != inspect.getsourcefile(home):
        typing.get_type_hints(value)


def test_the_top_level_is_the_home_of_what_it_exports() -> None:
    import trunner  # noqa: PLC0415 - the package under test

    assert trunner.Task.__module__ == "trunner"  # defined in trunner._task
    assert trunner.WorkerSettings.__module__ == "trunner"  # trunner.serve exports it too
    assert trunner.current_message.__module__ == "trunner"
    assert trunner.admin.DeadLetter.__module__ == "trunner.admin"
    assert trunner.keys.Keys.__module__ == "trunner.keys"
    assert trunner.TaskFailed.__module__ == "trunner.errors"  # defined in a public module
