"""The one exception type for user mistakes.

Anything the user can fix (a bad scenario field, a malformed trace line, an unknown
profile) raises :class:`InputError` with a one-line message that names the file, the line
and/or the field path. The command line turns it into exit code 2; any other exception
is a kvsim bug (exit code 1).
"""

from __future__ import annotations


class InputError(Exception):
    """A user mistake, reported as ``where: what`` on one line (exit code 2)."""

    def __init__(self, message: str, *, where: str | None = None) -> None:
        self.where = where
        self.reason = message
        super().__init__(f"{where}: {message}" if where else message)
