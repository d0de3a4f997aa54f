"""Eager mode runs a task's action now, in the calling Trio task, as a runner would, without
Redis: the payload's round trip, the attempts and ``current_message()`` are a runner's.

``TaskRegistry.call`` and ``trunner.testing.call_task`` use it. It needs only what a task
offers (:class:`EagerTask`, which :class:`~trunner.Task` is), so nothing here imports the
registry, which sits above it.
"""

from __future__ import annotations

import functools
import itertools
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import trio

from .._context import Given, NoRunnerInEagerCall, _current_message, _eager_call
from .._hooks import AttemptHooks, DispatchHooks
from .._util import gives_up, timed
from .._wire.codec import TypeCodec
from .._wire.decode import decode_message
from .._wire.envelope import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    NO_SIZE_LIMIT,
    PAYLOAD_FIELD,
    encode_message,
    reencode_for_retry,
)
from .._wire.headers import check_headers
from .._wire.message import TaskMessage
from .._wire.names import entry_id
from ..errors import InvalidPayload, MaxRetryExceeded, MiddlewareError
from ..middleware import AttemptInfo, DispatchInfo, Middleware, check_middleware
from .base import Body, LoopExecutor, RunIn
from .processes import ProcessExecutor
from .threads import ThreadExecutor

__all__ = ["DEFAULT_MAX_PAYLOAD_BYTES", "EagerTask", "run_eagerly"]

#: The largest encoded message eager calls accept (``RunnerConfig``'s default).
#: Re-encoding a message for its next attempt never fails on size (as in the runner).

_eager_ids = itertools.count(1)


class EagerTask(Protocol):
    """What eager mode uses of a task."""

    @property
    def name(self) -> str: ...
    @property
    def action(self) -> Callable[[Any], Any]: ...
    @property
    def run_in(self) -> RunIn | None: ...
    @property
    def unique(self) -> bool: ...
    @property
    def max_attempts(self) -> int: ...
    def key_for(self, payload: Any) -> str: ...
    def retry_delay(self, failed_attempt: int) -> float: ...
    @property
    def timeout(self) -> float | None: ...
    @property
    def keep_result(self) -> float | None: ...
    @property
    def give_up_on(self) -> tuple[type[BaseException], ...]: ...
    @property
    def payload_codec(self) -> TypeCodec: ...
    @property
    def result_codec(self) -> TypeCodec: ...
    @property
    def decode_payload(self) -> Callable[[Any], Any] | None: ...
    @property
    def priority(self) -> str: ...


def _eager_id() -> str:
    return f"{int(time.time() * 1000)}-{next(_eager_ids)}"


async def run_eagerly(
    task: EagerTask,
    payload: Any = None,
    *,
    sleep_backoff: bool = False,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    headers: Mapping[str, str] | None = None,
    middleware: Iterable[Middleware] = (),
) -> Any:
    """Run ``task`` with ``payload`` until an attempt succeeds or the last one failed.

    See :func:`trunner.testing.call_task` for what is and is not emulated. ``middleware``:
    their ``on_dispatch`` hooks see the message once, their ``around_attempt`` hooks wrap
    each attempt; a middleware that swallows what it may not raises
    :class:`~trunner.errors.MiddlewareError` here (a runner reports it).
    """
    chain = check_middleware(middleware)
    message = await _first_message(task, payload, headers, chain, max_payload_bytes)
    broken: list[MiddlewareError] = []
    hooks = AttemptHooks(chain, broken.append)
    while True:
        result: Any = None
        failure: BaseException | None = None
        source = Given(message)
        token = _current_message.set(source)
        eager = _eager_call.set(True)
        try:
            body = functools.partial(_attempt, task, message.payload, max_payload_bytes)
            result = await (hooks.run(AttemptInfo(source, "", task), body) if hooks else body())
        except NoRunnerInEagerCall:
            raise  # the test's set-up, not the attempt, is wrong: retrying cannot help
        except Exception as exc:  # noqa: BLE001 - a failed attempt, like the runner's
            failure = exc
        except BaseException as exc:  # idem, unless it must go on up
            if _goes_up(exc):
                raise
            failure = exc
        finally:
            _eager_call.reset(eager)
            _current_message.reset(token)
        if broken:  # a runner reports it and goes on; in a test, it is the finding
            raise broken[0]
        if failure is None:
            return result
        if gives_up(failure, task.give_up_on) or message.attempt >= task.max_attempts:
            raise MaxRetryExceeded(task.name, message.attempt) from failure
        delay = task.retry_delay(message.attempt)
        if sleep_backoff:
            await trio.sleep(delay)
        else:
            await trio.lowlevel.checkpoint()
        data = reencode_for_retry(message, message.attempt + 1, NO_SIZE_LIMIT)
        message = decode_message(_eager_id(), [PAYLOAD_FIELD, data])


