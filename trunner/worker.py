"""Deprecated: this module is now :mod:`trunner.serve` (it goes in the next release).

"Worker" names one of the ``num_workers`` slots of an instance's concurrency; the module
that runs a worker process is ``trunner.serve``. ``WorkerSettings`` is also ``trunner``'s.
Nothing in trunner imports this module.
"""

from __future__ import annotations

import warnings

from .serve import WorkerSettings, load_settings, run_worker

__all__ = ["WorkerSettings", "load_settings", "run_worker"]

warnings.warn(
    "trunner.worker is deprecated, import from trunner.serve (WorkerSettings also from trunner)",
    DeprecationWarning,
    stacklevel=2,
)
