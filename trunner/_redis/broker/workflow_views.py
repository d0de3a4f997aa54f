"""Looking at a group's workflows without changing them: the index of the live ones, and
what one workflow's keys hold (design/workflows.md §5). Plain commands in one pipeline
each, no script: what they read is checked by the callers (``_producer/workflow_views``),
which make it the values of ``trunner.admin``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import attrs

from ..transports.resp import as_str
from ._base import BrokerBase

__all__ = ["MarksLook", "WorkflowViews"]

#: The fields of ``wf:<W>`` a workflow's status is made of (not its output spec, which may
#: name 100 000 nodes, nor its trace).
STATUS_FIELDS: Final = (
    "state", "n", "live", "ok", "failures", "cancelled", "created", "finished", "name", "cancel",
)  # fmt: skip


@attrs.frozen
class MarksLook:
    """A page of one workflow's marks and what they are read with, in one pipeline, in
    this order: its state hash before (``before``), the marks' bytes of the page, its
    failures, its state hash after (``after``). A script may run between two of them:
    ``before`` bounds what had happened when the marks were read, ``after`` what had not
    (its counts only grow)."""

    before: dict[str, str]
    marks: bytes
    failures: dict[str, str]
    after: dict[str, str]


class WorkflowViews(BrokerBase):
    """Read-only queries of the group's workflows."""

    async def workflow_index_size(self) -> tuple[int, str | None]:
        """How many workflows the group's index holds (the live ones), and the score
        (dispatch time, ms, as Redis holds it) of the oldest; one round trip."""
        count, oldest = await self.transport.pipeline(
            [
                ("ZCARD", self.keys.workflows),
                ("ZRANGE", self.keys.workflows, 0, 0, "WITHSCORES"),
            ]
        )
        _raise_failed(count, oldest)
        return int(count), as_str(oldest[1]) if oldest else None

    async def workflow_index(self, offset: int, count: int) -> list[tuple[str, str]]:
        """Up to ``count`` members of the index from position ``offset``, oldest first:
        (workflow id, its score as Redis holds it)."""
        if count <= 0:
            return []
        flat = await self.transport.execute(
            "ZRANGE", self.keys.workflows, offset, offset + count - 1, "WITHSCORES"
        )
        flat = flat or []
        return [(as_str(flat[i]), as_str(flat[i + 1])) for i in range(0, len(flat) - 1, 2)]

    async def workflow_fields(self, workflow_ids: Sequence[str]) -> list[dict[str, str] | str]:
        """The status fields of each workflow of ``workflow_ids`` (``{}`` when gone), or
        why they cannot be read (an id no workflow can have, a key of another type)."""
        commands: list[tuple[Any, ...]] = []
        problems: dict[int, str] = {}
        for n, workflow_id in enumerate(workflow_ids):
            try:
                commands.append(("HMGET", self.keys._workflow(workflow_id).wf, *STATUS_FIELDS))
            except ValueError as exc:
                problems[n] = str(exc)
        replies = iter(await self.transport.pipeline(commands) if commands else [])
        found: list[dict[str, str] | str] = []
        for n in range(len(workflow_ids)):
            if n in problems:
                found.append(problems[n])
                continue
            reply = next(replies)
            if isinstance(reply, Exception):
                found.append(f"{type(reply).__name__}: {reply}")
                continue
            found.append(_fields(reply))
        return found

    async def workflow_marks(self, workflow_id: str, first: int, last: int) -> MarksLook:
        """Workflow ``workflow_id``'s marks from byte ``first`` to byte ``last`` (both
        included; none when ``last < first``), with its state and failures (see
        :class:`MarksLook`). ValueError for an id no workflow can have."""
        flow = self.keys._workflow(workflow_id)
        status = ("HMGET", flow.wf, *STATUS_FIELDS)
        marks = ("GETRANGE", flow.marks, first, last) if last >= first else ("EXISTS", flow.marks)
        replies = await self.transport.pipeline([status, marks, ("HGETALL", flow.err), status])
        _raise_failed(*replies)
        before, got, errors, after = replies
        flat = errors or []
        return MarksLook(
            _fields(before),
            bytes(got) if isinstance(got, bytes | bytearray) else b"",
            {as_str(flat[i]): as_str(flat[i + 1]) for i in range(0, len(flat) - 1, 2)},
            _fields(after),
        )


def _fields(reply: Any) -> dict[str, str]:
    """An ``HMGET`` of :data:`STATUS_FIELDS` as the fields it found."""
    values = reply or ()
    pairs = zip(STATUS_FIELDS, values, strict=False)
    return {name: as_str(v) for name, v in pairs if v is not None}


def _raise_failed(*replies: Any) -> None:
    """Raise the first error among a pipeline's ``replies`` (a key of another type)."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
