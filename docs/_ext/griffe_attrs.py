"""A Griffe extension for the API reference: attributes as a reader wants to see them.

Griffe reads the code without running it, so it sees ``num_workers: int =
attrs.field(default=10, validator=...)`` and no ``__init__``. For every class decorated
with ``attrs.frozen`` / ``attrs.define`` (with or without arguments) this extension shows
each field with its default value only, and gives the class the ``__init__`` attrs
generates, so that the reference shows ``RunnerConfig(*, consumer_group, num_workers=10,
...)``. An attribute that ``__init__`` assigns (``self.config = config``) is shown without
that code, with the type of the parameter it is assigned from, or of the class it is an
instance of. Loaded by ``mkdocs.yml`` (mkdocstrings' ``extensions`` option).

It also drops the labels that say where an attribute is defined (class, instance,
module): they tell a reader nothing the heading does not.
"""

from __future__ import annotations

from typing import Any

from griffe import (
    Attribute,
    Class,
    Expr,
    ExprCall,
    ExprName,
    Extension,
    Function,
    Module,
    Parameter,
    ParameterKind,
    Parameters,
)

ATTRS_DECORATORS = {
    "attrs.frozen",
    "attrs.define",
    "attrs.mutable",
    "attr.frozen",
    "attr.define",
    "attr.mutable",
}
FIELD_FUNCTIONS = {"attrs.field", "attr.field", "attr.ib"}
WHERE_LABELS = {"class-attribute", "instance-attribute", "module-attribute"}


def _decorator(cls: Class) -> Expr | None:
    for decorator in cls.decorators:
        value = decorator.value
        target = value.function if isinstance(value, ExprCall) else value
        if isinstance(target, Expr) and target.canonical_path in ATTRS_DECORATORS:
            return value
    return None


def _arguments(call: Expr | str | None) -> dict[str, Any]:
    if not isinstance(call, ExprCall):
        return {}
    return {a.name: a.value for a in call.arguments if hasattr(a, "name")}


def _is_field_call(value: Expr | str | None) -> bool:
    return isinstance(value, ExprCall) and value.function.canonical_path in FIELD_FUNCTIONS


def _fields(cls: Class) -> list[Attribute]:
    fields = []
    for member in cls.members.values():
        if member.is_alias or not isinstance(member, Attribute) or member.annotation is None:
            continue
        if "property" in member.labels or "instance-attribute" not in member.labels:
            continue  # a property, a ClassVar, or an attribute set in a method
        fields.append(member)
    return fields


def _apply(cls: Class) -> None:
    decorator = _decorator(cls)
    if decorator is None or "__init__" in cls.members:
        return
    class_kw_only = str(_arguments(decorator).get("kw_only")) == "True"
    positional: list[Parameter] = []
    keyword: list[Parameter] = []
    for attr in _fields(cls):
        options = _arguments(attr.value) if _is_field_call(attr.value) else None
        if options is None:
            default = attr.value
        elif "default" in options:
            default = options["default"]
        elif "factory" in options:
            default = ExprCall(function=options["factory"], arguments=[])
        else:
            default = None
        attr.value = default
        if options is not None and str(options.get("init")) == "False":
            continue
        kw_only = class_kw_only or (options is not None and str(options.get("kw_only")) == "True")
        parameter = Parameter(
            attr.name.lstrip("_"),
            annotation=attr.annotation,
            kind=ParameterKind.keyword_only if kw_only else ParameterKind.positional_or_keyword,
            default=default,
            docstring=attr.docstring,
        )
        (keyword if kw_only else positional).append(parameter)
    init = Function(
        "__init__",
        lineno=0,
        endlineno=0,
        parent=cls,
        parameters=Parameters(
            Parameter("self", kind=ParameterKind.positional_or_keyword), *positional, *keyword
        ),
        returns="None",
    )
    cls.set_member("__init__", init)


def _instance_attributes(cls: Class) -> None:
    """Attributes assigned in ``__init__``: no value, and the type of their parameter."""
    init = cls.members.get("__init__")
    parameters = {p.name: p for p in init.parameters} if isinstance(init, Function) else {}
    for member in cls.members.values():
        if member.is_alias or not isinstance(member, Attribute):
            continue
        if member.labels & {"class-attribute", "property"} or member.value is None:
            continue
        value = member.value
        if member.annotation is None and isinstance(value, ExprName | str):
            parameter = parameters.get(str(value))
            if parameter is not None:
                member.annotation = parameter.annotation
        elif member.annotation is None and isinstance(value, ExprCall):
            name = value.function.canonical_path.rsplit(".", 1)[-1]
            if name[:1].isupper():  # an instance of a class: ``Keys(...)``
                member.annotation = value.function
        member.value = None


def _walk(obj: Module | Class, seen: set[str]) -> None:
    if obj.path in seen:
        return
    seen.add(obj.path)
    if isinstance(obj, Class):
        _instance_attributes(obj)
        _apply(obj)
    for member in obj.members.values():
        if member.is_alias:
            continue
        if isinstance(member, Attribute):
            member.labels -= WHERE_LABELS
        elif isinstance(member, Module | Class):
            _walk(member, seen)


class AttrsExtension(Extension):
    """Fields with their defaults, and the ``__init__`` attrs generates."""

    def on_package(self, *, pkg: Module, **kwargs: Any) -> None:
        _walk(pkg, set())
