"""What an elector tells its readers: ``Promoted``, ``Demoted`` and ``ElectionFailed``."""

from __future__ import annotations

import attrs
import trio

__all__ = ["Demoted", "ElectionEvent", "ElectionFailed", "Promoted"]


@attrs.frozen
class Promoted:
    """This elector became the leader."""

    fence: int
    """The fence number of this leadership."""
    at: float = attrs.field(factory=trio.current_time)
    """When, on the Trio clock."""


@attrs.frozen
class Demoted:
    """This elector stopped being the leader, and why."""

    reason: str
    """Why: for example ``"released"``, ``"the lease was taken over"``, ``"renewing
    failed: ..."``."""
    at: float = attrs.field(factory=trio.current_time)
    """When, on the Trio clock."""


@attrs.frozen
class ElectionFailed:
    """A Redis call of the election failed.

    An event that [``Elector.events``][trunner.election.Elector.events] yields, not an
    exception. Formerly ``ElectionError``, a deprecated alias until the next release.
    """

    error: BaseException
    """The error."""
    during: str
    """``"acquire"``, ``"renew"`` or ``"release"``."""
    at: float = attrs.field(factory=trio.current_time)
    """When, on the Trio clock."""


ElectionEvent = Promoted | Demoted | ElectionFailed
"""What [``Elector.events``][trunner.election.Elector.events] yields."""
