"""Workflows in Redis: a workflow's start, a look at its state, and what the scripts that
end an attempt are told to end a step of one in the same call (design/workflows.md §3).
Workflows are being built: only the scripts' tests call these yet."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import attrs

from ..._wire.marks import MARK_LIFETIME
from ..._wire.workflow import workflow_mark
from ..transports.base import Arg
from ..transports.resp import as_str
from ._base import BrokerBase, chunks

__all__ = ["StepEnd", "StepKind", "WorkflowLook", "WorkflowSweep", "Workflows"]

#: How a step ended, as the scripts record it.
StepKind = Literal["ok", "failed", "cancelled", "expired"]
#: How long a cancel mark of a failing or cancelled workflow holds (ms).
_MARK_MS: Final = int(MARK_LIFETIME * 1000)
#: The most steps started and not ended one call of ``cancel_steps.lua`` looks at.
SWEEP_PAGE: Final = 200


@attrs.frozen
class StepEnd:
    """The end of one step, recorded by the script that ends its attempt, only while the
    attempt owns its delivery: node ``node`` of ``workflow`` ended ``kind``, with its
    successors ``next`` (``StepRef.next``), its ``result`` as its codec wrote it (``b""``
    when not kept) and its failure as JSON (``""`` unless it failed)."""

    workflow: str
    node: int
    kind: StepKind
    next: str = ""
    result: bytes = b""
    error: str = ""


class Workflows(BrokerBase):
    """A workflow's start, its state, and the step sections of the ending scripts."""

    #: The largest message a runner reads (``max_payload_bytes`` + the group's growth); a
    #: step whose message would be larger fails when it would start. 0: no check.
    max_message_bytes: int = 0

    def _flow_context(self) -> list[Arg]:
        """The arguments every script ending a step takes once: the cancel and done
        channels, how long a cancel mark holds, the largest message a runner reads."""
        keys = self.keys
        return [keys.cancel_channel, keys.done, _MARK_MS, self.max_message_bytes]

    def _flow_keys(self) -> list[str]:
        """The keys every script ending a step takes first: the default lane's stream, the
        group's index of workflows, the quarantine stream, the cancel marks."""
        keys = self.keys
        return [keys.stream, keys.workflows, keys.quarantine, keys.cancelled]

    def _steps_section(self, ends: Sequence[tuple[int, StepEnd]]) -> tuple[list[str], list[Arg]]:
        """``ack.lua``'s workflow section for ``ends`` (the 1-based index of each one's
        entry in the call, and the end): its keys and its arguments."""
        by_flow: dict[str, list[tuple[int, StepEnd]]] = {}
        for index, end in ends:
            by_flow.setdefault(end.workflow, []).append((index, end))
        keys, args = self._flow_keys(), [len(by_flow), *self._flow_context()]
        for workflow, its in by_flow.items():
            keys += self.keys._workflow(workflow).names()
            args += [workflow, len(its)]
            for index, end in its:
                args += [index, end.node, end.kind, end.next, end.result, end.error]
        return keys, args

    def _step_tail(self, end: StepEnd, *, with_next: bool) -> tuple[list[str], list[Arg]]:
        """The workflow keys and trailing arguments of ``dead_letter.lua`` (``with_next``)
        and ``retry.lua`` for the step ``end``."""
        keys = [*self._flow_keys(), *self.keys._workflow(end.workflow).names()]
        if with_next:
            return keys, [end.workflow, end.node, end.next, end.error, *self._flow_context()]
        return keys, [end.workflow, end.node, *self._flow_context()]

    def _whole_keys(self, workflow_id: str) -> list[str]:
        """The keys of the scripts that act on a whole workflow (its start, its cancel):
        its five, the group's index of workflows, the default lane's stream, the
        where-map, the cancel marks, the quarantine stream, the queue's groups."""
        keys = self.keys
        return [
            *keys._workflow(workflow_id).names(),
            keys.workflows,
            keys.stream,
            keys.where,
            keys.cancelled,
            keys.quarantine,
            keys.groups,
        ]

    async def start_workflow(
        self,
        workflow_id: str,
        nodes: int,
        plan: Sequence[tuple[str, Arg]],
        roots: Sequence[tuple[int, bytes]],
        *,
        fail_fast: bool = True,
        keep_ms: int,
        max_life_ms: int,
        name: str = "",
        trace: str = "",
        out: str = "",
    ) -> str:
        """Write workflow ``workflow_id`` of ``nodes`` nodes: its state, its ``plan``
        (field, value pairs: ``t:<i>`` templates, ``w:<i>`` inputs awaited, ``r:<i>``
        readers), then its ``roots`` (node, message), in chunks of at most 1000, every plan
        chunk first. ``"ok"``; ``"exists"`` when the id is taken (nothing written); the
        state of a workflow cancelled while its roots were being added (the rest is not
        added)."""
        calls: list[tuple[Sequence[tuple[str, Arg]], Sequence[tuple[int, bytes]]]] = [
            (chunk, ()) for chunk in chunks(plan)
        ] + [((), chunk) for chunk in chunks(roots)]
        calls = calls or [((), ())]
        for number, (fields, added) in enumerate(calls):
            args: list[Arg] = [
                workflow_id,
                int(number == 0),
                int(number == len(calls) - 1),
                nodes,
                int(fail_fast),
                keep_ms,
                max_life_ms,
                name,
                trace,
                out,
                workflow_mark(self.keys.group, workflow_id),
                *self._flow_context(),
                len(fields),
                *(x for pair in fields for x in pair),
                len(added),
                *(x for pair in added for x in pair),
            ]
            reply = as_str(
                await self._script("workflow_start", self._whole_keys(workflow_id), args)
            )
            if reply != "ok":
                return reply
        return "ok"

    async def cancel_workflow(
        self, workflow_id: str, *, abandoned_for_ms: int | None = None
    ) -> str:
        """Cancel workflow ``workflow_id`` (``cancel_workflow.lua``): its state after
        (``"cancelling"``, ``"failing"``, a settled state, or ``"gone"``). With
        ``abandoned_for_ms`` only if its producer abandoned it: still adding its first
        steps, dispatched at least that long ago by Redis's clock (else its state, nothing
        written)."""
        args = [workflow_id, *self._flow_context()]
        if abandoned_for_ms is not None:
            args.append(abandoned_for_ms)
        reply = await self._script("cancel_workflow", self._whole_keys(workflow_id), args)
        return as_str(reply)

    async def workflow_index_page(
        self, cursor: int, count: int
    ) -> tuple[int, list[tuple[bytes, float]]]:
        """One page of ``ZSCAN`` of the group's index of live workflows: (next cursor, 0
        when the scan is complete; (member as stored, its time of dispatch in ms))."""
        reply = await self.transport.execute("ZSCAN", self.keys.workflows, cursor, "COUNT", count)
        flat = reply[1] or []
        return int(reply[0]), [
            (bytes(flat[i]), float(flat[i + 1])) for i in range(0, len(flat) - 1, 2)
        ]

    async def tidy_workflows(self, workflow_ids: Sequence[str], abandoned_for_ms: int) -> list[str]:
        """Look at the workflows ``workflow_ids`` of the index (``tidy_workflows.lua``):
        per workflow ``"live"``, ``"abandoned"`` (still adding its first steps, dispatched
        at least ``abandoned_for_ms`` ago by Redis's clock), ``"gone"`` (out of the
        index), or why its keys are not trunner's (out of the index)."""
        keys = [self.keys.workflows]
        for workflow_id in workflow_ids:
            keys += self.keys._workflow(workflow_id).names()
        reply = await self._script("tidy_workflows", keys, [abandoned_for_ms, *workflow_ids])
        return [as_str(verdict) for verdict in reply]

    async def forget_index_entry(self, member: bytes) -> bool:
        """Drop ``member`` (as stored) from the group's index of live workflows."""
        return bool(await self.transport.execute("ZREM", self.keys.workflows, member))

    async def sweep_workflow(self, workflow_id: str, *, page: int = SWEEP_PAGE) -> WorkflowSweep:
        """Take out every step of cancelled (or failing) workflow ``workflow_id`` that waits
        where no runner holds it (``cancel_steps.lua``, one call per ``page`` steps started
        and not ended): each ends ``cancelled``. What it did, and the workflow's state
        after; nothing for a workflow that runs (cancel it first). A call that fails
        leaves the steps not looked at to the workflow's cancel mark."""
        keys = self.keys
        script_keys = [
            *self._whole_keys(workflow_id),
            keys.delayed,
            keys.delayed_messages,
            keys.delayed_unique,
            keys.retries,
            keys.retry_messages,
            keys.concurrency_waiters,
        ]
        fixed: list[Arg] = [
            self.group,
            keys.concurrency_waiting(""),
            keys.task(""),
            keys.unique(""),
        ]
        node, removed, left = 0, 0, 0
        while True:
            args = [workflow_id, *self._flow_context(), node, page, *fixed]
            reply = await self._script("cancel_steps", script_keys, args)
            state, after, taken, kept = as_str(reply[0]), int(reply[1]), reply[2], reply[3]
            removed, left = removed + int(taken), left + int(kept)
            if after < 0 or after <= node:
                return WorkflowSweep(state, removed, left)
            node = after

    async def workflow_look(self, workflow_id: str) -> WorkflowLook:
        """What Redis holds of workflow ``workflow_id`` now (empty when it is gone)."""
        flow = self.keys._workflow(workflow_id)
        replies = await self.transport.pipeline(
            [
                ("HGETALL", flow.wf),
                ("HGETALL", flow.res),
                ("HGETALL", flow.err),
            ]
        )
        return WorkflowLook(  # a field that is no step's index is none trunner wrote
            _pairs(replies[0]),
            {int(k): bytes(v) for k, v in _pairs(replies[1], raw=True).items() if _index(k)},
            {int(k): v for k, v in _pairs(replies[2]).items() if _index(k)},
        )


@attrs.frozen
class WorkflowSweep:
    """What a cancelled workflow's sweep did: its ``state`` after it, how many steps it
    took out (``removed``: they never run) and how many it left to the workflow's cancel
    mark (``left``: running, fetched, or found nowhere)."""

    state: str
    removed: int
    left: int


@attrs.frozen
class WorkflowLook:
    """A workflow as Redis holds it: its state hash, the results kept, the failures."""

    fields: Mapping[str, str]
    results: Mapping[int, bytes]
    failures: Mapping[int, str]


def _index(field: str) -> bool:
    """Whether ``field`` is a step's index as the scripts write it (ASCII digits)."""
    return field.isascii() and field.isdigit() and len(field) <= 9


def _pairs(reply: Any, *, raw: bool = False) -> dict[str, Any]:
    """An ``HGETALL`` reply (a flat list, as the transports give it) as a dict."""
    items = reply or ()
    return {
        as_str(items[i]): (items[i + 1] if raw else as_str(items[i + 1]))
        for i in range(0, len(items), 2)
    }
