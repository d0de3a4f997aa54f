"""A Trio-facing Redis handle for task code, with automatic pipelining.

Commands that concurrent Trio tasks issue within one scheduler tick are sent together: one
crossing into the Redis client and one round trip, each caller getting its own reply or
its own exception. Blocking commands never share a batch nor a pooled connection: each
runs on a connection of its own. Transactions are sent on their own. Commands that would
change the state of a connection the handle shares with other tasks and with the runner
(``SELECT``, ``MULTI`` outside a transaction pipeline, ``SUBSCRIBE``, ``CLIENT REPLY`` ...)
are refused with :class:`~trunner.errors.CommandNotAllowed`, saying what to use instead.

Get one from a runner (``runner.redis``, ``trunner.current_runner().redis`` inside a
task), from a client (``client.redis``), or on its own with :func:`open_redis`.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

import trio

from . import _validate as v
from ._redis import (
    Arg,
    Batcher,
    Script,
    Transport,
    call_script,
    check_command,
    command_word,
    first_key,
    make_script,
    open_transport,
)
from ._util import connection_name, run_in_background
from .errors import CommandNotAllowed, Crashed, RedisCommandError, RunnerNotRunning

__all__ = ["Pipeline", "RedisHandle", "check_command", "open_redis"]


def _ok(reply: Any) -> bool:
    return reply in (b"OK", "OK", True)


class _Commands:
    """The typed commands; subclasses say how one command is sent."""

    async def execute(self, *args: Arg) -> Any:
        """Any Redis command; its raw reply (bytes, int, list, None ...)."""
        raise NotImplementedError

    async def get(self, key: str) -> bytes | None:
        """``GET``: the value, or ``None`` when the key does not exist."""
        reply: bytes | None = await self.execute("GET", key)
        return reply

    async def set(
        self,
        key: str,
        value: Arg,
        *,
        ex: float | None = None,
        px: int | None = None,
        nx: bool = False,
        xx: bool = False,
    ) -> bool:
        """``SET``, with an optional expiry and condition.

        Args:
            key: The key.
            value: The value.
            ex: Expire after this many seconds (sent as milliseconds).
            px: Expire after this many milliseconds.
            nx: Only set the key if it does not exist.
            xx: Only set the key if it exists.

        Returns:
            ``True`` when it was set; ``False`` when ``nx`` or ``xx`` prevented it.

        Raises:
            ValueError: Both ``ex`` and ``px`` were given.
        """
        if ex is not None and px is not None:
            raise ValueError("set: give ex (seconds) or px (milliseconds), not both")
        args: list[Arg] = ["SET", key, value]
        if ex is not None:
            args += ["PX", int(ex * 1000)]
        if px is not None:
            args += ["PX", px]
        if nx:
            args.append("NX")
        if xx:
            args.append("XX")
        return _ok(await self.execute(*args))

    async def delete(self, *keys: str) -> int:
        """``DEL``: how many of ``keys`` existed."""
        return int(await self.execute("DEL", *keys))

    async def exists(self, *keys: str) -> int:
        """``EXISTS``: how many of ``keys`` exist."""
        return int(await self.execute("EXISTS", *keys))

    async def incr(self, key: str, amount: int = 1) -> int:
        """``INCR`` / ``INCRBY``: the new value."""
        if amount == 1:
            return int(await self.execute("INCR", key))
        return int(await self.execute("INCRBY", key, amount))

    async def decr(self, key: str, amount: int = 1) -> int:
        """``DECRBY``: the new value."""
        return int(await self.execute("DECRBY", key, amount))

    async def expire(self, key: str, seconds: float) -> bool:
        """``PEXPIRE``: whether the key exists (and now expires)."""
        return bool(await self.execute("PEXPIRE", key, int(seconds * 1000)))

    async def ttl(self, key: str) -> float | None:
        """Seconds left, or None when the key has no expiry or does not exist."""
        ms = int(await self.execute("PTTL", key))
        return ms / 1000 if ms >= 0 else None

    async def hset(self, key: str, mapping: Mapping[str, Arg]) -> int:
        """``HSET`` of every field of ``mapping``: how many fields were added."""
        flat: list[Arg] = [x for pair in mapping.items() for x in pair]
        return int(await self.execute("HSET", key, *flat))

    async def hget(self, key: str, field: str) -> bytes | None:
        """``HGET``: the field's value, or ``None``."""
        reply: bytes | None = await self.execute("HGET", key, field)
        return reply

    async def hgetall(self, key: str) -> dict[bytes, bytes]:
        """``HGETALL``: every field and value."""
        flat = await self.execute("HGETALL", key)
        return {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}

    async def hincrby(self, key: str, field: str, amount: int = 1) -> int:
        """``HINCRBY``: the field's new value."""
        return int(await self.execute("HINCRBY", key, field, amount))

    async def lpush(self, key: str, *values: Arg) -> int:
        """``LPUSH``: the list's new length."""
        return int(await self.execute("LPUSH", key, *values))

    async def rpush(self, key: str, *values: Arg) -> int:
        """``RPUSH``: the list's new length."""
        return int(await self.execute("RPUSH", key, *values))

    async def lrange(self, key: str, start: int, stop: int) -> list[bytes]:
        """``LRANGE``: the elements from ``start`` to ``stop``, both included."""
        reply: list[bytes] = await self.execute("LRANGE", key, start, stop)
        return reply

    async def sadd(self, key: str, *members: Arg) -> int:
        """``SADD``: how many members were added."""
        return int(await self.execute("SADD", key, *members))

    async def smembers(self, key: str) -> builtins.set[bytes]:
        """``SMEMBERS``: the members."""
        return builtins.set(await self.execute("SMEMBERS", key))

    async def zadd(self, key: str, mapping: Mapping[str, float]) -> int:
        """``ZADD`` of every member and score of ``mapping``: how many were added."""
        flat: list[Arg] = [x for member, score in mapping.items() for x in (score, member)]
        return int(await self.execute("ZADD", key, *flat))

    async def zrange(self, key: str, start: int, stop: int) -> list[bytes]:
        """``ZRANGE``: the members from ``start`` to ``stop``, both included, by score."""
        reply: list[bytes] = await self.execute("ZRANGE", key, start, stop)
        return reply


