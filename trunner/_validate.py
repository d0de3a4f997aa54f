"""Checks that raise clear errors naming the offending field.

Each ``check_*`` takes the field's name and its value; :func:`field` turns one into an
attrs validator.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import attrs

from ._wire.names import check_name

Check = Callable[[str, Any], object]


def field(check: Check) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """An attrs validator running ``check(attribute name, value)``."""

    def validate(_inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
        check(attr.name, value)

    return validate


def optional(check: Check) -> Check:
    def validate(name: str, value: Any) -> None:
        if value is not None:
            check(name, value)

    return validate


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_positive_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def check_non_negative_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


def check_positive_number(name: str, value: Any) -> None:
    if not _is_number(value):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def check_non_negative_number(name: str, value: Any) -> None:
    if not _is_number(value):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def check_callable(name: str, value: Any) -> None:
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__}")


def is_async_callable(obj: object) -> bool:
    """An ``async def`` function, or an instance with an ``async def __call__``."""
    if inspect.iscoroutinefunction(obj):
        return True
    if inspect.isclass(obj):  # calling a class builds an instance, not an awaitable
        return False
    call = getattr(obj, "__call__", None)  # noqa: B004 - async __call__ on an instance
    return call is not None and inspect.iscoroutinefunction(call)


def check_async_callable(name: str, value: Any) -> None:
    if not is_async_callable(value):
        raise TypeError(f"{name} must be an async function, got {value!r}")


positive_int = field(check_positive_int)
optional_positive_int = field(optional(check_positive_int))
non_negative_int = field(check_non_negative_int)
positive_number = field(check_positive_number)
optional_positive_number = field(optional(check_positive_number))
non_negative_number = field(check_non_negative_number)
boolean = field(check_bool)
name = field(check_name)
optional_name = field(optional(check_name))
optional_callable = field(optional(check_callable))
optional_async_callable = field(optional(check_async_callable))
