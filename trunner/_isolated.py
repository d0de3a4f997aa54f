"""Run a coroutine inside a Trio task, in a context of its own, and learn when it first waits.

The pool runs many short jobs one after the other in one Trio task (a *worker*) instead of
spawning a Trio task per job: spawning is the largest per-message cost of a busy runner.
Two things a task of its own gave each job are kept:

- its own :mod:`contextvars` context: every step of the job runs inside a fresh copy of the
  worker's context, so a variable a task sets is never seen by the next task the worker
  runs (as with one Trio task per job);
- concurrency: the first time a job suspends (a checkpoint, a sleep, a Redis call), the
  worker is told before the suspension is passed on to Trio, so it can hand the jobs that
  are waiting to other workers instead of holding them behind a job that waits.

The coroutine's suspensions are passed to Trio unchanged and Trio's answers (values,
exceptions such as ``Cancelled``) are passed back unchanged, so to the job the worker is an
ordinary Trio task; ``trio.lowlevel.current_task()`` is the worker's.
"""

from __future__ import annotations

import contextvars
import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any

__all__ = ["run_isolated"]


@types.coroutine
def run_isolated(
    coro: Coroutine[Any, Any, None],
    context: contextvars.Context,
    on_first_wait: Callable[[], object],
) -> Generator[Any, Any, bool]:
    """Await ``coro``, each of its steps run in ``context``; call ``on_first_wait()`` once,
    when ``coro`` first suspends. Returns whether it suspended.

    ``on_first_wait`` runs in the caller's context, not in ``context``.
    """
    try:
        trap = context.run(coro.send, None)
    except StopIteration:
        return False
    on_first_wait()
    while True:
        try:
            answer = yield trap
        except BaseException as exc:  # noqa: BLE001 - Trio's answer is the job's to handle
            try:
                trap = context.run(coro.throw, exc)
            except StopIteration:
                return True
        else:
            try:
                trap = context.run(coro.send, answer)
            except StopIteration:
                return True
