"""The CSV reader: one row per line, a header naming the columns.

Columns (header on the first line; an empty cell is "not given"):

- ``prompt_tokens`` (required): the prompt's length in tokens (a mean, where prompts vary);
- ``cached_tokens``: the leading tokens already cached (0 for cold prompts; required
  unless ``--cached-tokens`` gives it);
- ``ttft_ms`` or ``ttft_s`` (one required): the measured TTFT statistic;
- ``concurrency``: clients in flight (a closed loop, ``--max-concurrency``);
- ``request_rate``: requests/s of an open loop (``inf``: all sent at once); a row needs a
  concurrency, a rate or both (``--concurrency``/``--rate`` fill empty cells);
- ``requests``: how many the benchmark sent (default 1 for concurrency 1 with no rate,
  required otherwise);
- ``statistic``: ``mean`` or ``median`` (default ``--statistic``);
- ``tier``: where the cached prefix is, ``gpu`` (default) or ``host``.

Any other column is refused, naming the valid ones (a misspelt optional column would
otherwise be silently dropped).
"""

from __future__ import annotations

import csv
import io
from typing import Any

from kvsim.calibrate.rows import Given, Row, make_row
from kvsim.errors import InputError, shown

COLUMNS = (
    "prompt_tokens",
    "cached_tokens",
    "ttft_ms",
    "ttft_s",
    "concurrency",
    "request_rate",
    "requests",
    "statistic",
    "tier",
)


def looks_like(text: str) -> bool:
    """Whether the text's first line is a header naming ``prompt_tokens``."""
    first = text.lstrip().split("\n", 1)[0]
    return "prompt_tokens" in [c.strip() for c in first.split(",")]


def read(path: str, text: str, given: Given) -> list[Row]:
    """The rows of a measurements CSV (see the module docstring)."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise InputError("empty file: expected a CSV header", where=path) from None
    if "prompt_tokens" not in header:
        raise InputError(
            "not a measurements CSV: its header names no prompt_tokens column (columns: "
            f"{', '.join(COLUMNS)})",
            where=f"{path}:1",
        )
    unknown = [h for h in header if h not in COLUMNS]
    if unknown:
        raise InputError(
            f"unknown column {shown(unknown[0])} (valid: {', '.join(COLUMNS)})",
            where=f"{path}:1",
        )
    if len(set(header)) != len(header):
        raise InputError("a column is named twice", where=f"{path}:1")
    if "ttft_ms" in header and "ttft_s" in header:
        raise InputError("give ttft_ms or ttft_s, not both", where=f"{path}:1")
    if "ttft_ms" not in header and "ttft_s" not in header:
        raise InputError("no TTFT column: add ttft_ms or ttft_s", where=f"{path}:1")
    rows: list[Row] = []
    for cells in reader:
        line = reader.line_num
        where = f"{path}:{line}"
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise InputError(
                f"{len(cells)} cells, but the header names {len(header)} columns", where=where
            )
        cell = {h: (c.strip() or None) for h, c in zip(header, cells, strict=True)}
        cached: Any = cell.get("cached_tokens")
        if cached is None:
            if given.cached_tokens is None:
                raise InputError(
                    "cached_tokens: not given (0 for cold prompts), and no --cached-tokens",
                    where=where,
                )
            cached = given.cached_tokens
        conc: Any = cell.get("concurrency")
        rate: Any = cell.get("request_rate")
        if conc is None and rate is None:
            conc, rate = given.concurrency, given.rate
            if conc is None and rate is None:
                raise InputError(
                    "neither concurrency nor request_rate: say how the clients sent the "
                    "requests (or give --concurrency/--rate)",
                    where=where,
                )
        lone = conc is not None and str(conc) == "1" and rate is None
        requests: Any = cell.get("requests")
        if requests is None:
            if not lone:
                raise InputError(
                    "requests: how many the benchmark sent is needed for a row that is not "
                    "one request at a time (concurrency 1)",
                    where=where,
                )
            requests = 1
        name = "ttft_ms" if "ttft_ms" in header else "ttft_s"
        ttft = float_or_text(cell[name], 1e-3 if name == "ttft_ms" else 1.0)
        rows.append(
            make_row(
                source=path,
                where=where,
                fmt="csv",
                prompt_tokens=cell["prompt_tokens"],
                cached_tokens=cached,
                ttft_s=ttft,
                statistic=cell.get("statistic") or given.statistic,
                concurrency=conc,
                rate=rate,
                requests=requests,
                tier=cell.get("tier") or given.tier,
                ttft_name=name,
                ttft_raw=cell[name],
            )
        )
    if not rows:
        raise InputError("no rows under the header", where=path)
    return rows


def float_or_text(text: str | None, scale: float) -> float | str | None:
    """A cell as seconds (``scale``: its unit), or the text as it is when it is not a
    number (make_row names it)."""
    if text is None:
        return None
    try:
        return float(text) * scale
    except ValueError:
        return text
