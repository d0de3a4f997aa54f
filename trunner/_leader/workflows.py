"""The leader's chores for workflows: the janitor's page of the group's index of live
workflows (a workflow its producer abandoned is cancelled, an entry whose workflow is gone
forgotten), and the sweep of a workflow that fails fast (its steps no runner holds taken
out, so that it settles without waiting for them to be fetched or due)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import trio

from .._engine.quarantine import Quarantine
from .._redis import Broker
from .._util import ErrorLog, logger
from .._wire.workflow import workflow_id_error
from ..errors import BackendError

__all__ = ["ABANDONED_DISPATCH", "WORKFLOW_PAGE", "WorkflowIndex"]

#: How long a workflow may still be adding its first steps (seconds after its dispatch)
#: before the leader takes its producer for stopped between the chunks of its start, and
#: cancels it.
ABANDONED_DISPATCH = 300.0
#: How many entries of the group's index of live workflows one round looks at (ZSCAN
#: COUNT, a hint).
WORKFLOW_PAGE = 100


class WorkflowIndex:
    """The janitor's look at the group's index of live workflows, a page per round: of
    those dispatched more than ``ABANDONED_DISPATCH`` ago, a workflow its producer
    abandoned between the chunks of its start is cancelled, an entry whose workflow is gone
    forgotten, a bad entry set aside."""

    def __init__(
        self,
        broker: Broker,
        errors: ErrorLog,
        quarantine: Quarantine,
        marks: Callable[[], Iterable[str]] = tuple,
    ) -> None:
        self._broker = broker
        self._errors = errors
        self._quarantine = quarantine
        self._marks = marks
        self._mark_prefix = f"{broker.group} "  # workflow_mark(group, W)
        self._requested: dict[str, None] = {}
        self._wake = trio.Event()
        self._sweeping = False
        #: Sweeps of workflows whose cancel mark was heard (failing fast, or cancelled),
        #: and the steps they took out, since the runner started (as the leader).
        self.sweeps = 0
        self.steps_taken_out = 0
        self._cursor = 0
        #: Workflows cancelled because their producer abandoned their start, and index
        #: entries of workflows that are gone, forgotten, since the runner started.
        self.abandoned = 0
        self.forgotten = 0

    async def page(self) -> None:
        """A page of the group's index of live workflows: the abandoned (dispatched more
        than ``ABANDONED_DISPATCH`` ago, still adding) are cancelled and the gone forgotten;
        bad entries leave the index, set aside with their reason."""
        broker = self._broker
        cursor, page = await broker.workflow_index_page(self._cursor, WORKFLOW_PAGE)
        self._cursor = cursor
        # An age, not a time: the scripts measure it by Redis's clock, which wrote the time
        # of each dispatch (this instance's clock may be off).
        age = int(ABANDONED_DISPATCH * 1000)
        ids = []
        for member, _ in page:
            text = member.decode("utf-8", "backslashreplace")
            why = workflow_id_error(text) if text.encode() == member else "not UTF-8 text"
            if why is not None:
                await self._quarantine.set_aside(
                    "workflows", text, why, member, action="dropped from the index"
                )
                await broker.forget_index_entry(member)
                continue
            ids.append(text)
        if not ids:
            return
        verdicts = await broker.tidy_workflows(ids, age)
        for workflow_id, verdict in zip(ids, verdicts, strict=True):
            if verdict == "abandoned":
                await self._cancel_abandoned(workflow_id, age)
            elif verdict == "gone":
                self.forgotten += 1
            elif verdict != "live":
                await self._quarantine.set_aside(
                    "workflow",
                    broker.keys._workflow(workflow_id).wf,
                    verdict,
                    action="dropped from the index of live workflows; its keys left to expire",
                )

    async def _cancel_abandoned(self, workflow_id: str, age_ms: int) -> None:
        """Cancel a workflow whose producer stopped between the chunks of its start (the
        script checks again that it is still adding, dispatched ``age_ms`` ago or more)."""
        broker = self._broker
        try:
            state = await broker.cancel_workflow(workflow_id, abandoned_for_ms=age_ms)
            if state not in ("cancelling", "cancelled"):
                return  # its start went on after all, or it ended meanwhile
            swept = await broker.sweep_workflow(workflow_id)
        except BackendError as exc:  # this workflow's keys: the others are still looked at
            self._errors.capture(exc)
            logger.warning("janitor: cancelling abandoned workflow %s failed: %s", workflow_id, exc)
            await self._quarantine.after_error(exc)
            return
        self.abandoned += 1
        logger.warning(
            "janitor: workflow %s was still adding its first steps %.0f s after its dispatch "
            "(its producer stopped between the chunks of its start): cancelled, %d steps "
            "taken out, %d left to its cancel mark",
            workflow_id,
            ABANDONED_DISPATCH,
            swept.removed,
            swept.left,
        )

    def heard(self, mark: str) -> None:
        """A cancel mark was heard (or read): a workflow's of this group, while this
        instance leads, gets its steps no runner holds taken out. A workflow that fails
        fast sets its mark in the script that records the failure; without this, a sibling
        waiting for its retry's backoff, or for a concurrency slot, would hold its settle
        (and its ``result()``) until it is due or granted."""
        if self._sweeping and mark.startswith(self._mark_prefix):
            workflow_id = mark[len(self._mark_prefix) :]
            if workflow_id_error(workflow_id) is None:  # else no workflow trunner wrote
                self._requested[workflow_id] = None
                self._wake.set()

    async def sweep_marked(self) -> None:
        """The leader's loop: sweep each workflow whose mark is heard, and first those whose
        marks this instance holds (heard before it led)."""
        self._sweeping = True
        try:
            for mark in list(self._marks()):
                self.heard(mark)
            while True:
                while self._requested:
                    workflow_id = next(iter(self._requested))
                    del self._requested[workflow_id]
                    await self._sweep(workflow_id)
                self._wake = trio.Event()
                await self._wake.wait()
        finally:
            self._sweeping = False
            self._requested.clear()

    async def _sweep(self, workflow_id: str) -> None:
        try:
            swept = await self._broker.sweep_workflow(workflow_id)
        except (BackendError, ValueError) as exc:  # this workflow's: the others go on
            self._errors.capture(exc)
            logger.warning("sweeping the steps of workflow %s failed: %s", workflow_id, exc)
            if isinstance(exc, BackendError):
                await self._quarantine.after_error(exc)
            return
        self.sweeps += 1
        self.steps_taken_out += swept.removed
