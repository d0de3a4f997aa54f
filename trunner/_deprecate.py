"""Public names that moved keep resolving at their old path for one release, with a
``DeprecationWarning`` that names their new home (the idea of Trio's
``deprecate_attributes``, on a module ``__getattr__``).

A module lists its moved names once::

    deprecate_attributes(__name__, {"Stats": Deprecated(GroupStats, "trunner.admin.GroupStats")})

and keeps them visible to type checkers under ``if TYPE_CHECKING:`` (``from .admin import
GroupStats as GroupStats``), so that a user's mypy passes until the release that removes
them. The removal deletes both, with a changelog entry.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any

import attrs

__all__ = ["Deprecated", "deprecate_attributes", "moved_to"]


@attrs.frozen
class Deprecated:
    """A module attribute that moved or was renamed, and what to use instead."""

    value: object
    """What the old name still resolves to."""
    instead: str
    """What the warning says to use instead: a dotted path (``trunner.errors.BadData``),
    or a name with a note."""


def moved_to(home: ModuleType, names: Iterable[str]) -> dict[str, Deprecated]:
    """The entries of names that moved, unchanged, to the module ``home``."""
    return {name: Deprecated(getattr(home, name), f"{home.__name__}.{name}") for name in names}


def deprecate_attributes(module_name: str, attributes: Mapping[str, Deprecated]) -> None:
    """Make the names of ``attributes`` resolve from the module ``module_name`` (which does
    not hold them itself), each with a ``DeprecationWarning``.

    Installs the module's ``__getattr__`` (PEP 562), which Python calls only for a name
    the module does not hold: other names cost nothing. A name that is not deprecated goes
    to the ``__getattr__`` the module defined itself, if any (say, for a submodule loaded
    on first use), else raises the usual ``AttributeError``. ``from module import name``
    warns too.
    """
    module = sys.modules[module_name]
    table = dict(attributes)
    own = vars(module).get("__getattr__")
    held = sorted(name for name in table if name in vars(module))
    if held:
        raise RuntimeError(f"{module_name} still holds the deprecated names {held}")

    def __getattr__(name: str) -> Any:
        entry = table.get(name)
        if entry is None and own is not None:
            return own(name)
        if entry is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        warnings.warn(
            f"{module_name}.{name} is deprecated, use {entry.instead}",
            DeprecationWarning,
            stacklevel=2,
        )
        return entry.value

    vars(module)["__getattr__"] = __getattr__
    vars(module)["__deprecated_attributes__"] = table
