"""Text from users, sources or the database made safe to print on one terminal line.

Control characters are shown escaped, never interpreted (ESC and CSI start terminal
sequences; the Unicode line separators and bidirectional overrides rearrange what a
terminal shows), and a long value is cut, saying how much was left out. The CLI's
output and the importers' reports both go through :func:`printable`.
"""

from __future__ import annotations

import re

__all__ = ["LINE_LIMIT", "VALUE_LIMIT", "escape_but_layout", "printable"]

#: The most of one value (a word of a message, a table cell) shown before it is cut.
VALUE_LIMIT = 200
#: The most of a whole line (an error, a wide cell) shown before it is cut.
LINE_LIMIT = 1000

_SEPARATORS_AND_OVERRIDES = r"\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(rf"[\x00-\x1f{_SEPARATORS_AND_OVERRIDES}]")
_CONTROL_BUT_LAYOUT = re.compile(rf"[\x00-\x08\x0b-\x1f{_SEPARATORS_AND_OVERRIDES}]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def cut_marked(text: str, limit: int | None) -> str:
    """``text`` cut after ``limit`` characters, ended with ``…(N more characters)``."""
    if limit is None or len(text) <= limit:
        return text
    return f"{text[:limit]}…({len(text) - limit} more characters)"


def printable(value: object, limit: int | None = VALUE_LIMIT) -> str:
    """``value`` as text safe for a terminal: every control character (tab and newline
    too) written as ``\\x..`` or ``\\u....``, and, past ``limit`` characters, cut and
    ended with ``…(N more characters)``. ``limit=None`` never cuts."""
    return _CONTROL.sub(_escaped, cut_marked(str(value), limit))


def escape_but_layout(text: str, limit: int | None = None) -> str:
    """:func:`printable` for laid-out text: the newlines and tabs stay as they are."""
    return _CONTROL_BUT_LAYOUT.sub(_escaped, cut_marked(text, limit))
