"""The Lua scripts, one per state transition, loaded from ``lua/*.lua``."""

from __future__ import annotations

import hashlib
import pkgutil

import attrs

__all__ = ["SCRIPTS", "Script", "fenced_script", "make_script"]


@attrs.frozen
class Script:
    name: str
    source: str
    sha: str


def _read(name: str) -> str:
    data = pkgutil.get_data(__package__, f"lua/{name}.lua")  # zip-safe, and light to import
    if data is None:
        raise FileNotFoundError(f"trunner's script lua/{name}.lua is missing")
    return data.decode("utf-8")


def make_script(name: str, source: str) -> Script:
    return Script(name, source, hashlib.sha1(source.encode("utf-8")).hexdigest())


def _load(name: str) -> Script:
    return make_script(name, _read(name))


def _with_delivered(name: str) -> str:
    """``name``'s source behind ``lua/delivered.lua``, which defines ``group_info`` and
    ``delivered_to``."""
    return _read("delivered") + "\n" + _read(name)


def _typed(name: str) -> str:
    """``name``'s source behind ``lua/key_types.lua``, which defines ``wrong_type``."""
    return _read("key_types") + "\n" + _read(name)


def _locking(name: str, *, typed: bool = False) -> str:
    """``name``'s source behind ``lua/locks.lua``, which defines ``take_lock`` (and behind
    ``lua/key_types.lua`` too when ``typed``)."""
    source = _read("locks") + "\n" + _read(name)
    return _read("key_types") + "\n" + source if typed else source


def _laned(source: str) -> str:
    """``source`` behind ``lua/lanes.lua``, which defines ``lane_entry``,
    ``checked_entry`` and ``message_lane``."""
    return _read("lanes") + "\n" + source


def _limited(name: str, *, typed: bool = False) -> str:
    """``name``'s source behind ``lua/limits.lua``, which defines ``release_slot`` and
    ``grant_waiters`` (and behind ``lua/key_types.lua`` too when ``typed``), behind
    ``lua/lanes.lua``."""
    source = _laned(_read("limits")) + "\n" + _read(name)
    return _read("key_types") + "\n" + source if typed else source


def _attempt(source: str) -> str:
    """``source`` behind ``lua/deliveries.lua``, which defines ``owns_delivery``: a script
    that ends an attempt writes only while the attempt's delivery is the pending one."""
    return _read("deliveries") + "\n" + source


def _numbered(source: str) -> str:
    """``source`` behind ``lua/numbers.lua``, which defines ``checked_number``: every number
    a script reads from stored data goes through it."""
    return _read("numbers") + "\n" + source


def _flowing(name: str, *, limited: bool = False) -> str:
    """``name``'s source behind ``lua/key_types.lua``, ``lua/numbers.lua``,
    ``lua/lanes.lua``, ``lua/locks.lua`` (a unique step takes its lock as it starts) and
    ``lua/workflows.lua``, which defines ``wf_step_end`` and the rest of a workflow's
    transitions (and behind ``lua/limits.lua`` when ``limited``)."""
    parts = ["key_types", "numbers", "lanes", "locks", "workflows"]
    parts += ["limits"] if limited else []
    return "\n".join(_read(part) for part in [*parts, name])


def _cancelling(name: str, *, flowing: bool = False) -> str:
    """``name``'s source behind ``lua/waiting.lua``, ``lua/lanes.lua``,
    ``lua/delivered.lua`` and ``lua/cancel_core.lua``, which defines ``cancel_take``: one way
    a task leaves wherever it waits, for one task or a workflow's steps (and behind
    ``lua/key_types.lua``, ``lua/numbers.lua`` and ``lua/workflows.lua`` when ``flowing``)."""
    parts = ["waiting", "lanes", "delivered", "cancel_core"]
    parts += ["key_types", "numbers", "workflows"] if flowing else []
    return "\n".join(_read(part) for part in [*parts, name])


def fenced_script(name: str, body: str) -> Script:
    """``body`` behind the fence check (``lua/fence.lua``): it runs only for the leader.

    The body's own keys start at KEYS[2] and its arguments at ARGV[2].
    """
    return make_script(name, _read("fence") + "\n" + body)


class _Scripts:
    def __init__(self) -> None:
        self.enqueue_many = _load("enqueue_many")
        self.enqueue_unique = make_script("enqueue_unique", _locking("enqueue_unique"))
        self.ack = make_script("ack", _attempt(_flowing("ack", limited=True)))
        self.ensure_group = _load("ensure_group")
        self.forget_groups = _load("forget_groups")
        self.queue_length = make_script("queue_length", _with_delivered("queue_length"))
        self.retry = make_script("retry", _attempt(_flowing("retry", limited=True)))
        self.dead_letter = make_script(
            "dead_letter", _attempt(_flowing("dead_letter", limited=True))
        )
        self.workflow_start = make_script("workflow_start", _flowing("workflow_start"))
        self.cancel_workflow = make_script("cancel_workflow", _flowing("cancel_workflow"))
        self.tidy_workflows = make_script("tidy_workflows", _flowing("tidy_workflows"))
        self.admit = make_script("admit", _numbered(_limited("admit", typed=True)))
        self.reconcile_slots = make_script(
            "reconcile_slots", _read("delivered") + "\n" + _limited("reconcile_slots")
        )
        self.schedule = make_script("schedule", _typed("schedule"))
        self.cancel_delayed = _load("cancel_delayed")
        self.move_due = fenced_script("move_due", _laned(_typed("move_due")))
        self.move_unique = fenced_script("move_unique", _laned(_locking("move_unique", typed=True)))
        self.cron_fire = fenced_script(
            "cron_fire", _numbered(_laned(_locking("cron_fire", typed=True)))
        )
        self.reclaim = _load("reclaim")
        self.heartbeat = _load("heartbeat")
        self.release = _load("release")
        self.mark_given_up = make_script("mark_given_up", _attempt(_read("mark_given_up")))
        self.delete_consumer = _load("delete_consumer")
        self.replay_dead = make_script("replay_dead", _laned(_locking("replay_dead", typed=True)))
        self.report = make_script("report", _numbered(_read("report")))
        self.deregister = _load("deregister")
        self.metrics_take = fenced_script("metrics_take", _read("metrics_take"))
        self.publish_capacity = fenced_script(
            "publish_capacity", _numbered(_read("publish_capacity"))
        )
        self.trim = fenced_script("trim", _numbered(_read("trim")))
        self.set_aside_keys = _load("set_aside_keys")
        self.group_floor = make_script("group_floor", _numbered(_with_delivered("group_floor")))
        self.task_started = make_script("task_started", _attempt(_numbered(_read("task_started"))))
        self.task_status = make_script(
            "task_status", _read("waiting") + "\n" + _laned(_with_delivered("task_status"))
        )
        self.cancel_task = make_script("cancel_task", _cancelling("cancel_task"))
        self.cancel_steps = make_script("cancel_steps", _cancelling("cancel_steps", flowing=True))
        self.task_progress = make_script("task_progress", _attempt(_read("task_progress")))
        self.pause = _load("pause")
        self.resume = _load("resume")
        self.forget_stale = make_script("forget_stale", _numbered(_laned(_read("forget_stale"))))
        self.set_aside_delayed = fenced_script("set_aside_delayed", _read("set_aside_delayed"))
        self.lease_acquire = _load("lease_acquire")
        self.lease_renew = _load("lease_renew")
        self.lease_release = _load("lease_release")

    def all(self) -> list[Script]:
        return [s for s in vars(self).values() if isinstance(s, Script)]


SCRIPTS = _Scripts()
