"""The lines of a trace file, read the one safe way every trace reader shares.

Only a regular file is opened (a FIFO would block forever, ``/dev/zero`` never end); it is
read as bytes one line at a time, so memory stays bounded however large the trace is; a
line longer than a bound is refused without reading the rest of it; each line is decoded
on its own, so a UTF-8 error names its line; a leading byte-order mark is dropped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from kvsim.errors import InputError
from kvsim.files import check_regular, open_regular

# the longest line kept: a prompt of 2**20 hash ids of up to 19 digits, and then some
MAX_LINE_BYTES = 24 << 20
BOM = b"\xef\xbb\xbf"


def trace_lines(path: str | Path, max_bytes: int | None = None) -> Iterator[str]:
    """The decoded lines of a trace (line ends kept), line 1 first; InputError naming
    ``file:line`` for a line over ``max_bytes`` (default MAX_LINE_BYTES) or not UTF-8, or
    for a file kvsim cannot read."""
    if max_bytes is None:
        max_bytes = MAX_LINE_BYTES
    p = Path(path)
    check_regular(p, what="trace file")  # its messages name what is wrong ("not found")
    with open_regular(p, what="trace file") as fh:  # never blocks on a FIFO swapped in
        lineno = 0
        while True:
            try:
                raw = fh.readline(max_bytes + 1)
            except OSError as e:
                raise InputError(e.strerror or str(e), where=str(p)) from None
            if not raw:
                return
            lineno += 1
            if len(raw) > max_bytes:
                raise InputError(f"line is over {max_bytes:,} bytes", where=f"{p}:{lineno}")
            if lineno == 1 and raw.startswith(BOM):
                raw = raw[len(BOM) :]
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(
                    f"not UTF-8 text ({e.reason} at byte {e.start + 1} of the line)",
                    where=f"{p}:{lineno}",
                ) from None
