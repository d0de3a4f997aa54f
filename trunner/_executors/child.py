"""The worker process's side of a ``run_in="process"`` task: find the action by its module
path, decode its payload from JSON, run it with its message current, and hand back its
result (or its exception) as JSON.

Only strings, bytes and an int cross (pickled by trio-parallel as its transport): the
action's module path, the message as stored (its JSON envelope), and the payload and the
result as JSON through the task's codec. No user object is ever pickled, in either
direction. An exception the action raises comes back described (its class's module path,
its ``args`` and its attributes when they have a JSON form, its message and its formatted
traceback) and is rebuilt by the runner (:mod:`trunner._executors.processes`).

In the process ``current_message()`` works; ``current_runner()`` (and so
``report_progress``, the Redis handle, ``dispatch``) raises
:class:`~trunner._context.NoRunnerInWorkerProcess`: the runner lives in the worker.
"""

from __future__ import annotations

import contextlib
import importlib
import traceback
from typing import Any

import msgspec

from .._context import Given, _current_message, _in_worker_process
from .._wire.codec import codec_for
from .._wire.decode import decode_message
from .._wire.envelope import PAYLOAD_FIELD

__all__ = ["MAX_TRACEBACK", "resolve", "run"]

#: The most of a formatted traceback that comes back (its end), as for a kept outcome.
MAX_TRACEBACK = 8000


def resolve(module: str, qualname: str) -> Any:
    """The object ``qualname`` names in the module ``module`` (imported if need be)."""
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def run(
    module: str, qualname: str, message_id: str, raw: bytes, deliveries: int, payload: bytes
) -> tuple[bool, bytes]:
    """In the worker process: ``(True, result as JSON)``, or ``(False, the exception
    described as JSON)``."""
    try:
        action = resolve(module, qualname)
    except Exception as exc:  # noqa: BLE001 - described, for the runner to report
        return False, _described(exc, f"cannot import the task's action {module}:{qualname}")
    try:
        message = decode_message(message_id, [PAYLOAD_FIELD, raw], deliveries=deliveries)
        payload_codec, result_codec, _problem = codec_for(action)
    except Exception as exc:  # noqa: BLE001 - described as JSON, never pickled back
        return False, _described(exc, "cannot prepare the call in the worker process")
    given = _current_message.set(Given(message))
    inside = _in_worker_process.set(True)
    try:
        value = msgspec.json.decode(payload)
        result = action(value if payload_codec.passes_through else payload_codec.decode(value))
        return True, result_codec.encode_json(result)
    except BaseException as exc:  # noqa: BLE001 - SystemExit too: the attempt's failure
        return False, _described(exc)
    finally:
        _in_worker_process.reset(inside)
        _current_message.reset(given)


def _described(exc: BaseException, context: str = "") -> bytes:
    """``exc`` as JSON: its class's module path, ``args`` and attributes (``state``: both
    null unless both have a JSON form), message and formatted traceback (the last
    :data:`MAX_TRACEBACK` characters)."""
    cls = type(exc)
    args = state = b"null"  # with a context: not rebuilt (the context would be lost)
    if not context:
        with contextlib.suppress(TypeError, ValueError, OverflowError):
            state = msgspec.json.encode(getattr(exc, "__dict__", {}))
            args = msgspec.json.encode(list(exc.args))
    text = "".join(traceback.format_exception(exc))[-MAX_TRACEBACK:]
    return msgspec.json.encode(
        {
            "module": cls.__module__,
            "qualname": cls.__qualname__,
            "args": msgspec.Raw(args),
            "state": msgspec.Raw(state),
            "message": f"{context}: {exc}" if context else str(exc),
            "traceback": text,
        }
    )
