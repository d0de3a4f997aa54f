"""Serving a runner as a worker process, as ``trunner worker module:target`` does: the
settings it loads (:class:`WorkerSettings`, :func:`load_settings`) and :func:`run_worker`.
The code is ``trunner._worker``; this module keeps the public names at their path.
"""

from __future__ import annotations

from ._public import fixup_module_metadata
from ._worker.serve import WorkerSettings, load_settings, run_worker

__all__ = ["WorkerSettings", "load_settings", "run_worker"]

fixup_module_metadata(__name__, globals())
