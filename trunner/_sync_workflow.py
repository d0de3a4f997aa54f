"""A workflow seen from synchronous code (``trunner.sync``): the
[``WorkflowHandle``][trunner.WorkflowHandle] methods as blocking calls, on the sync
client's thread."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

from ._workflow_handle import WorkflowHandle as TrioWorkflowHandle
from .client import Client as TrioClient
from .status import WorkflowState, WorkflowStatus

__all__ = ["WorkflowHandle"]

R = TypeVar("R")
T = TypeVar("T")


class _Blocking(Protocol):
    """What a handle needs of its sync client: a call on the client's thread."""

    def _run(self, call: Callable[[TrioClient], Awaitable[T]]) -> T: ...


class WorkflowHandle(str, Generic[R]):
    """A dispatched workflow seen from synchronous code: its id (this ``str``), and the
    [``WorkflowHandle``][trunner.WorkflowHandle] methods as blocking calls."""

    _client: _Blocking
    _handle: TrioWorkflowHandle[R]

    def __new__(cls, handle: TrioWorkflowHandle[R], client: _Blocking) -> WorkflowHandle[R]:
        made = super().__new__(cls, str(handle))
        made._client, made._handle = client, handle
        return made

    def __repr__(self) -> str:
        return f"<trunner.sync.WorkflowHandle {str(self)!r}>"

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        return str, (str(self),)

    @property
    def id(self) -> str:
        """The workflow's id."""
        return str(self)

    def result(self, timeout: float | None = None) -> R:
        """As [``WorkflowHandle.result``][trunner.WorkflowHandle.result]."""
        return self._client._run(lambda client: self._current(client).result(timeout))

    def status(self) -> WorkflowStatus:
        """As [``WorkflowHandle.status``][trunner.WorkflowHandle.status]."""
        return self._client._run(lambda client: self._current(client).status())

    def cancel(self) -> WorkflowState:
        """As [``WorkflowHandle.cancel``][trunner.WorkflowHandle.cancel]."""
        return self._client._run(lambda client: self._current(client).cancel())

    def _current(self, client: TrioClient) -> TrioWorkflowHandle[R]:
        """The Trio handle over the client's connections of now (see
        ``trunner.sync.TaskHandle``)."""
        producer: Any = client._dispatcher
        handle = self._handle
        if handle._producer is not producer:
            handle = TrioWorkflowHandle(str(self), producer, handle._codecs)
            self._handle = handle
        return handle
