"""``memory://NAME``: an in-process fakeredis server, shared by name within the process.

Commands run synchronously on the fake server (it is in memory), behind a Trio checkpoint.
Blocking reads are emulated without fakeredis's own blocking: a reader polls with a
non-blocking XREADGROUP and parks until another command through any memory transport of the
same server has run (or its BLOCK time passes). Writes made to the fake server behind
trunner's back are seen at the latest when the BLOCK time passes.

Blocking commands sent with :meth:`MemoryTransport.execute_blocking` (task code's BLPOP,
XREAD BLOCK ...) do block in fakeredis, as on a server: each runs in a worker thread of
its own, on a fakeredis client of its own (fakeredis wakes it when another client writes).
A cancelled one is ended with CLIENT UNBLOCK, so no thread stays blocked and no dead
command swallows a later write.

One server should be used by one Trio run at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import trio

from ..errors import map_exceptions, redis_py_errors, redis_py_reply
from .base import Arg, Dedicated, DedicatedConnections, Reader, Subscriber, Transport
from .resp import library_args

__all__ = ["MemoryTransport", "forget_memory_server", "has_server", "server_client"]


# fakeredis is imported on first use: a process that never opens a memory:// URL does not
# load it (nor redis-py, which it imports).


class _MemoryServer:
    def __init__(self) -> None:
        import fakeredis  # noqa: PLC0415 - see above

        self.server = fakeredis.FakeServer()
        self.lot = trio.lowlevel.ParkingLot()

    def notify(self) -> None:
        if self.lot:
            self.lot.unpark_all()


_servers: dict[str, _MemoryServer] = {}
_servers_lock = threading.Lock()


def _server(name: str) -> _MemoryServer:
    with _servers_lock:
        server = _servers.get(name)
        if server is None:
            server = _servers[name] = _MemoryServer()
        return server


def forget_memory_server(name: str) -> bool:
    """Drop the in-process server behind ``memory://NAME``, with its data.

    Use it in test teardown. A later ``memory://NAME`` starts empty.

    Args:
        name: The ``NAME`` of ``memory://NAME``.

    Returns:
        Whether the server existed.
    """
    with _servers_lock:
        return _servers.pop(name, None) is not None


def has_server(name: str) -> bool:
    """Whether the in-process server ``name`` exists (was used, and not forgotten)."""
    with _servers_lock:
        return name in _servers


def server_client(name: str, *, raw: bool = False) -> Any:
    """A blocking fakeredis client on the in-process server ``name`` (made if missing), to
    look at it from outside trunner: like ``redis.Redis``, or with ``raw``, with the raw
    RESP2 replies the transports see."""
    server = _server(name)
    if raw:
        return _client(server)
    import fakeredis  # noqa: PLC0415 - see above

    return fakeredis.FakeRedis(server=server.server)


def _client(server: _MemoryServer) -> Any:
    import fakeredis  # noqa: PLC0415 - see above

    client = fakeredis.FakeRedis(server=server.server, protocol=2)
    client.response_callbacks.clear()
    return client


def _execute(client: Any, args: Sequence[Arg]) -> Any:
    """Run one command on a fakeredis client; its errors (redis-py's) become trunner's.

    The arguments are checked first (:func:`~.resp.library_args`)."""
    args = library_args(args)
    with map_exceptions(redis_py_errors, str(args[0])):
        return client.execute_command(*args)


#: Blocking commands run at once per transport (each holds a worker thread).
MAX_BLOCKING = 1000
#: Idle clients kept for blocking commands.
BLOCKING_IDLE = 2
#: How long a cancelled blocking command may take to end after CLIENT UNBLOCK.
UNBLOCK_WAIT = 5.0


class MemoryTransport(DedicatedConnections, Transport):
    """Commands run on the in-process fakeredis server ``name``, one at a time."""

    def __init__(self, name: str, *, command_timeout: float = 10.0) -> None:
        self.description = f"memory://{name}"
        self.command_timeout = command_timeout  # never reached: nothing waits for a reply
        self._server = _server(name)
        self._client = _client(self._server)
        self._threads = trio.CapacityLimiter(MAX_BLOCKING)
        self._blocking_idle: list[tuple[Any, int]] = []  # (client, its CLIENT ID)
        DedicatedConnections.__init__(self)

    def _run(self, args: Sequence[Arg]) -> Any:
        try:
            return _execute(self._client, args)
        finally:
            self._server.notify()

    async def execute(self, *args: Arg) -> Any:
        await trio.lowlevel.checkpoint()
        return self._run(args)

    async def pipeline(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        await trio.lowlevel.checkpoint()
        for command in commands:  # nothing runs if one cannot be sent, as on a socket
            library_args(command)
        replies: list[Any] = []
        for command in commands:
            try:
                replies.append(redis_py_reply(self._run(command), str(command[0])))
            except Exception as exc:  # noqa: BLE001 - each reply or error in its place
                replies.append(exc)
        return replies

    async def execute_blocking(self, *args: Arg, key: str | None = None) -> Any:
        args = tuple(library_args(args))
        await trio.lowlevel.checkpoint()
        if self._blocking_idle:
            client, client_id = self._blocking_idle.pop()
        else:
            client = _client(self._server)
            client_id = int(_execute(client, ("CLIENT", "ID")))
        finished = threading.Event()

        def run() -> Any:
            try:
                return _execute(client, args)
            finally:
                finished.set()

        try:
            reply = await trio.to_thread.run_sync(
                run, abandon_on_cancel=True, limiter=self._threads
            )
        except BaseException:
            if not finished.is_set():  # cancelled while blocked: end it
                with trio.move_on_after(UNBLOCK_WAIT, shield=True):
                    while not finished.is_set():
                        self._run(("CLIENT", "UNBLOCK", client_id))
                        await trio.sleep(0.005)
            client.close()
            raise
        finally:
            self._server.notify()  # it may have written (popped): wake the readers
        if len(self._blocking_idle) < BLOCKING_IDLE:
            self._blocking_idle.append((client, client_id))
        else:
            client.close()
        return reply

    def open_reader(self, key: str | None = None) -> Reader:
        return _MemoryReader(self)

    def open_subscriber(self, channel: str) -> Subscriber:
        return _MemorySubscriber(self, channel)

    async def aclose(self) -> None:
        await self._close_dedicated()
        for client, _ in self._blocking_idle:
            client.close()
        self._blocking_idle.clear()
        self._client.close()
        await trio.lowlevel.checkpoint()


class _Dedicated(Dedicated[MemoryTransport]):
    """A fakeredis client of its own on the transport's server."""

    def __init__(self, transport: MemoryTransport) -> None:
        super().__init__(transport)
        self._server = transport._server
        self._client = _client(self._server)

    async def _drop(self) -> None:
        self._client.close()
        await trio.lowlevel.checkpoint()


class _MemoryReader(_Dedicated, Reader):
    def __init__(self, transport: MemoryTransport) -> None:
        super().__init__(transport)
        self._interrupted = False

    async def xreadgroup(
        self, group: str, consumer: str, stream: str | Sequence[str], count: int, block: float
    ) -> Any:
        streams = [stream] if isinstance(stream, str) else list(stream)
        deadline = trio.current_time() + block
        try:
            while True:
                await trio.lowlevel.checkpoint()
                if self._interrupted:
                    return None
                read = ("XREADGROUP", "GROUP", group, consumer, "COUNT", count)
                reply = _execute(
                    self._client, (*read, "STREAMS", *streams, *(">" for _ in streams))
                )
                if reply or trio.current_time() >= deadline:
                    return reply
                with trio.move_on_at(deadline):
                    await self._server.lot.park()
        finally:
            self._interrupted = False  # an interrupt ends one read

    async def interrupt(self) -> None:
        self._interrupted = True
        self._server.notify()
        await trio.lowlevel.checkpoint()


class _MemorySubscriber(_Dedicated, Subscriber):
    def __init__(self, transport: MemoryTransport, channel: str) -> None:
        super().__init__(transport)
        self._pubsub = self._client.pubsub()
        self._pubsub.subscribe(channel)

    async def subscribe(self) -> None:
        await trio.lowlevel.checkpoint()  # subscribed when created

    async def next_message(self) -> bytes:
        while True:
            await trio.lowlevel.checkpoint()
            message = self._pubsub.get_message(ignore_subscribe_messages=True)
            if message is not None and message["type"] == "message":
                data: bytes = message["data"]
                return data
            if message is None:
                await self._server.lot.park()

    async def _drop(self) -> None:
        self._pubsub.close()
        await super()._drop()
