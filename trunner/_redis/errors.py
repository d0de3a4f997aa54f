"""One translation of what the Redis clients raise into :mod:`trunner.errors`.

Every transport maps the errors of the library it runs on here, and nowhere else: the same
error reply becomes the same trunner exception whichever transport received it. The shape
is a helper, :func:`map_exceptions`, and one map per client library:

* :func:`socket_errors`: Trio sockets and the hiredis parser (the native transport);
* :func:`redis_py_errors`: redis-py's exceptions (the bridged transport, fakeredis behind
  ``memory://``, and the blocking probe of the test helpers).

Error *replies* are values, not exceptions, in a pipeline's reply list: :func:`reply_error`
decides what an error reply means from its text, and :func:`hiredis_reply` and
:func:`redis_py_reply` put trunner's exception in the place of each error in a reply.

A map is built on first use, inside the ``except`` clause, so that a process imports a
client library's exception classes only when that library is in use: a worker on one server
never imports redis-py.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import hiredis
import trio

from ..errors import BackendError, RedisCommandError, RedisUnavailable

__all__ = [
    "ExceptionMap",
    "ScriptNotLoaded",
    "hiredis_reply",
    "map_exceptions",
    "redis_py_errors",
    "redis_py_reply",
    "reply_error",
    "socket_errors",
]

#: Error replies that mean "not now" rather than "wrong command": the server is loading,
#: has lost its master, refuses to log in, or the Cluster is reconfiguring.
UNAVAILABLE_REPLIES = ("LOADING", "MASTERDOWN", "NOAUTH", "WRONGPASS", "TRYAGAIN", "CLUSTERDOWN")

#: What a client library raised, and where (the command), to trunner's exception.
Translate = Callable[[Any, str], BaseException]
#: Exception types to their translation, tried in order: put subclasses first.
ExceptionMap = Mapping[type[BaseException] | tuple[type[BaseException], ...], Translate]


class ScriptNotLoaded(RedisCommandError):
    """EVALSHA of a script Redis does not know (restarted, or SCRIPT FLUSH)."""


def reply_error(text: str, where: str) -> BackendError:
    """The exception for an error reply whose text is ``text``, to the command ``where``.

    ``NOSCRIPT`` is :class:`ScriptNotLoaded`; the replies of :data:`UNAVAILABLE_REPLIES`
    are :class:`~trunner.RedisUnavailable`; every other one is a
    :class:`~trunner.errors.RedisCommandError`.
    """
    if text.startswith("NOSCRIPT"):
        return ScriptNotLoaded(f"{where}: {text}")
    if text.startswith(UNAVAILABLE_REPLIES):
        return RedisUnavailable(f"{where}: {text}")
    return RedisCommandError(f"{where}: {text}")


def translate(error: BaseException, mapping: ExceptionMap, where: str) -> BaseException | None:
    """``error`` as trunner's exception by the first entry of ``mapping`` that matches it;
    None when none does."""
    for types, make in mapping.items():
        if isinstance(error, types):
            return make(error, where)
    return None


@contextlib.contextmanager
def map_exceptions(
    mapping: Callable[[], ExceptionMap], where: str = "", *, chain: bool = True
) -> Iterator[None]:
    """Translate what the block raises by ``mapping()`` (built only if something is raised).

    Exceptions the map does not name, and BaseExceptions (``trio.Cancelled``), pass
    through. With ``chain=False`` the library's exception is not kept as ``__cause__``:
    the message already says what it was, and the traceback stays short.
    """
    try:
        yield
    except Exception as exc:
        mapped = translate(exc, mapping(), where)
        if mapped is None:
            raise
        if chain:
            raise mapped from exc
        raise mapped from None


# -- Trio sockets and hiredis ------------------------------------------------------------------


@functools.cache
def socket_errors() -> ExceptionMap:
    """A broken socket or a garbled reply: :class:`~trunner.RedisUnavailable`.

    The messages do not name the command: the caller adds it, with what it knows of the
    round trip (a timeout, a closed transport).
    """
    return {
        (trio.BrokenResourceError, trio.ClosedResourceError, OSError): lambda exc, _: (
            RedisUnavailable(f"connection lost: {type(exc).__name__}: {exc}")
        ),
        hiredis.ProtocolError: lambda exc, _: RedisUnavailable(f"protocol error: {exc}"),
    }


def hiredis_reply(reply: Any, where: str) -> Any:
    """A reply parsed by hiredis, with trunner's exception in the place of an error reply,
    and of each error reply inside the reply of an EXEC."""
    if isinstance(reply, hiredis.ReplyError):
        return reply_error(str(reply), where)
    if where == "EXEC" and isinstance(reply, list):
        return [
            reply_error(str(r), where) if isinstance(r, hiredis.ReplyError) else r for r in reply
        ]
    return reply


# -- redis-py --------------------------------------------------------------------------------


@functools.cache
def redis_py_errors() -> ExceptionMap:
    """redis-py's exceptions (fakeredis raises the same ones).

    redis-py strips the code from the replies it has a class for (``NoScriptError``,
    ``BusyLoadingError`` ...), so those are mapped by class; any other error reply keeps
    its text and means what :func:`reply_error` says it means, as on the native transport.
    """
    from redis import exceptions as e  # noqa: PLC0415 - only where redis-py is in use

    def unavailable(exc: BaseException, where: str) -> BaseException:
        return RedisUnavailable(f"{where}: {exc}")

    def unavailable_reply(exc: BaseException, where: str) -> BaseException:
        return RedisUnavailable(f"{where}: {type(exc).__name__}: {exc}")

    def response(exc: BaseException, where: str) -> BaseException:
        # The server's text (some redis-py versions print an error made by a parser
        # outside a connection as its type, e.g. "server:ResponseError").
        text = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
        return reply_error(text, where)

    def backend(exc: BaseException, where: str) -> BaseException:
        return BackendError(f"{where}: {type(exc).__name__}: {exc}")

    return {
        e.NoScriptError: lambda exc, where: ScriptNotLoaded(f"{where}: {exc}"),
        (e.ConnectionError, e.TimeoutError): unavailable,
        (OSError, EOFError): unavailable_reply,  # TimeoutError is an OSError
        # The replies of UNAVAILABLE_REPLIES that redis-py's Cluster client has a class for.
        (e.TryAgainError, e.ClusterDownError): unavailable_reply,
        e.ResponseError: response,
        (e.RedisError, e.RedisClusterException): backend,
    }


def redis_py_reply(reply: Any, where: str) -> Any:
    """A reply in a redis-py pipeline's list: an exception becomes trunner's; so do those
    inside the reply of an EXEC."""
    if isinstance(reply, BaseException):
        return _redis_py_error(reply, where)
    if where.upper() == "EXEC" and isinstance(reply, list):
        return [_redis_py_error(r, where) if isinstance(r, BaseException) else r for r in reply]
    return reply


def _redis_py_error(error: BaseException, where: str) -> BaseException:
    return translate(error, redis_py_errors(), where) or error
