"""The worker-pool capacity the leader decides and every instance applies.

With ``min_workers == max_workers`` (the default: both ``num_workers``) capacity is fixed.
Otherwise, each aggregation round, the leader asks for enough workers in total for the
predicted wait to meet ``long_queue_threshold``, spread over the live instances::

    per_instance = clamp(ceil(ceil(average * queue_length / threshold) / instances),
                         min_workers, max_workers)

(the average of the window, or of the last window in which tasks finished). An empty
queue gives ``min_workers``; a queue with no finished task to size it by gives
``max_workers``. Every instance applies the published value to its
pool's worker slots within a second; lowering it never cancels running tasks.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .config import RunnerConfig

if TYPE_CHECKING:
    from .metrics import Stats

__all__ = ["decide_capacity"]


def decide_capacity(stats: Stats, config: RunnerConfig) -> int | None:
    """Workers per instance for the next round; None when capacity is fixed."""
    low, high = config.worker_bounds
    threshold = config.long_queue_threshold
    if low == high or threshold is None:
        return None
    if stats.queue_length == 0:
        return low
    if stats.predicted_wait <= 0:
        return high  # a queue, and no finished task yet to size it by
    total = stats.predicted_wait * stats.total_capacity  # = average x queue_length
    needed = math.ceil(total / threshold)
    per_instance = math.ceil(needed / max(stats.instances, 1))
    return max(low, min(high, per_instance))
