"""The one exception type for user mistakes.

Anything the user can fix (a bad scenario field, a malformed trace line, an unknown
profile) raises :class:`InputError` with a one-line message that names the file, the line
and/or the field path. The command line turns it into exit code 2; any other exception
is a kvsim bug (exit code 1).
"""

from __future__ import annotations

import unicodedata

# characters that must not reach a terminal raw: controls (ESC starts escape sequences, a
# newline would split the one-line message), format marks (bidi overrides), separators,
# lone surrogates (unprintable) and private-use characters; config labels refuse them
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


def clean(text: str, limit: int = 2000) -> str:
    """User text made safe to print on one line: unsafe characters escaped (``\\x1b``),
    at most ``limit`` characters kept (the cut is said)."""
    text = str(text)
    cut = ""
    if len(text) > limit:
        cut = f"... ({len(text) - limit:,} more characters)"
        text = text[:limit]
    if not text.isprintable():
        text = "".join(
            c
            if c == " " or unicodedata.category(c) not in UNSAFE_CATEGORIES
            else f"\\x{ord(c):02x}"
            if ord(c) < 0x100
            else f"\\u{ord(c):04x}"
            if ord(c) < 0x10000
            else f"\\U{ord(c):08x}"
            for c in text
        )
    return text + cut


def shown(value: object, limit: int = 80) -> str:
    """A user's value as a message quotes it: ``repr`` (a list by its length), cut to
    ``limit`` characters; :class:`InputError` escapes what is unsafe."""
    text = f"a list of {len(value)}" if isinstance(value, list) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class InputError(Exception):
    """A user mistake, reported as ``where: what`` on one line (exit code 2)."""

    def __init__(self, message: str, *, where: str | None = None) -> None:
        # every message may echo user text (keys, values, paths): make it one safe line
        where = clean(where, 500) if where is not None else None
        message = clean(message)
        self.where = where
        self.reason = message
        super().__init__(f"{where}: {message}" if where else message)
