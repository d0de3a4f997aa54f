"""The Redis boundary: the only package that imports redis, asyncio, trio_asyncio,
fakeredis or hiredis (``tests/unit/test_boundaries.py`` checks it).

Code outside imports from here only, never from a module of this package. What it
offers: :func:`open_transport` and the :class:`Transport` interface (with :class:`Reader`
and :class:`Subscriber`), the typed group operations of :class:`Broker`, the leadership
lease (:class:`LeaseStore`), the Lua scripts (:class:`Script`), URL checks, the
command checks and batches under the Redis handle of task code (:class:`Batcher`), the
in-process ``memory://`` servers, and what the test helpers look at Redis with
(:class:`Probe`, the queries of :class:`Broker`, :func:`delete_prefixed`).
"""

from typing import TYPE_CHECKING, Any

from .batcher import Batcher, check_command, command_word, first_key
from .broker import (
    MAX_ADMITS_PER_CALL,
    MAX_IDS_PER_CALL,
    RELEASED_IDLE_MS,
    AckRecord,
    Admit,
    BadValue,
    Broker,
    Delivery,
    GroupProgress,
    Leader,
    MarksLook,
    Owner,
    Record,
    Slot,
    StepEnd,
    StepKind,
    TaskLook,
    WorkflowLook,
    WorkflowSweep,
    delete_prefixed,
)
from .endpoints import parse_endpoint
from .errors import ScriptNotLoaded
from .lease import LeaseStore
from .probe import Probe
from .scripts import SCRIPTS, Script, fenced_script, make_script
from .stall_link import StallLink, open_stall_link
from .transports.base import Arg, Reader, Subscriber, Transport, call_script
from .transports.connect import open_transport
from .transports.memory import forget_memory_server
from .transports.memory import server_client as memory_server_client
from .transports.native import NativeTransport
from .transports.resp import RawEntry, as_str, check_args, pack
from .urls import check_url, native_options, parse_server_url, redact_url, refuse_memory

if TYPE_CHECKING:
    from .transports.aio import AioTransport, close_aio_transport, open_aio_transport
    from .transports.bridged import BridgedTransport

__all__ = [
    "MAX_ADMITS_PER_CALL",
    "MAX_IDS_PER_CALL",
    "RELEASED_IDLE_MS",
    "SCRIPTS",
    "AckRecord",
    "Admit",
    "AioTransport",
    "Arg",
    "BadValue",
    "Batcher",
    "BridgedTransport",
    "Broker",
    "Delivery",
    "GroupProgress",
    "Leader",
    "LeaseStore",
    "MarksLook",
    "NativeTransport",
    "Owner",
    "Probe",
    "RawEntry",
    "Reader",
    "Record",
    "Script",
    "ScriptNotLoaded",
    "Slot",
    "StallLink",
    "StepEnd",
    "StepKind",
    "Subscriber",
    "TaskLook",
    "Transport",
    "WorkflowLook",
    "WorkflowSweep",
    "as_str",
    "call_script",
    "check_args",
    "check_command",
    "check_url",
    "close_aio_transport",
    "command_word",
    "delete_prefixed",
    "fenced_script",
    "first_key",
    "forget_memory_server",
    "make_script",
    "memory_server_client",
    "native_options",
    "open_aio_transport",
    "open_stall_link",
    "open_transport",
    "pack",
    "parse_endpoint",
    "parse_server_url",
    "redact_url",
    "refuse_memory",
]


def __getattr__(name: str) -> Any:
    # The bridged transport loads redis-py's asyncio client: only when asked for.
    if name == "BridgedTransport":
        from .transports.bridged import BridgedTransport  # noqa: PLC0415

        return BridgedTransport
    if name in _AIO:  # the asyncio client's transport: redis-py's asyncio client
        from .transports import aio  # noqa: PLC0415 - loads redis-py only when asked for

        return getattr(aio, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_AIO = frozenset({"AioTransport", "close_aio_transport", "open_aio_transport"})
