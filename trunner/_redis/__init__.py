"""The Redis boundary: the only package that imports redis, asyncio or trio_asyncio."""

from .broker import MAX_IDS_PER_CALL, Broker, RawEntry
from .connect import open_transport
from .errors import ScriptNotLoaded
from .memory import forget_memory_server
from .transport import Reader, Transport
from .urls import check_url, redact_url

__all__ = [
    "MAX_IDS_PER_CALL",
    "Broker",
    "RawEntry",
    "Reader",
    "ScriptNotLoaded",
    "Transport",
    "check_url",
    "forget_memory_server",
    "open_transport",
    "redact_url",
]
