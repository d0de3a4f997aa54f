"""The stored forms of workflows (used by workflows, being built: see design/workflows.md;
nothing but the tests uses them yet): the step reference a step's message carries, the
template of a step's message written before its payload exists, and a workflow's keys.

A step's message is an ordinary task message with one more envelope member, ``wf``, after
``headers`` (:class:`StepRef`, written as an array)::

    {"task":"parse","payload":...,"id":"w3f9a.17","wf":["w3f9a",17,"18",true],"group":"g"}

It travels in :class:`~trunner.message.MessageOptions` (``workflow``), so retries, deferrals
and replays, which re-encode a message from its options, keep it.

A template (:func:`encode_template`) is a sequence of parts, length-prefixed so that the
script assembling the message copies every byte as written (no JSON parser touches it)::

    template := part*
    part     := "L" <len> ":" <bytes>                     a literal
              | "R" <first> "-" <last> "," <len> ":" <sep>  results of nodes first..last,
                                                          joined by sep
              | "N"                                       now: seconds since the epoch,
                                                          three decimals
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator
from typing import Any, Final

import attrs
import msgspec

from .names import utf8_error

__all__ = [
    "FORGET_NOTICE",
    "MAX_NODE",
    "NOW",
    "Literal",
    "Now",
    "Part",
    "Results",
    "StepRef",
    "WorkflowKeys",
    "decode_template",
    "encode_template",
    "read_step_ref",
    "workflow_id_error",
    "workflow_mark",
]

#: The largest node index: node ``i`` owns bits ``2i`` and ``2i + 1`` of its workflow's
#: bitmap, whose offsets Redis keeps below 2**32.
MAX_NODE: Final = 2**31 - 1
#: ``next``: node indices and ranges, ``"j,k"``, ``"j-k"``, ``"3,5-9"``; ``""`` for none.
_INDEX = "(?:0|[1-9][0-9]{0,9})"
_NEXT = re.compile(f"(?:{_INDEX}(?:-{_INDEX})?(?:,{_INDEX}(?:-{_INDEX})?)*)?")


def workflow_id_error(value: object) -> str | None:
    """See :func:`_workflow_id_error`; a str's answer is remembered (every step of a
    workflow carries its id, and each step's reference checks it)."""
    return _checked_id(value) if type(value) is str else _workflow_id_error(value)


@functools.lru_cache(maxsize=256)
def _checked_id(value: str) -> str | None:
    return _workflow_id_error(value)


def _workflow_id_error(value: object) -> str | None:
    """Why ``value`` is not a workflow id (a non-empty str without whitespace that UTF-8 can
    encode: it travels, as task ids do, on the ``done`` channel, space-separated; and
    without ``.``, so that no workflow's id is another's step's, ``<workflow id>.<i>``), or
    None."""
    if not isinstance(value, str) or not value or any(ch.isspace() for ch in value):
        return f"a workflow id must be a non-empty str without whitespace, got {value!r:.60}"
    if "." in value:
        return (
            f"a workflow id has no '.' (its steps' task ids are '<workflow id>.<step>'), "
            f"got {value!r:.60}"
        )
    return utf8_error(value)


#: A notice on the cancel channel (after the notice byte of ``trunner._wire.pause``): the
#: workflow mark that follows settled, and its runners forget it.
FORGET_NOTICE: Final = b"\xffforget "


def workflow_mark(group: str, workflow_id: str) -> str:
    """The cancel mark of a workflow of ``group``: ``"<group> <id>"``. It cancels every step
    of that workflow (a failure with fail-fast, or a cancel of the whole). A task id holds no
    whitespace, so no task's mark is ever a workflow's, and the group's name keeps another
    group's workflow of the same id on the same queue apart."""
    return f"{group} {workflow_id}"


class StepRef(msgspec.Struct, array_like=True, omit_defaults=True, frozen=True):
    """Which step of which workflow a message is, stored as the envelope member ``wf``:
    ``[workflow, node, next, keep]``.

    Checked when made and when read (a ``ValueError`` made, a ``msgspec.ValidationError``
    read): the id as :func:`workflow_id_error` says, ``0 <= node <= MAX_NODE``, and every
    successor after its node (the plan is in topological order, so no step can lead back).
    """

    workflow: str
    """The workflow's id, ``W``; the step's task id is ``W.<node>``."""
    node: int
    """The step's index in the workflow's plan, from 0."""
    next: str = ""
    """Its successors: indices and ranges (``"j,k"``, ``"j-k"``); ``""`` for an output."""
    keep: bool = False
    """Whether its result is stored: a successor reads it, or it is an output."""

    def __post_init__(self) -> None:
        if (why := workflow_id_error(self.workflow)) is not None:
            raise ValueError(why)
        if type(self.node) is not int or not 0 <= self.node <= MAX_NODE:
            raise ValueError(f"node must be an int from 0 to {MAX_NODE}, got {self.node!r:.30}")
        after = self.node  # each range after the one before: no successor named twice
        for first, last in self.ranges():
            if not after < first <= last <= MAX_NODE:
                raise ValueError(
                    f"next {self.next!r:.60}: node {self.node}'s successors must come after "
                    f"it, ranges ascending and apart, up to {MAX_NODE}"
                )
            after = last

    def ranges(self) -> list[tuple[int, int]]:
        """``next`` as ``(first, last)`` ranges; ValueError when it is not indices and
        ranges."""
        if type(self.next) is not str or _NEXT.fullmatch(self.next) is None:
            raise ValueError(f"next must be indices and ranges ('3,5-9'), got {self.next!r:.60}")
        if not self.next:
            return []
        ranges = []
        for item in self.next.split(","):
            first, _, last = item.partition("-")
            ranges.append((int(first), int(last or first)))
        return ranges

    def successors(self) -> Iterator[int]:
        """The successors' indices, in the order ``next`` gives them."""
        for first, last in self.ranges():
            yield from range(first, last + 1)


