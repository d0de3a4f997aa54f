"""Leader election: a fenced Redis lease, on its own.

A runner uses it for its group ([``Runner.elector``][trunner.Runner.elector]), and you can
use it for any key, without a runner (see [Leader election](leader-election.md)).

Exactly one elector of a key holds the lease at a time. The lease is one Redis key whose
value is the holder's id, taken with ``SET key id PX ttl NX``. Only its holder renews it,
after ``ttl / 2`` plus a random jitter of up to ``jitter`` seconds, and only its holder
deletes it. Followers try to take it every ``wait`` seconds. When a holder releases the
lease, it publishes on the channel ``<key>:released``, and the followers try at once.

A holder steps down when it cannot renew in time: Redis errors, the lease was taken over,
or no reply came before the lease would have expired. It then waits ``wait`` seconds
before it runs for election again (after a takeover, a release announced meanwhile ends
the wait early). The lease of a crashed holder expires after ``ttl``.

Every promotion draws a *fence number* from a counter beside the lease (``INCR``). Fence
numbers strictly increase from one leader to the next. The counter's key is
``<key>:fence`` when ``key`` has a hash tag, and ``{<key>}:fence`` otherwise, so that it is
in the same hash slot as the lease. Leader-only writes run as fenced scripts that first
check, inside Redis, that the lease still holds this holder's id
([``Elector.eval_fenced``][trunner.election.Elector.eval_fenced]), so that a deposed leader
that has not noticed yet cannot act.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._deprecate import Deprecated, deprecate_attributes
from ._leader.election import Elector, open_elector
from ._leader.events import Demoted, ElectionEvent, ElectionFailed, Promoted
from ._public import fixup_module_metadata

__all__ = [
    "Demoted",
    "ElectionEvent",
    "ElectionFailed",
    "Elector",
    "Promoted",
    "open_elector",
]

fixup_module_metadata(__name__, globals())

if TYPE_CHECKING:
    ElectionError = ElectionFailed  # deprecated: use ElectionFailed

deprecate_attributes(
    __name__,
    {"ElectionError": Deprecated(ElectionFailed, "ElectionFailed (an event, not an exception)")},
)
