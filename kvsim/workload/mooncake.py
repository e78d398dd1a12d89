"""Mooncake JSONL traces: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``,
and optionally ``tenant`` (an integer; 0 when absent) for multi-tenant replays.

Streams one line at a time. Each line is checked (JSON, field types, ``len(hash_ids) ==
ceil(input_length / block_tokens)``, sorted timestamps) and a bad one raises InputError naming
the file, line and field. Real Mooncake traces bucket arrivals (many requests share a
timestamp); ``bucket_spread`` spreads each bucket evenly over an interval instead.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

from kvsim.config.schema import MAX_TENANTS
from kvsim.errors import InputError
from kvsim.workload.request import MAX_HASH, MAX_TOKENS, Request


def _int_field(obj: dict, name: str, where: str, minimum: int, maximum: int = MAX_TOKENS) -> int:
    if name not in obj:
        raise InputError(f"{name}: missing field", where=where)
    v = obj[name]
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer() and math.isfinite(v):
            v = int(v)
        else:
            raise InputError(f"{name}: expected an integer, got {v!r}", where=where)
    if v < minimum:
        raise InputError(f"{name}: must be >= {minimum}, got {v}", where=where)
    if v > maximum:
        raise InputError(f"{name}: must be <= {maximum}, got {v}", where=where)
    return v


Line = tuple[float, int, int, tuple[int, ...], int]


def parse_line(text: str, where: str, block_tokens: int) -> Line:
    """(timestamp_s, input, output, hash_ids, tenant) from one JSONL line, or InputError."""
    try:
        obj = json.loads(text.strip())
    except json.JSONDecodeError as e:
        raise InputError(f"invalid JSON ({e.msg} at column {e.colno})", where=where) from None
    if not isinstance(obj, dict):
        raise InputError(f"expected a JSON object, got {type(obj).__name__}", where=where)
    ts = obj.get("timestamp")
    if ts is None:
        raise InputError("timestamp: missing field", where=where)
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
        raise InputError(f"timestamp: expected a number of milliseconds, got {ts!r}", where=where)
    if ts < 0:
        raise InputError(f"timestamp: must be >= 0, got {ts}", where=where)
    n_in = _int_field(obj, "input_length", where, 1)
    n_out = _int_field(obj, "output_length", where, 0)
    ids = obj.get("hash_ids")
    if not isinstance(ids, list):
        raise InputError(f"hash_ids: expected a list of integers, got {ids!r:.40}", where=where)
    for h in ids:
        if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h < MAX_HASH:
            raise InputError(
                f"hash_ids: expected integers in [0, 2**63), got {h!r:.40}", where=where
            )
    need = -(-n_in // block_tokens)
    if len(ids) != need:
        raise InputError(
            f"hash_ids: {len(ids)} blocks, but input_length {n_in} needs {need} "
            f"blocks of {block_tokens} tokens",
            where=where,
        )
    tenant = _int_field(obj, "tenant", where, 0, MAX_TENANTS - 1) if "tenant" in obj else 0
    return ts / 1000.0, n_in, n_out, tuple(ids), tenant


def read_mooncake(
    path: str | Path, block_tokens: int = 512, bucket_spread: float | None = None
) -> Iterator[Request]:
    """Requests of a Mooncake JSONL trace, in file order (which must be time order)."""
    p = Path(path)
    try:
        fh = p.open(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("trace file not found", where=str(p)) from None
    except OSError as e:
        raise InputError(e.strerror or str(e), where=str(p)) from None
    bucket: list[tuple[int, Line]] = []
    last = -math.inf
    count = 0
    with fh:
        lineno = 0
        try:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                where = f"{p}:{lineno}"
                rec = parse_line(line, where, block_tokens)
                ts = rec[0]
                if ts < last:
                    raise InputError(
                        f"timestamp: {ts * 1000:g} ms is before the previous line's "
                        f"{last * 1000:g} ms (traces must be sorted by time)",
                        where=where,
                    )
                if bucket_spread is not None and bucket and ts != last:
                    yield from _spread(bucket, bucket_spread)
                    bucket = []
                last = ts
                if bucket_spread is None:
                    yield Request(lineno - 1, ts, rec[1], rec[2], rec[3], -1, rec[4])
                else:
                    bucket.append((lineno - 1, rec))
                count += 1
        except UnicodeDecodeError as e:
            raise InputError(f"not UTF-8 text ({e.reason})", where=f"{p}:{lineno + 1}") from None
    if bucket:
        yield from _spread(bucket, bucket_spread or 0.0)
    if count == 0:
        raise InputError("trace has no requests", where=str(p))


def _spread(bucket: list, spread: float) -> Iterator[Request]:
    k = len(bucket)
    for i, (rid, (ts, n_in, n_out, ids, tenant)) in enumerate(bucket):
        yield Request(rid, ts + spread * i / k, n_in, n_out, ids, -1, tenant)
