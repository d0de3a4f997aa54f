"""What the dashboard can do to a group: each action is one call of trunner's public API
(the client's admin's, or the client's for a task or a cron tick), the same call the CLI
makes, named, labelled and with its confirmation question.

Adding an action is one entry of :data:`ACTIONS`: the POST route runs it, and an action
on the whole group (``on_group``) gets its button in the group page's header by itself; an
action whose call the client lacks is left out (``available``). Pausing a group
(``client.admin.pause()``/``resume()``) is two such entries.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import attrs

from trunner import Client

__all__ = ["ACTIONS", "Action", "Form"]

#: The fields of a submitted form: name -> every value given (checkboxes repeat).
Form = dict[str, list[str]]


@attrs.frozen
class Action:
    """One thing the dashboard may do, through the client's public API."""

    name: str
    """Its URL segment: ``POST <group>/action/<name>``."""
    label: str
    """Its button's text."""
    confirm: str
    """The question asked before it runs (``{}`` is replaced by what it acts on)."""
    run: Callable[[Client, Form], Awaitable[str]]
    """Do it; return what was done, shown on the page."""
    available: Callable[[Client], bool] = lambda _client: True
    """Whether this client can do it (an API that a trunner version lacks)."""
    on_group: bool = False
    """An action on the whole group, without a form field: its button is in the header."""


def _one(form: Form, name: str) -> str:
    values = form.get(name) or [""]
    if not values[0]:
        raise ValueError(f"the form has no {name!r}")
    return values[0]


def _ids(form: Form) -> Sequence[str]:
    """One dead letter (``one``, a row's button) or the rows selected (``ids``)."""
    ids = form.get("one") or form.get("ids") or []
    if not ids:
        raise ValueError("no dead letter selected")
    return ids


async def _replay(client: Client, form: Form) -> str:
    result = await client.admin.replay_dead_letters(_ids(form))
    return _replayed(len(result.new_ids), result.skipped)


async def _replay_task(client: Client, form: Form) -> str:
    task = _one(form, "task")
    result = await client.admin.replay_dead_letters(task=task)
    return f"task {task}: " + _replayed(len(result.new_ids), result.skipped)


def _replayed(count: int, skipped: dict[str, str]) -> str:
    said = f"replayed {count} dead letter{'s' * (count != 1)}"
    if skipped:
        first, why = next(iter(skipped.items()))
        said += f"; {len(skipped)} not replayed ({first}: {why})"
    return said


async def _delete(client: Client, form: Form) -> str:
    return f"deleted {await client.admin.delete_dead_letters(_ids(form))} dead letters"


async def _delete_task(client: Client, form: Form) -> str:
    task = _one(form, "task")
    return (
        f"deleted {await client.admin.delete_dead_letters(task=task)} dead letters of task {task}"
    )


async def _cancel(client: Client, form: Form) -> str:
    task_id = _one(form, "id")
    outcome = await client.handle(task_id).cancel()
    return f"cancel {task_id}: {outcome.value}"


async def _cancel_workflow(client: Client, form: Form) -> str:
    workflow_id = _one(form, "id")
    state = await client.workflow(workflow_id).cancel()
    return f"cancel workflow {workflow_id}: {state.value}"


async def _fire_cron(client: Client, form: Form) -> str:
    name = _one(form, "name")
    return f"fired cron {name}: task {await client.fire_cron(name)}"


async def _pause(client: Client, _form: Form) -> str:
    return "paused" if await client.admin.pause() else "was paused already"


async def _resume(client: Client, _form: Form) -> str:
    return "resumed" if await client.admin.resume() else "was not paused"


ACTIONS: dict[str, Action] = {
    a.name: a
    for a in (
        Action("replay-dead", "Replay", "Replay {} as a fresh first attempt?", _replay),
        Action("delete-dead", "Delete", "Delete {} for good?", _delete),
        Action(
            "replay-dead-task",
            "Replay all of task",
            "Replay every dead letter of task {}?",
            _replay_task,
        ),
        Action(
            "delete-dead-task",
            "Delete all of task",
            "Delete every dead letter of task {} for good?",
            _delete_task,
        ),
        Action("cancel", "Cancel", "Cancel task {}?", _cancel),
        Action(
            "cancel-workflow",
            "Cancel workflow",
            "Cancel workflow {}? No step starts after; its running steps are cancelled.",
            _cancel_workflow,
            available=lambda client: hasattr(client, "workflow"),
        ),
        Action("fire-cron", "Fire now", "Run cron schedule {} now, once?", _fire_cron),
        Action(
            "pause",
            "Pause",
            "Pause group {}? Its runners stop fetching; running tasks go on.",
            _pause,
            on_group=True,
        ),
        Action("resume", "Resume", "Resume group {}?", _resume, on_group=True),
    )
}