class RedisHandle(_Commands):
    """Redis for task code: typed commands, batched automatically across Trio tasks.

    Commands that concurrent Trio tasks issue in the same scheduler tick are sent
    together, in one round trip; each caller gets its own reply or its own exception.
    Blocking commands and transactions never share a batch. Get one from a runner
    ([``runner.redis``][trunner.Runner.redis], ``trunner.current_runner().redis`` inside
    a task), from a client ([``client.redis``][trunner.Client.redis]), or on its own with
    [``open_redis``][trunner.open_redis]; do not create it yourself. The whole guide:
    [Using Redis from your tasks](redis-from-tasks.md).

    Every command raises [``RunnerNotRunning``][trunner.errors.RunnerNotRunning] once the
    runner, client or ``open_redis`` block has ended,
    [``RedisUnavailable``][trunner.RedisUnavailable] when Redis cannot be reached or does
    not answer within the command timeout, and
    [``RedisCommandError``][trunner.errors.RedisCommandError] for an error reply.

    Cancellation: a cancelled caller stops waiting for its reply, but a command already
    handed to a batch may still run; the other callers of the batch are unaffected.
    """

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self._batcher = Batcher(transport)
        self._scripts: dict[str, Script] = {}
        self._open = False
        self.stopped = trio.Event()
        """Set once [``run``][trunner.RedisHandle.run] has returned (every command still
        waiting then failed with ``RunnerNotRunning``)."""

    async def execute(self, *args: Arg) -> Any:
        """Any Redis command, e.g. ``await redis.execute("XADD", "events", "*", "k", "v")``.

        A blocking command (``BLPOP``, ``XREAD ... BLOCK`` ...) runs on a connection of its
        own; the others join the next batch.

        Args:
            *args: The command name and its arguments.

        Returns:
            The raw reply: bytes, an int, a list, ``None`` ...

        Raises:
            CommandNotAllowed: a command that would change the state of a connection the
                handle shares (``SELECT``, ``MULTI``, ``SUBSCRIBE``, ``CLIENT REPLY`` ...).
            TypeError, InvalidArgument: an argument that cannot be sent. Nothing is sent
                (and no other task's command is affected).
        """
        if not self._open:
            raise RunnerNotRunning("the Redis handle is closed")
        if check_command(args):
            return await self._transport.execute_blocking(*args, key=first_key(args))
        return await self._batcher.call(args)

    async def eval(self, script: str, keys: Sequence[str] = (), args: Sequence[Arg] = ()) -> Any:
        """Run a Lua script, by its SHA1, loading it when Redis does not know it.

        Args:
            script: The Lua source.
            keys: Its ``KEYS``.
            args: Its ``ARGV``.

        Returns:
            The script's raw reply.
        """
        loaded = self._scripts.get(script)
        if loaded is None:
            loaded = self._scripts[script] = make_script("user", script)
        return await call_script(self.execute, loaded, keys, args)  # in the batches

    def pipeline(self, *, transaction: bool = False) -> Pipeline:
        """Raw commands queued with ``add``, sent together when the block exits.

        Use it as ``async with redis.pipeline() as p: p.add("INCR", "hits")``; afterwards
        ``p.results`` holds the replies.

        Args:
            transaction: Wrap the commands in ``MULTI`` / ``EXEC``.

        Returns:
            A [``Pipeline``][trunner.Pipeline], an async context manager.
        """
        return Pipeline(self, transaction)

    @property
    def batches(self) -> int:
        """Batches sent so far, one round trip each. Blocking commands and transactions,
        which are sent on their own, are not counted."""
        return self._batcher.batches

    @property
    def commands(self) -> int:
        """Commands sent in those batches so far."""
        return self._batcher.commands

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the batches until [``stop``][trunner.RedisHandle.stop]; a runner, a client
        or ``open_redis`` does this for you."""
        self._open = True
        try:
            await self._batcher.run(task_status=task_status)
        finally:
            self._open = False
            self._batcher.fail_pending(RunnerNotRunning("the Redis handle was closed"))
            self.stopped.set()

    def stop(self) -> None:
        """Stop serving: commands issued from now on fail with ``RunnerNotRunning``."""
        self._open = False
        self._batcher.close()

    def close(self) -> None:
        """The same as [``stop``][trunner.RedisHandle.stop]."""
        self.stop()


class Pipeline:
    """Raw commands queued with [``add``][trunner.Pipeline.add], sent together when the
    block exits; their replies are in ``results`` afterwards.

    [``RedisHandle.pipeline``][trunner.RedisHandle.pipeline] makes one. Without a
    transaction, the commands go in the handle's next batch (next to each other, in order,
    with other tasks' commands around them) and a command that failed has its exception
    (not raised) in ``results``. With ``transaction=True`` they are wrapped in
    ``MULTI`` / ``EXEC`` and sent on their own. Nothing is sent when the block raises.

    Raises:
        RunnerNotRunning: On leaving the block, when the handle is closed.
        RedisCommandError: On leaving the block, with ``transaction=True``: a command
            was refused while queueing (nothing ran), or the transaction was aborted (a
            ``WATCH``ed key changed).
    """

    def __init__(self, handle: RedisHandle, transaction: bool) -> None:
        self._handle = handle
        self._transaction = transaction
        self._commands: list[tuple[Arg, ...]] = []
        self.results: list[Any] = []
        """The replies, in the order of the commands, once the block has exited."""

    def add(self, *args: Arg) -> Pipeline:
        """Queue one command, e.g. ``p.add("INCR", "hits")``.

        Args:
            *args: The command name and its arguments.

        Returns:
            The pipeline, so that calls can be chained.

        Raises:
            CommandNotAllowed: as ``RedisHandle.execute``; also a blocking command in a
                pipeline that is not a transaction (it would stall the batch; inside
                MULTI/EXEC Redis never blocks).
            TypeError, InvalidArgument: an argument that cannot be sent.
        """
        if check_command(args) and not self._transaction:
            raise CommandNotAllowed(
                f"a pipeline does not send {command_word(args[0])}: it may block, and would hold "
                "up every command of the batch; send it alone with execute()"
            )
        self._commands.append(args)
        return self

    async def __aenter__(self) -> Pipeline:
        await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None or not self._commands:
            return
        if not self._handle._open:
            raise RunnerNotRunning("the Redis handle is closed")
        transport = self._handle._transport
        if self._transaction:
            replies = await transport.pipeline([("MULTI",), *self._commands, ("EXEC",)])
            for reply in replies:
                if isinstance(reply, BaseException):
                    raise reply  # refused while queueing: nothing ran
            executed = replies[-1]
            if executed is None:
                raise RedisCommandError("the transaction was aborted (a WATCHed key changed)")
            self.results = list(executed)
        else:
            # In the next batch with other tasks' commands, kept together and in order; a
            # command that failed has its exception in place.
            self.results = await self._handle._batcher.call_many(self._commands)


@asynccontextmanager
async def open_redis(
    url: str, *, connect_timeout: float = 5.0, max_connections: int = 20
) -> AsyncIterator[RedisHandle]:
    """A [``RedisHandle``][trunner.RedisHandle] on its own, for the duration of the block.

    For code that is not run by a runner. After the block, its commands raise
    [``RunnerNotRunning``][trunner.errors.RunnerNotRunning].

    Args:
        url: The Redis URL, as for [``open_runner``][trunner.open_runner].
        connect_timeout: Redis must answer a ``PING`` within this time (> 0).
        max_connections: The size of the connection pool (an int >= 1).

    Yields:
        The handle.

    Raises:
        TypeError: A bad argument, before connecting.
        ValueError: A bad argument, before connecting.
        RedisUnavailable: Redis cannot be reached within ``connect_timeout``.
        Crashed: The handle failed.

    An exception from the block leaves as itself.
    """
    v.check_positive_number("connect_timeout", connect_timeout)
    v.check_positive_int("max_connections", max_connections)
    async with open_transport(
        url,
        client_name=connection_name("trunner-redis"),
        max_connections=max_connections,
        connect_timeout=connect_timeout,
    ) as transport:
        handle = RedisHandle(transport)

        def crashed(what: str) -> Crashed:
            return Crashed(f"the Redis handle failed: {what}")

        async with run_in_background(handle.run, handle.stop, crashed):
            yield handle
