"""Mooncake JSONL traces: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``,
and optionally ``tenant`` (an integer; 0 when absent) for multi-tenant replays, and kvsim's
own ``session`` (-1 when absent), ``shared_blocks`` (0) and ``last_turn`` (true).

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
from kvsim.errors import InputError, shown
from kvsim.workload.lines import trace_lines
from kvsim.workload.request import (
    MAX_ARRIVAL_S,
    MAX_HASH,
    MAX_TOKENS,
    Request,
    blocks_needed,
)


def _int_field(obj: dict, name: str, where: str, minimum: int, maximum: int = MAX_TOKENS) -> int:
    if name not in obj:
        raise InputError(f"{name}: missing field", where=where)
    v = obj[name]
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer() and math.isfinite(v):
            v = int(v)
        else:
            raise InputError(f"{name}: expected an integer, got {v!r:.40}", where=where)
    if v < minimum:
        raise InputError(f"{name}: must be >= {minimum}, got {v!s:.40}", where=where)
    if v > maximum:
        raise InputError(f"{name}: must be <= {maximum}, got {v!s:.40}", where=where)
    return v


# (timestamp_s, input, output, hash_ids, tenant, session, shared_blocks, last_turn)
Line = tuple[float, int, int, tuple[int, ...], int, int, int, bool]
MAX_SESSION = (1 << 63) - 1


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object whose keys are all distinct (json keeps the last of a repeated one),
    also when case and spaces are ignored (``timestamp`` and ``Timestamp``: which is
    meant?)."""
    obj: dict[str, object] = {}
    folded: set[str] = set()
    for k, v in pairs:
        f = k.strip().casefold()
        if k in obj or f in folded:
            raise _DuplicateKey(k)
        obj[k] = v
        folded.add(f)
    return obj


def parse_line(text: str, where: str, block_tokens: int) -> Line:
    """A :data:`Line` from one JSONL line, or InputError."""
    try:
        obj = json.loads(text.strip(), object_pairs_hook=_unique_keys)
    except _DuplicateKey as e:
        raise InputError(f"{shown(e.args[0])}: duplicate key", where=where) from None
    except json.JSONDecodeError as e:
        raise InputError(f"invalid JSON ({e.msg} at column {e.colno})", where=where) from None
    except ValueError as e:  # e.g. an integer of over 4,300 digits
        raise InputError(f"invalid JSON ({str(e)[:80]})", where=where) from None
    except RecursionError:
        raise InputError("invalid JSON (nested too deeply)", where=where) from None
    if not isinstance(obj, dict):
        raise InputError(f"expected a JSON object, got {type(obj).__name__}", where=where)
    ts = obj.get("timestamp")
    if ts is None:
        raise InputError("timestamp: missing field", where=where)
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        raise InputError(
            f"timestamp: expected a number of milliseconds, got {ts!r:.40}", where=where
        )
    try:
        ts = float(ts)
    except OverflowError:  # an integer too large for a float
        ts = math.inf
    if not math.isfinite(ts):
        raise InputError("timestamp: expected a finite number of milliseconds", where=where)
    if ts < 0:
        raise InputError(f"timestamp: must be >= 0, got {ts:g}", where=where)
    if ts / 1000.0 > MAX_ARRIVAL_S:
        raise InputError(
            f"timestamp: {ts:g} ms is past {MAX_ARRIVAL_S * 1000:g} ms (136 years); "
            "timestamps are milliseconds since the start of the trace",
            where=where,
        )
    n_in = _int_field(obj, "input_length", where, 1)
    n_out = _int_field(obj, "output_length", where, 0)
    need = blocks_needed(n_in, block_tokens, where, "input_length: ")
    ids = obj.get("hash_ids")
    if not isinstance(ids, list):
        raise InputError(f"hash_ids: expected a list of integers, got {ids!r:.40}", where=where)
    for h in ids:
        if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h < MAX_HASH:
            raise InputError(
                f"hash_ids: expected integers in [0, 2**63), got {h!r:.40}", where=where
            )
    if len(ids) != need:
        raise InputError(
            f"hash_ids: {len(ids)} blocks, but input_length {n_in} needs {need} "
            f"blocks of {block_tokens} tokens",
            where=where,
        )
    tenant = _int_field(obj, "tenant", where, 0, MAX_TENANTS - 1) if "tenant" in obj else 0
    # kvsim's own fields (`kvsim trace generate` writes them when not the default), so a
    # replay of a generated trace keeps sessions, public prefixes and session ends
    session = _int_field(obj, "session", where, 0, MAX_SESSION) if "session" in obj else -1
    shared = _int_field(obj, "shared_blocks", where, 0, need) if "shared_blocks" in obj else 0
    last = obj.get("last_turn", True)
    if not isinstance(last, bool):
        raise InputError(f"last_turn: expected true or false, got {last!r:.40}", where=where)
    if not last and session < 0:
        raise InputError("last_turn: false needs a session (the session field)", where=where)
    return ts / 1000.0, n_in, n_out, tuple(ids), tenant, session, shared, last


def read_mooncake(
    path: str | Path, block_tokens: int = 512, bucket_spread: float | None = None
) -> Iterator[Request]:
    """Requests of a Mooncake JSONL trace, in file order (which must be time order)."""
    p = Path(path)
    bucket: list[tuple[int, Line]] = []
    last = -math.inf
    count = 0
    for lineno, line in enumerate(trace_lines(p), start=1):
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
            yield from _spread(bucket, bucket_spread, p, ts)
            bucket = []
        last = ts
        if bucket_spread is None:
            yield _request(lineno - 1, ts, rec)
        else:
            bucket.append((lineno - 1, rec))
        count += 1
    if bucket:
        yield from _spread(bucket, bucket_spread or 0.0, p, None)
    if count == 0:
        raise InputError("trace has no requests", where=str(p))


def _spread(bucket: list, spread: float, path: Path, following: float | None) -> Iterator[Request]:
    """A bucket's requests spread evenly over ``spread`` seconds from their timestamp; the
    last of them must arrive by the ``following`` timestamp (the next line's, None at the
    end of the trace) and within kvsim's time range: otherwise the spread is refused,
    naming the field and the trace line, rather than sending requests out of time order."""
    k = len(bucket)
    ts = bucket[0][1][0]
    end = ts + spread * (k - 1) / k  # the bucket's last arrival
    line = bucket[-1][0] + 1  # the trace line of the bucket's last request (ids count lines)
    if following is not None and end > following:
        raise InputError(
            f"workload.bucket_spread: {spread:g} s spreads the {k} requests at timestamp "
            f"{ts * 1000:g} ms until {end * 1000:g} ms, past the next timestamp "
            f"({following * 1000:g} ms): they would arrive out of time order; give a "
            f"bucket_spread of at most {(following - ts) * k / (k - 1):g} s here, or none",
            where=f"{path}:{line}",
        )
    if not end <= MAX_ARRIVAL_S:
        raise InputError(
            f"workload.bucket_spread: {spread:g} s spreads the {k} requests at timestamp "
            f"{ts * 1000:g} ms until {end:g} s; kvsim keeps arrival times below "
            f"{MAX_ARRIVAL_S:g} s (136 years)",
            where=f"{path}:{line}",
        )
    for i, (rid, rec) in enumerate(bucket):
        yield _request(rid, rec[0] + spread * i / k, rec)


def _request(rid: int, arrival: float, rec: Line) -> Request:
    _, n_in, n_out, ids, tenant, session, shared, last = rec
    return Request(rid, arrival, n_in, n_out, ids, session, tenant, shared, last)
