"""The Lua scripts, one per state transition, loaded from ``lua/*.lua``."""

from __future__ import annotations

import hashlib
from importlib import resources

import attrs

__all__ = ["SCRIPTS", "Script"]


@attrs.frozen
class Script:
    name: str
    source: str
    sha: str


def _load(name: str) -> Script:
    source = resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")
    return Script(name, source, hashlib.sha1(source.encode("utf-8")).hexdigest())


class _Scripts:
    def __init__(self) -> None:
        self.enqueue_many = _load("enqueue_many")
        self.ack = _load("ack")
        self.retry = _load("retry")
        self.dead_letter = _load("dead_letter")
        self.move_due = _load("move_due")
        self.reclaim = _load("reclaim")
        self.heartbeat = _load("heartbeat")
        self.release = _load("release")
        self.delete_consumer = _load("delete_consumer")

    def all(self) -> list[Script]:
        return [s for s in vars(self).values() if isinstance(s, Script)]


SCRIPTS = _Scripts()
