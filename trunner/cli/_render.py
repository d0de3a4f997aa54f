"""What the commands share at the terminal: text read from Redis shown safely (its
control characters escaped, never markup), times in UTC, and a yes/no question asked."""

from __future__ import annotations

from rich.text import Text

from .._util import utc_text

#: How the command shows a time (UTC): the one guarded formatter, the dashboard's too.
_when = utc_text

#: Control characters (C0, DEL, C1) as escapes: text read from Redis is anybody's, and a
#: newline or a terminal escape sequence in it would forge lines or drive the terminal.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}


def _shown(text: object) -> str:
    """``text`` as one line of the terminal: its control characters escaped."""
    return str(text).translate(_CONTROLS)


def _cell(text: object) -> Text:
    """A table cell of text read from Redis: plain text (never Rich markup, whatever the
    console), its control characters escaped."""
    return Text(_shown(text))


def _ask(question: str) -> str | None:
    """The user's answer, or None when there is nobody to ask (stdin closed)."""
    try:
        return input(question)
    except EOFError:
        print()
        return None
