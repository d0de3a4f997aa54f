"""Each public class and function defined in a private module names its public home as
its ``__module__`` (Trio's ``fixup_module_metadata``): ``trunner.Task``, not
``trunner._task.Task``, in tracebacks, reprs, ``help()`` and pickles.

A public namespace (``trunner``, ``trunner.admin``, ``trunner.keys``, ...) calls
``fixup_module_metadata(__name__, globals())`` once its names are bound. Only objects
defined in a private module (a ``_``-prefixed part, as ``trunner._wire.inspection``) are
renamed: those defined in a public module (``trunner.errors``, ``trunner.runner``) already
name a path users can import. An object exported by two namespaces takes the shallower
one, so the top level wins: ``WorkerSettings`` is ``trunner.WorkerSettings``, though
``trunner.serve`` exports it too. Methods keep their own ``__module__`` (Trio task names
and log records are built from it).

A renamed class keeps its annotations readable: ``typing.get_type_hints`` looks a
class's string annotations up in the module its ``__module__`` names, which does not
import what the defining module did, so they are resolved where they were written first.
A class whose annotations cannot be resolved at import keeps its private path.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Mapping

__all__ = ["fixup_module_metadata"]

#: Objects renamed here, by id, with the namespace that renamed them.
_homes: dict[int, str] = {}


def fixup_module_metadata(module_name: str, namespace: Mapping[str, object]) -> None:
    """Set ``__module__`` to ``module_name`` for each class and function of
    ``namespace["__all__"]`` defined in a private module of the package."""
    for name in typing.cast("list[str]", namespace["__all__"]):
        value = namespace[name]
        if isinstance(value, type | types.FunctionType) and _claims(module_name, value):
            if isinstance(value, type) and not _resolve_annotations(value):
                continue
            value.__module__ = module_name
            _homes[id(value)] = module_name


def _claims(module_name: str, value: type | types.FunctionType) -> bool:
    """Whether ``module_name`` is a better home than where ``value`` says it lives."""
    current = value.__module__
    home = _homes.get(id(value))
    if home is not None:
        return home.count(".") > module_name.count(".")
    package = module_name.partition(".")[0]
    parts = current.split(".")
    return parts[0] == package and any(p.startswith("_") for p in parts)


def _resolve_annotations(cls: type) -> bool:
    """Replace ``cls``'s own string annotations with what they name, as read in the
    module that defines it; False (nothing changed) when one cannot be resolved."""
    own = inspect.get_annotations(cls)
    if not own or not any(isinstance(a, str) for a in own.values()):
        return True
    try:  # each class of the MRO read in its own module's namespace
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception:  # noqa: BLE001 - a name only a type checker imports: leave it be
        return False
    cls.__annotations__ = {name: hints[name] for name in own}
    return True
