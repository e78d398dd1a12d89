"""Azure LLM inference trace 2023 CSV: ``TIMESTAMP,ContextTokens,GeneratedTokens``.

Arrivals and lengths only: the trace has no prefix information, so every request gets
fresh block ids and no cache tier can ever hit. Timestamps are wall-clock
(``2023-11-16 18:17:03.9799600``) and are made relative to the first row.
"""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from kvsim.errors import InputError
from kvsim.workload.request import MAX_TOKENS, Request

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def _int(value: str | None, name: str, where: str, minimum: int) -> int:
    if value is None or value == "":
        raise InputError(f"{name}: missing value", where=where)
    try:
        v = int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{name}: expected an integer, got {value!r}", where=where) from None
    if v < minimum:
        raise InputError(f"{name}: must be >= {minimum}, got {v}", where=where)
    if v > MAX_TOKENS:
        raise InputError(f"{name}: must be <= {MAX_TOKENS}, got {v}", where=where)
    return v


def read_azure(path: str | Path, block_tokens: int = 512) -> Iterator[Request]:
    """Requests of an Azure 2023 CSV trace, with unique (never shared) block ids."""
    p = Path(path)
    try:
        fh = p.open(encoding="utf-8", newline="")
    except FileNotFoundError:
        raise InputError("trace file not found", where=str(p)) from None
    except OSError as e:
        raise InputError(e.strerror or str(e), where=str(p)) from None
    ids = itertools.count()
    with fh:
        try:
            reader = csv.DictReader(fh)
            if reader.fieldnames is None or not set(COLUMNS) <= set(reader.fieldnames):
                raise InputError(
                    f"expected a header with columns {','.join(COLUMNS)}", where=f"{p}:1"
                )
            first: datetime | None = None
            last = -math.inf
            count = 0
            for row in reader:
                where = f"{p}:{reader.line_num}"
                raw = row.get("TIMESTAMP")
                try:
                    stamp = datetime.fromisoformat((raw or "").strip())
                except ValueError:
                    raise InputError(
                        f"TIMESTAMP: expected a date-time such as "
                        f"'2023-11-16 18:17:03.97', got {raw!r}",
                        where=where,
                    ) from None
                first = first or stamp
                t = (stamp - first).total_seconds()
                if t < last:
                    raise InputError("TIMESTAMP: rows must be sorted by time", where=where)
                last = t
                n_in = _int(row.get("ContextTokens"), "ContextTokens", where, 1)
                n_out = _int(row.get("GeneratedTokens"), "GeneratedTokens", where, 0)
                blocks = tuple(itertools.islice(ids, -(-n_in // block_tokens)))
                yield Request(reader.line_num - 2, t, n_in, n_out, blocks)
                count += 1
        except UnicodeDecodeError as e:
            raise InputError(f"not UTF-8 text ({e.reason})", where=str(p)) from None
        except csv.Error as e:
            raise InputError(f"CSV error: {e}", where=str(p)) from None
    if count == 0:
        raise InputError("trace has no requests", where=str(p))
