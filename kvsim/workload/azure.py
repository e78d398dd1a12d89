"""Azure LLM inference trace 2023 CSV: ``TIMESTAMP,ContextTokens,GeneratedTokens``.

Arrivals and lengths only: the trace has no prefix information, so every request gets
fresh block ids and no cache tier can ever hit. Timestamps are wall-clock
(``2023-11-16 18:17:03.9799600``) and are made relative to the first row.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from kvsim.errors import InputError, shown
from kvsim.workload.lines import trace_lines
from kvsim.workload.request import MAX_TOKENS, Request, blocks_needed, check_request

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


_INTEGER = re.compile(r"[-+]?[0-9]+")


def _int(value: str | None, name: str, where: str, minimum: int) -> int:
    if value is None or value.strip() == "":
        raise InputError(f"{name}: missing value", where=where)
    text = value.strip()
    # ASCII digits only: int() would also take `1_000`, Arabic-Indic or full-width digits
    if not _INTEGER.fullmatch(text) or len(text) > 40:
        raise InputError(
            f"{name}: expected an integer (ASCII digits), got {value!r:.40}", where=where
        )
    v = int(text)
    if v < minimum:
        raise InputError(f"{name}: must be >= {minimum}, got {v}", where=where)
    if v > MAX_TOKENS:
        raise InputError(f"{name}: must be <= {MAX_TOKENS}, got {v!s:.40}", where=where)
    return v


def _stamp(raw: str | None, where: str) -> datetime:
    try:
        return datetime.fromisoformat((raw or "").strip())
    except ValueError:
        raise InputError(
            f"TIMESTAMP: expected a date-time such as '2023-11-16 18:17:03.97', got {raw!r:.40}",
            where=where,
        ) from None


def read_azure(path: str | Path, block_tokens: int = 512) -> Iterator[Request]:
    """Requests of an Azure 2023 CSV trace, with unique (never shared) block ids.

    Timestamps must all carry a time zone or all lack one: a naive time's zone is unknown,
    so a trace mixing both is refused at the first row that differs from the first."""
    p = Path(path)
    next_id = 0
    count = 0
    reader = csv.reader(trace_lines(p))
    where = f"{p}:1"
    try:
        header = next(reader, None)
        names = [h.strip() for h in header] if header is not None else []
        seen: dict[str, str] = {}
        for name in names:  # a column named twice: which would the rows mean?
            folded = name.casefold()
            if folded in seen and name:
                again = (
                    "" if seen[folded] == name else f" (as {shown(seen[folded])} and {shown(name)})"
                )
                raise InputError(
                    f"header names column {shown(name)} twice{again}: which one is meant?",
                    where=where,
                )
            seen[folded] = name
        if not set(COLUMNS) <= set(names):
            raise InputError(f"expected a header with columns {','.join(COLUMNS)}", where=where)
        col = [names.index(c) for c in COLUMNS]
        width = max(col) + 1
        first: datetime | None = None
        last = -math.inf
        for row in reader:
            where = f"{p}:{reader.line_num}"
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # a blank line
            if len(row) > len(names):
                raise InputError(
                    f"row has {len(row)} fields, the header {len(names)} (a stray comma?)",
                    where=where,
                )
            if len(row) < width:
                row = row + [""] * (width - len(row))
            stamp = _stamp(row[col[0]], where)
            if first is None:
                first = stamp
            elif (stamp.utcoffset() is None) != (first.utcoffset() is None):
                has = first.utcoffset() is not None
                raise InputError(
                    f"TIMESTAMP: {'no' if has else 'a'} time zone here, but the first row has "
                    f"{'one' if has else 'none'}; kvsim does not guess zones: give every row "
                    "one or none",
                    where=where,
                )
            t = (stamp - first).total_seconds()
            if t < last:
                raise InputError("TIMESTAMP: rows must be sorted by time", where=where)
            last = t
            n_in = _int(row[col[1]], "ContextTokens", where, 1)
            n_out = _int(row[col[2]], "GeneratedTokens", where, 0)
            need = blocks_needed(n_in, block_tokens, where, "ContextTokens: ")
            req = Request(count, t, n_in, n_out, tuple(range(next_id, next_id + need)))
            check_request(req, block_tokens, where)
            next_id += need
            yield req
            count += 1
    except csv.Error as e:
        raise InputError(f"CSV error: {e}", where=f"{p}:{reader.line_num}") from None
    if count == 0:
        raise InputError("trace has no requests", where=str(p))
