"""Timing tables: a long-format CSV (new_tokens, cached_tokens, seconds) read into the
scenario's timing grid, every bad row refused at its line."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kvsim.errors import InputError, shown
from kvsim.files import MAX_TABLE_BYTES, check_regular, read_text
from kvsim.yamlfile import MAX_INT_CHARS, MAX_YAML_VALUES

MAX_TIMING_ROWS = MAX_YAML_VALUES  # rows of a timing table


def read_timing_csv(path: Path, where: str) -> dict[str, Any]:
    """Read a long-format timing table (new_tokens, cached_tokens, seconds) into a grid."""
    try:
        check_regular(path)
    except InputError as e:
        raise InputError(f"timing table {shown(str(path))}: {e.reason}", where=where) from None
    text = read_text(path, what="timing table", max_bytes=MAX_TABLE_BYTES)
    cells: dict[tuple[int, int], float] = {}
    first: dict[tuple[int, int], int] = {}  # the line of each (new, cached) pair
    kept: list[int] = []  # the file's line number of each line the reader sees

    def rows() -> Iterator[str]:
        for n, line in enumerate(io.StringIO(text, newline=""), start=1):
            if not line.lstrip().startswith("#"):  # comments are left out
                kept.append(n)
                yield line

    def line_no() -> int:  # the file's line of the csv reader's last line
        at = reader.reader.line_num  # DictReader's own count lags behind a failed row
        return kept[at - 1] if 0 < at <= len(kept) else 1

    reader = csv.DictReader(rows())
    need = {"new_tokens", "cached_tokens", "seconds"}
    i = 1
    try:
        names = reader.fieldnames
        if names is not None:
            header_at = f"{path}:{line_no()}"
            folded: set[str] = set()
            for n in names:
                f = n.strip().casefold()
                if f in folded:
                    raise InputError(
                        f"timing table header names column {shown(n.strip())} twice: which "
                        "one is meant?",
                        where=header_at,
                    )
                folded.add(f)
        if names is None or not need <= set(names):
            raise InputError(f"timing table needs columns {sorted(need)}", where=str(path))
        for count, row in enumerate(reader, start=2):
            i = line_no()
            if count > MAX_TIMING_ROWS:
                raise InputError(
                    f"timing table has more than {MAX_TIMING_ROWS:,} rows", where=str(path)
                )
            try:
                key = (_table_int(row["new_tokens"]), _table_int(row["cached_tokens"]))
                seconds = float(_cell(row["seconds"]))
            except (TypeError, ValueError):
                raise InputError("bad number in timing row", where=f"{path}:{i}") from None
            if not (math.isfinite(seconds) and seconds > 0):
                raise InputError(
                    f"seconds must be a finite number > 0, got {shown(row['seconds'])}",
                    where=f"{path}:{i}",
                )
            if key in cells:  # two times for one point: which one is meant?
                raise InputError(
                    f"a second row for new_tokens {key[0]}, cached_tokens {key[1]} (the "
                    f"first is line {first[key]}): give each point once",
                    where=f"{path}:{i}",
                )
            cells[key] = seconds
            first[key] = i
    except csv.Error as e:
        raise InputError(f"malformed CSV ({e})", where=f"{path}:{line_no()}") from None
    new = sorted({k[0] for k in cells})
    cached = sorted({k[1] for k in cells})
    if len(new) * len(cached) != len(cells):
        missing = next((n, c) for n in new for c in cached if (n, c) not in cells)
        raise InputError(f"timing grid is incomplete, e.g. no row for {missing}", where=str(path))
    return {
        "new_tokens": new,
        "cached_tokens": cached,
        "seconds": [[cells[(n, c)] for c in cached] for n in new],
    }


def _cell(text: Any) -> str:
    if not isinstance(text, str) or len(text.strip()) > MAX_INT_CHARS:
        raise ValueError("not a number")
    return text


def _table_int(text: Any) -> int:
    return int(_cell(text))
