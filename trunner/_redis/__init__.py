"""The Redis boundary: the only package that imports redis, asyncio or trio_asyncio."""

from .broker import MAX_IDS_PER_CALL, Broker, RawEntry
from .connect import open_transport, redact_url
from .memory import forget_memory_server
from .transport import Reader, Transport

__all__ = [
    "MAX_IDS_PER_CALL",
    "Broker",
    "RawEntry",
    "Reader",
    "Transport",
    "forget_memory_server",
    "open_transport",
    "redact_url",
]
