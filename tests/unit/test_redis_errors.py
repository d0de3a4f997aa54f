"""One error map: an error reply means the same whichever transport received it."""

from __future__ import annotations

import hiredis
import pytest
import redis.exceptions
import trio
from redis._parsers.base import BaseParser

import trunner
from trunner._redis import ScriptNotLoaded
from trunner._redis.errors import (
    hiredis_reply,
    map_exceptions,
    redis_py_errors,
    redis_py_reply,
    socket_errors,
)

REPLIES = [
    ("NOSCRIPT No matching script. Please use EVAL.", ScriptNotLoaded),
    ("LOADING Redis is loading the dataset in memory", trunner.RedisUnavailable),
    ("MASTERDOWN Link with MASTER is down", trunner.RedisUnavailable),
    ("TRYAGAIN Multiple keys request during rehashing of slot", trunner.RedisUnavailable),
    ("CLUSTERDOWN The cluster is down", trunner.RedisUnavailable),
    ("NOAUTH Authentication required.", trunner.RedisUnavailable),
    ("WRONGPASS invalid username-password pair", trunner.RedisUnavailable),
    ("WRONGTYPE Operation against a key holding the wrong kind of value", None),
    ("BUSYGROUP Consumer Group name already exists", None),
    ("NOPERM this user has no permissions", None),
    ("ERR unknown command 'NOPE'", None),
]


def _redis_py_raised(text: str) -> BaseException:
    """The exception redis-py (and fakeredis) makes of the error reply ``text``."""
    error: BaseException = BaseParser.parse_error(text)  # type: ignore[no-untyped-call]
    return error


@pytest.mark.parametrize(("text", "expected"), REPLIES)
def test_an_error_reply_means_the_same_on_every_transport(
    text: str, expected: type[BaseException] | None
) -> None:
    native = hiredis_reply(hiredis.ReplyError(text), "CMD")
    with pytest.raises(trunner.BackendError) as info, map_exceptions(redis_py_errors, "CMD"):
        raise _redis_py_raised(text)
    bridged = info.value
    in_pipeline = redis_py_reply(_redis_py_raised(text), "CMD")
    for error in (native, bridged, in_pipeline):
        if expected is None:
            assert type(error) is trunner.errors.RedisCommandError, (text, error)
        else:
            assert type(error) is expected, (text, error)
        assert str(error).startswith("CMD: ")
    assert isinstance(bridged.__cause__, redis.exceptions.RedisError)
    assert str(native).removeprefix("CMD: ") == text  # hiredis keeps the whole reply


def test_errors_inside_the_reply_of_an_exec_are_translated_in_place() -> None:
    exec_reply = [b"OK", hiredis.ReplyError("WRONGTYPE Operation against a key")]
    assert hiredis_reply(exec_reply, "EXEC")[0] == b"OK"
    assert isinstance(hiredis_reply(exec_reply, "EXEC")[1], trunner.errors.RedisCommandError)
    other = [b"OK", redis.exceptions.ResponseError("WRONGTYPE Operation against a key")]
    assert isinstance(redis_py_reply(other, "exec")[1], trunner.errors.RedisCommandError)
    assert redis_py_reply(b"OK", "GET") == b"OK"


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (redis.exceptions.ConnectionError("Connection refused"), trunner.RedisUnavailable),
        (redis.exceptions.TimeoutError("Timeout reading"), trunner.RedisUnavailable),
        (ConnectionResetError("reset by peer"), trunner.RedisUnavailable),
        (EOFError(), trunner.RedisUnavailable),
        (redis.exceptions.DataError("bad argument"), trunner.BackendError),
        (redis.exceptions.RedisClusterException("no slots"), trunner.BackendError),
    ],
)
def test_redis_py_failures_become_trunner_errors(
    raised: BaseException, expected: type[BaseException]
) -> None:
    with pytest.raises(trunner.BackendError) as info, map_exceptions(redis_py_errors, "CMD"):
        raise raised
    assert type(info.value) is expected
    assert info.value.__cause__ is raised


def test_socket_failures_become_redis_unavailable_without_a_cause() -> None:
    for raised in (trio.BrokenResourceError("gone"), OSError("down"), hiredis.ProtocolError("?")):
        with (
            pytest.raises(trunner.RedisUnavailable) as info,
            map_exceptions(socket_errors, chain=False),
        ):
            raise raised
        assert info.value.__cause__ is None
        assert info.value.__suppress_context__


def test_other_exceptions_pass_through() -> None:
    with pytest.raises(KeyError), map_exceptions(redis_py_errors, "CMD"):
        raise KeyError("not a Redis error")
    with pytest.raises(ValueError, match="plain"), map_exceptions(socket_errors):
        raise ValueError("plain")