def read_step_ref(value: Any) -> StepRef | None:
    """The ``wf`` member of a stored message as Python's json read it (None when absent);
    ValueError saying why it is not a step reference."""
    if value is None:
        return None
    try:
        return msgspec.convert(value, StepRef)
    except msgspec.ValidationError as exc:
        raise ValueError(f"'wf' is not a workflow step [id, node, next, keep]: {exc}") from None


@attrs.frozen
class Literal:
    """Bytes of a template copied as they are."""

    data: bytes


@attrs.frozen
class Results:
    """The results of nodes ``first`` to ``last``, each as its task's codec wrote it,
    joined by ``sep``."""

    first: int
    last: int
    sep: bytes = b""

    def __attrs_post_init__(self) -> None:
        if not 0 <= self.first <= self.last <= MAX_NODE:
            raise ValueError(f"results {self.first}-{self.last}: need 0 <= first <= last")


@attrs.frozen
class Now:
    """The time the message is added: seconds since the epoch, three decimals."""


#: The one :class:`Now`.
NOW: Final = Now()
Part = Literal | Results | Now


def encode_template(parts: Iterable[Part]) -> bytes:
    """The stored template of ``parts`` (see the module docs), adjacent literals joined
    and empty ones left out: one form for one message."""
    out: list[bytes] = []
    literal: list[bytes] = []

    def flush() -> None:
        if data := b"".join(literal):
            out.append(b"L%d:%s" % (len(data), data))
        literal.clear()

    for part in parts:
        if isinstance(part, Literal):
            literal.append(part.data)
            continue
        flush()
        if isinstance(part, Results):
            out.append(b"R%d-%d,%d:%s" % (part.first, part.last, len(part.sep), part.sep))
        else:
            out.append(b"N")
    flush()
    return b"".join(out)


_COUNT = re.compile(rb"(0|[1-9][0-9]{0,9}):")
_RANGE = re.compile(rb"(0|[1-9][0-9]{0,9})-(0|[1-9][0-9]{0,9}),(0|[1-9][0-9]{0,9}):")
_NOTHING = re.compile(rb"(?!)")


def decode_template(data: bytes) -> list[Part]:
    """The parts of a stored template; ValueError saying where it is not one."""
    parts: list[Part] = []
    at = 0
    while at < len(data):
        kind, at = data[at : at + 1], at + 1
        if kind == b"N":
            parts.append(NOW)
            continue
        match = {b"L": _COUNT, b"R": _RANGE}.get(kind, _NOTHING).match(data, at)
        if match is None:
            raise ValueError(f"template: no part at byte {at - 1}")
        size, at = int(match.group(match.lastindex or 1)), match.end()
        if at + size > len(data):
            raise ValueError(f"template: the part at byte {at} runs past the end")
        chunk, at = data[at : at + size], at + size
        if kind == b"L":
            parts.append(Literal(chunk))
        else:
            parts.append(Results(int(match.group(1)), int(match.group(2)), chunk))
    return parts


@attrs.frozen
class WorkflowKeys:
    """The five keys of one workflow, among its group's own (``Keys.workflow``): its state,
    its plan (the templates and input counts of the nodes not started), its marks (two
    bits per node: started, ended), the results its nodes still need, and its failures."""

    wf: str
    """``<group's base>wf:<W>``, a hash: state, counts, options."""
    plan: str
    """``…wf:<W>:plan``, a hash: ``t:<i>`` templates, ``w:<i>`` inputs awaited,
    ``r:<i>`` readers left."""
    marks: str
    """``…wf:<W>:marks``, a bitmap: bit ``2i`` node ``i`` started, ``2i + 1`` ended."""
    res: str
    """``…wf:<W>:res``, a hash: node -> its result's JSON, while a reader needs it."""
    err: str
    """``…wf:<W>:err``, a hash: node -> its failure, as JSON."""

    @classmethod
    def at(cls, base: str, workflow_id: str) -> WorkflowKeys:
        """The keys of workflow ``workflow_id``, the first ``<base><id>`` and the others
        named after it (in its hash slot); ValueError for an id :func:`workflow_id_error`
        refuses."""
        if (why := workflow_id_error(workflow_id)) is not None:
            raise ValueError(why)
        wf = f"{base}{workflow_id}"
        return cls(wf, f"{wf}:plan", f"{wf}:marks", f"{wf}:res", f"{wf}:err")

    def names(self) -> tuple[str, str, str, str, str]:
        """The five names, in the order the scripts take them."""
        return self.wf, self.plan, self.marks, self.res, self.err
