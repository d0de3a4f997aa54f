"""What the Redis handle of task code sends: each command checked (may it block, may it be
sent at all), and the commands of one scheduler tick batched into one round trip.

:mod:`trunner.redis_handle` is the public face over it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import outcome
import trio

from ..errors import CommandNotAllowed, RedisCommandError
from .transports.base import Arg, Transport
from .transports.resp import check_args

__all__ = [
    "BLOCKING",
    "BLOCKING_WITH_OPTION",
    "MAX_BATCH",
    "REFUSED",
    "Batcher",
    "check_command",
    "command_word",
    "first_key",
]

#: Commands that may block: each is sent on a connection of its own, never in a batch, so
#: that it delays no other task's commands nor the runner's own.
BLOCKING = frozenset(
    {
        "BLPOP", "BRPOP", "BRPOPLPUSH", "BLMOVE", "BLMPOP", "BZPOPMIN", "BZPOPMAX",
        "BZMPOP", "WAIT", "WAITAOF",
    }
)  # fmt: skip
#: Commands that block when given the BLOCK option.
BLOCKING_WITH_OPTION = frozenset({"XREAD", "XREADGROUP"})

_OWN_CLIENT = "use a Redis client of your own for it"
_OTHER_URL = (
    "the handle's connections are set up by trunner from the URL: for other credentials, "
    "another database or protocol, use open_redis() with another URL"
)
_TRANSACTION = "use pipeline(transaction=True), or eval() (a Lua script runs atomically)"
_STATE = "it would change a connection shared with other tasks and the runner"
#: Commands that change the state of the connection they are sent on (which the handle
#: shares with other tasks and with the runner): refused, with what to use instead.
REFUSED: dict[str, str] = {
    "SELECT": "every command of the handle goes to the URL's database; for another "
    "database, use open_redis() with it in the URL (redis://host:6379/1)",
    "MULTI": _TRANSACTION,
    "EXEC": _TRANSACTION,
    "DISCARD": _TRANSACTION,
    "WATCH": "WATCH needs a connection of its own: " + _TRANSACTION,
    "UNWATCH": "WATCH needs a connection of its own: " + _TRANSACTION,
    "SUBSCRIBE": "pub/sub takes a connection over: " + _OWN_CLIENT,
    "PSUBSCRIBE": "pub/sub takes a connection over: " + _OWN_CLIENT,
    "SSUBSCRIBE": "pub/sub takes a connection over: " + _OWN_CLIENT,
    "UNSUBSCRIBE": "pub/sub takes a connection over: " + _OWN_CLIENT,
    "PUNSUBSCRIBE": "pub/sub takes a connection over: " + _OWN_CLIENT,
    "SUNSUBSCRIBE": "pub/sub takes a connection over: " + _OWN_CLIENT,
    "MONITOR": "MONITOR takes a connection over: " + _OWN_CLIENT,
    "SYNC": "the replication protocol takes a connection over",
    "PSYNC": "the replication protocol takes a connection over",
    "REPLCONF": "the replication protocol takes a connection over",
    "RESET": _OTHER_URL,
    "HELLO": _OTHER_URL,
    "AUTH": _OTHER_URL,
    "QUIT": "the handle's connections are closed by trunner",
    "READONLY": "trunner sets the Cluster mode of its connections",
    "READWRITE": "trunner sets the Cluster mode of its connections",
    "ASKING": "trunner follows Cluster redirections itself",
}
#: CLIENT subcommands that leave the connection as it was; the others (REPLY, SETNAME,
#: SETINFO, TRACKING, CACHING, NO-EVICT, NO-TOUCH ...) are refused.
CLIENT_ALLOWED = frozenset(
    {"ID", "INFO", "LIST", "GETNAME", "GETREDIR", "TRACKINGINFO", "KILL", "UNBLOCK", "PAUSE",
     "UNPAUSE", "HELP"}
)  # fmt: skip


def command_word(value: Arg) -> str:
    """A command word, upper-cased (a bytes one read as Latin-1: never fails)."""
    if isinstance(value, bytes):
        return value.decode("latin-1").upper()
    return str(value).upper()


def check_command(args: Sequence[Arg]) -> bool:
    """Check one command for the handle; return whether it may block.

    Raises:
        CommandNotAllowed: it would change the state of a shared connection (the message
            says what to use instead).
        TypeError, InvalidArgument: an argument cannot be sent (see ``Transport.execute``).
    """
    check_args(args)
    name = command_word(args[0])
    if name in BLOCKING:
        return True
    if name in BLOCKING_WITH_OPTION:
        for arg in args[1:]:
            word = command_word(arg) if isinstance(arg, str | bytes) else ""
            if word == "STREAMS":
                break
            if word == "BLOCK":
                return True
        return False
    hint = REFUSED.get(name)
    if hint is None and name == "CLIENT":
        sub = command_word(args[1]) if len(args) > 1 else ""
        if sub not in CLIENT_ALLOWED:
            name, hint = f"CLIENT {sub}".strip(), ""
    if hint is not None:
        text = f"the Redis handle does not send {name}: {_STATE}"
        raise CommandNotAllowed(f"{text}; {hint}" if hint else text)
    return False


#: The most commands one batch carries.
MAX_BATCH = 1000


@attrs.define(eq=False)
class _Call:
    """One caller's commands (one, or a pipeline block's), sent next to each other."""

    commands: list[tuple[Arg, ...]]
    done: trio.Event = attrs.field(factory=trio.Event)
    result: outcome.Outcome[list[Any]] | None = None


class Batcher:
    """Collects commands for one tick, then sends them in one pipeline."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self._queue: list[_Call] = []
        self._wake = trio.Event()
        self._closing = False
        self.batches = 0
        self.commands = 0

    async def call(self, args: tuple[Arg, ...]) -> Any:
        """One command's reply; its error is raised."""
        [reply] = await self.call_many([args])
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def call_many(self, commands: list[tuple[Arg, ...]]) -> list[Any]:
        """The replies of ``commands``, sent in order in one batch; a failed command's
        exception is in its place."""
        call = _Call(commands)
        self._queue.append(call)
        self._wake.set()
        await call.done.wait()  # cancelled: the commands may still run; others unaffected
        assert call.result is not None
        return call.result.unwrap()

    def close(self) -> None:
        self._closing = True
        self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._wake.wait()
            if self._closing:
                break
            # One more tick: let every task that is ready add its commands to this batch.
            await trio.lowlevel.cancel_shielded_checkpoint()
            self._wake = trio.Event()
            batch = self._take()
            if self._queue:
                self._wake.set()
            await self._send(batch)

    def _take(self) -> list[_Call]:
        """The next batch: whole calls, up to MAX_BATCH commands (at least one call)."""
        size = 0
        for index, call in enumerate(self._queue):
            size += len(call.commands)
            if size > MAX_BATCH and index > 0:
                batch, self._queue = self._queue[:index], self._queue[index:]
                return batch
        batch, self._queue = self._queue, []
        return batch

    async def _send(self, batch: list[_Call]) -> None:
        commands = [command for call in batch for command in call.commands]
        self.batches += 1
        self.commands += len(commands)
        try:
            if len(commands) == 1:
                try:
                    replies: list[Any] = [await self._transport.execute(*commands[0])]
                except RedisCommandError as exc:  # an error reply: in its place
                    replies = [exc]
            else:
                replies = await self._transport.pipeline(commands)
        except Exception as exc:  # noqa: BLE001 - the whole batch failed: every caller's error
            for call in batch:
                call.result = outcome.Error(exc)
                call.done.set()
            return
        start = 0
        for call in batch:
            end = start + len(call.commands)
            call.result = outcome.Value(replies[start:end])
            call.done.set()
            start = end

    def fail_pending(self, error: BaseException) -> None:
        for call in self._queue:
            call.result = outcome.Error(error)
            call.done.set()
        self._queue.clear()


def first_key(args: Sequence[Arg]) -> str | None:
    """The first key of a blocking command (on Cluster, its node serves the command)."""
    name = command_word(args[0])
    index: int | None = 1
    if name in ("BLMPOP", "BZMPOP"):
        index = 3  # timeout numkeys key ...
    elif name in BLOCKING_WITH_OPTION:
        words = [command_word(a) if isinstance(a, str | bytes) else "" for a in args]
        index = words.index("STREAMS") + 1 if "STREAMS" in words else None
    elif name in ("WAIT", "WAITAOF"):
        index = None
    if index is None or index >= len(args):
        return None
    key = args[index]
    return key.decode("utf-8", "surrogateescape") if isinstance(key, bytes) else str(key)