async def _first_message(
    task: EagerTask,
    payload: Any,
    headers: Mapping[str, str] | None,
    middleware: tuple[Middleware, ...],
    max_payload_bytes: int,
) -> TaskMessage:
    """The message a dispatch of ``task`` would write: its payload encoded and checked,
    its headers as the dispatch hooks leave them."""
    unique_key = task.key_for(payload) if task.unique else None
    if task.decode_payload is not None:  # typed: encoded and checked, as dispatch does
        payload = task.payload_codec.encode(payload) if task.payload_codec.typed else payload
        try:
            task.decode_payload(payload)
        except InvalidPayload as exc:
            raise InvalidPayload(f"payload of task {task.name!r} {exc}") from None
    hooks = DispatchHooks(middleware)
    if hooks:
        given = check_headers(headers, task.name) or {}
        headers = await hooks.run(DispatchInfo(task.name, payload, given, ""))
    data = encode_message(
        task.name,
        payload,
        enqueued_at=time.time(),
        unique_key=unique_key,
        unique_token=secrets.token_hex(16) if unique_key is not None else None,
        headers=headers,
        max_bytes=max_payload_bytes,
        lane=task.priority,
    )
    return decode_message(entry_id(_eager_id(), task.priority), [PAYLOAD_FIELD, data])


def _body(task: EagerTask) -> Body:
    """The task's body, in the place a runner runs it: on the event loop, or in a worker
    thread or process of its own (one per call: eager calls share no limiter)."""
    if task.run_in == "thread":
        return ThreadExecutor(1).body(task.action, task.name)
    if task.run_in == "process":  # trio-parallel's default worker context
        return ProcessExecutor(1).body(task.action, task.name)
    return LoopExecutor().body(task.action, task.name)


def _goes_up(exc: BaseException) -> bool:
    """Whether an exception that is not an ``Exception`` goes past the task, as in a
    runner: a cancellation, or the end of the process (alone, or in a group)."""
    passing = (trio.Cancelled, KeyboardInterrupt, SystemExit, GeneratorExit)
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(passing) is not None
    return isinstance(exc, passing)


async def _attempt(task: EagerTask, payload: Any, max_result_bytes: int) -> Any:
    """One attempt, as a runner runs it: the payload decoded into its declared type, the
    task's timeout, and, for a task that keeps its result, the result as a handle's
    ``result()`` returns it (through JSON, at most ``max_result_bytes`` of it, decoded
    into the declared return type)."""
    if task.decode_payload is not None:
        payload = task.decode_payload(payload)
    body = _body(task)
    if task.timeout is None:
        result = await body(payload)
    else:
        result = await timed(body, payload, task.name, task.timeout)
    if task.keep_result is None:
        return result
    import msgspec  # noqa: PLC0415 - only tasks that keep their result

    data = task.result_codec.encode_json(result, max_result_bytes)
    return task.result_codec.decode(msgspec.json.decode(data))
