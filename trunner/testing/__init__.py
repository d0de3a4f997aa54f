"""Helpers for test suites of code that uses trunner.

* [``run_until_idle``][trunner.testing.run_until_idle] waits until a runner's group has
  nothing left to do;
* [``assert_clean_shutdown``][trunner.testing.assert_clean_shutdown] fails when trunner
  left a Trio task, a thread, a Redis connection or an unreleased message behind;
* [``capture_errors``][trunner.testing.capture_errors] turns what ``runner.errors()``
  yields into test failures;
* [``call_task``][trunner.testing.call_task] (``await tasks.call(name, payload)``) runs a
  task eagerly, without Redis;
* [``call_workflow``][trunner.testing.call_workflow] runs a workflow eagerly, its steps
  in one Trio nursery, without Redis;
* [``open_runner_factory``][trunner.testing.open_runner_factory] opens runners for a test
  and closes them at its end.

The pytest fixtures built on these live in ``trunner.pytest_plugin`` (enable them with
``pytest --trunner``; see [Testing with trunner](testing.md)). This package does not import
pytest: it works with any test runner.
"""

from .._public import fixup_module_metadata
from .._redis import forget_memory_server
from ._eager import call_task
from ._errors import CapturedErrors, capture_errors
from ._factory import RunnerFactory, clean_keys, open_runner_factory
from ._idle import IdleState, NotIdle, run_until_idle
from ._leaks import CleanShutdown, ShutdownLeak, assert_clean_shutdown
from ._workflows import call_workflow

__all__ = [
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
]

# Public classes and functions show as trunner.testing.X in tracebacks and reprs.
fixup_module_metadata(__name__, globals())
