"""What synchronous code holds of its dispatches (``trunner.sync``): a handle is the id (a
``str``) over a Trio handle, whose methods run as blocking calls on the sync client's
thread. :class:`BlockingHandle` is what every such handle shares; :class:`WorkflowHandle`
is a workflow's (the task's is ``trunner.sync.TaskHandle``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, Self, TypeVar

from ._workflow_handle import WorkflowHandle as TrioWorkflowHandle
from .client import Client as TrioClient
from .status import WorkflowState, WorkflowStatus

__all__ = ["BlockingClient", "BlockingHandle", "WorkflowHandle"]

R = TypeVar("R")
T = TypeVar("T")
H = TypeVar("H")


class BlockingClient(Protocol):
    """What a handle needs of its sync client: a call on the client's thread."""

    def _run(self, call: Callable[[TrioClient], Awaitable[T]]) -> T: ...


class BlockingHandle(str, Generic[H]):
    """A handle of synchronous code: the id of ``handle`` (this ``str``), its Trio handle
    ``_handle`` and the sync client whose thread runs its calls."""

    _client: BlockingClient
    _handle: H
    _kind = "Handle"

    def __new__(cls, handle: H, client: BlockingClient) -> Self:
        made = super().__new__(cls, str(handle))
        made._client, made._handle = client, handle
        return made

    def __repr__(self) -> str:
        return f"<trunner.sync.{self._kind} {str(self)!r}>"

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        return str, (str(self),)  # copies and pickles are the plain id

    @property
    def id(self) -> str:
        """The id of what was dispatched."""
        return str(self)


class WorkflowHandle(BlockingHandle[TrioWorkflowHandle[Any]], Generic[R]):
    """A dispatched workflow seen from synchronous code: its id (this ``str``), and the
    [``WorkflowHandle``][trunner.WorkflowHandle] methods as blocking calls."""

    _kind = "WorkflowHandle"

    def result(self, timeout: float | None = None) -> R:
        """As [``WorkflowHandle.result``][trunner.WorkflowHandle.result]."""
        result: R = self._client._run(lambda client: self._current(client).result(timeout))
        return result

    def status(self) -> WorkflowStatus:
        """As [``WorkflowHandle.status``][trunner.WorkflowHandle.status]."""
        return self._client._run(lambda client: self._current(client).status())

    def cancel(self) -> WorkflowState:
        """As [``WorkflowHandle.cancel``][trunner.WorkflowHandle.cancel]."""
        return self._client._run(lambda client: self._current(client).cancel())

    def _current(self, client: TrioClient) -> TrioWorkflowHandle[Any]:
        """The Trio handle over the client's connections of now (see
        ``trunner.sync.TaskHandle``)."""
        producer: Any = client._dispatcher
        handle = self._handle
        if handle._producer is not producer:
            handle = TrioWorkflowHandle(str(self), producer, handle._codecs)
            self._handle = handle
        return handle
