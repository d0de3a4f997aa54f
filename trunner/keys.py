"""The Redis key names of a group, for code that reads trunner's keys itself.

The key names are built in one place, ``trunner._wire.keys``; this module keeps the
public names at the path the docs give (see [Redis layout](redis-layout.md)).
"""

from __future__ import annotations

from ._public import fixup_module_metadata
from ._wire.keys import Keys, UniqueLock

__all__ = ["Keys", "UniqueLock"]

fixup_module_metadata(__name__, globals())
