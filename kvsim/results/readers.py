"""Reading kvsim's output folders back (what ``kvsim plot`` draws from): a run's
summary.json, requests and time-series tables, a sweep's results table and capacity.csv,
each checked as kvsim writes it (:class:`InputError` naming the file and row otherwise)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvsim.config.schema import Run
from kvsim.errors import InputError, clean
from kvsim.files import MAX_TABLE_BYTES, check_regular, read_text
from kvsim.results.timeseries import timeseries
from kvsim.units import parse_bandwidth, parse_duration, parse_rate, parse_size

# ---- one run ---------------------------------------------------------------------------

RUN_COLUMNS = (
    "warmup", "arrival_s", "start_s", "finish_s", "ttft_s",
    "queue_wait_s", "load_s", "compute_s", "store_s",
)  # fmt: skip


def read_table(path: Path, what: str) -> Any:
    """A parquet or CSV table kvsim wrote, or :class:`InputError` naming the file."""
    check_regular(path, what=what)
    try:
        if path.suffix == ".parquet":
            return pd.read_parquet(path)
        return pd.read_csv(path)
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as e:  # pyarrow, pandas and codec errors alike: a damaged file
        kind = "parquet" if path.suffix == ".parquet" else "CSV"
        # one short line; InputError escapes what is unsafe to print
        why = " ".join(str(e).replace(str(path), "").replace("''", "").split())[:100]
        raise InputError(
            f"not a readable {kind} {what} ({type(e).__name__}: {why})", where=str(path)
        ) from None


def require_columns(df: Any, columns: Sequence[str], path: Path, numeric: bool = True) -> None:
    """Refuse a table without ``columns`` or (``numeric``) with non-numeric ones."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise InputError(f"missing column(s): {', '.join(missing)}", where=str(path))
    if numeric:
        bad = [
            c
            for c in columns
            if not (pd.api.types.is_numeric_dtype(df[c]) or pd.api.types.is_bool_dtype(df[c]))
        ]
        if bad:
            raise InputError(f"column(s) not numeric: {', '.join(bad)}", where=str(path))


_TIME_COLUMNS = (
    "arrival_s", "start_s", "finish_s", "ttft_s",
    "queue_wait_s", "load_s", "compute_s", "store_s",
)  # fmt: skip
MAX_TIME_S = 2.0**32  # past this no kvsim time (nor TTFT) is written


def row_where(path: Path, row: int) -> str:
    """A table's row as a place: ``file.csv:LINE`` (the header is line 1) or
    ``file.parquet (row N)``."""
    return f"{path}:{row + 2}" if path.suffix == ".csv" else f"{path} (row {row})"


def require_times(df: Any, path: Path) -> None:
    """Refuse a requests table kvsim cannot have written, by the first row that shows it:
    a time negative, infinite or past 2**32 s (NaN is a dropped request's, and fine); a
    finished request (arrival, start, first token and TTFT all known) without its queue,
    restore, compute or store time, starting before it arrived, or ending before it
    started, or a TTFT that is not first token - arrival; a warm-up flag not 0/1."""
    for col in _TIME_COLUMNS:
        if col not in df.columns:
            continue
        v = df[col].to_numpy(float)
        bad = np.flatnonzero(~np.isnan(v) & ~((v >= 0) & (v <= MAX_TIME_S)))
        if len(bad):
            row = int(bad[0])
            raise InputError(
                f"column {col}: {float(v[row])!r} is not a time kvsim writes (>= 0 s, finite)",
                where=row_where(path, row),
            )
    w = df["warmup"].to_numpy(float)
    bad = np.flatnonzero(~((w == 0) | (w == 1)))
    if len(bad):
        row = int(bad[0])
        raise InputError(
            f"column warmup: {float(w[row])!r} is not a flag kvsim writes (true/false)",
            where=row_where(path, row),
        )
    t = {c: df[c].to_numpy(float) for c in _TIME_COLUMNS}
    done = np.isfinite(t["arrival_s"]) & np.isfinite(t["start_s"])
    done &= np.isfinite(t["finish_s"]) & np.isfinite(t["ttft_s"])
    slack = 1e-9 * np.maximum(1.0, np.nan_to_num(t["finish_s"]))
    checks = [
        (f"column {c}: missing (NaN) for a finished request", np.isnan(t[c]))
        for c in ("queue_wait_s", "load_s", "compute_s", "store_s")
    ]
    checks += [
        ("start_s is before arrival_s", t["start_s"] < t["arrival_s"] - slack),
        ("finish_s is before start_s", t["finish_s"] < t["start_s"] - slack),
        (
            "ttft_s is not finish_s - arrival_s",
            np.abs(t["ttft_s"] - (t["finish_s"] - t["arrival_s"])) > slack,
        ),
    ]
    for why, bad_rows in checks:
        hit = np.flatnonzero(done & bad_rows)
        if len(hit):
            raise InputError(
                f"{why}: not a requests table kvsim wrote", where=row_where(path, int(hit[0]))
            )


def read_summary(path: Path) -> dict[str, Any]:
    """A run's summary.json with the fields the plots use, checked."""
    text = read_text(path, what="summary", max_bytes=MAX_TABLE_BYTES)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(
            f"not JSON: {e.msg} (column {e.colno}); damaged or truncated?",
            where=f"{path}:{e.lineno}",
        ) from None
    except RecursionError:
        raise InputError("not a kvsim summary (nested too deeply)", where=str(path)) from None
    if not isinstance(doc, dict):
        raise InputError("not a kvsim summary (expected an object)", where=str(path))
    name = doc.get("scenario")
    if not isinstance(name, str) or not name:
        raise InputError("field scenario: missing or not a name", where=str(path))
    engines = doc.get("engines", 1)
    if isinstance(engines, bool) or not isinstance(engines, int) or not 1 <= engines <= 1_000_000:
        raise InputError("field engines: not a positive whole number", where=str(path))
    src = doc.get("token_source_frac")
    if (
        not isinstance(src, dict)
        or not 0 < len(src) <= 64
        or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1
            for v in src.values()
        )
        or sum(src.values()) > 1 + 1e-6
    ):
        raise InputError(
            "field token_source_frac: not a mapping of 1 to 64 fractions (0 to 1, "
            "summing to at most 1)",
            where=str(path),
        )
    return doc


TIMESERIES_PLOT_COLUMNS = (
    "window_start_s", "window_end_s", "requests",
    "ttft_p50_s", "ttft_p95_s", "hit_ratio", "gpu_busy_frac", "gpu_recompute_frac",
)  # fmt: skip


def read_timeseries(path: Path) -> Any:
    """A run's timeseries.parquet (or .csv), checked as kvsim writes it: the columns the
    figure draws, numeric; at least one row; windows of finite times >= 0 with an end past
    their start; request counts >= 0; TTFTs NaN or times; fractions NaN or >= 0 (hit
    ratio and recompute share at most 1)."""
    df = read_table(path, "time-series table")
    require_columns(df, TIMESERIES_PLOT_COLUMNS, path)
    if df.empty:
        raise InputError("no rows", where=str(path))
    v = {c: df[c].to_numpy(float) for c in TIMESERIES_PLOT_COLUMNS}
    finite_time = {c: (v[c] >= 0) & (v[c] <= MAX_TIME_S) for c in v}
    checks = [
        ("window_start_s", ~finite_time["window_start_s"], "not a time kvsim writes"),
        ("window_end_s", ~finite_time["window_end_s"], "not a time kvsim writes"),
        ("window_end_s", ~(v["window_end_s"] > v["window_start_s"]), "not after window_start_s"),
        ("requests", ~((v["requests"] >= 0) & (v["requests"] <= 2.0**53)), "not a count"),
    ]
    for c in ("ttft_p50_s", "ttft_p95_s"):
        checks.append((c, ~np.isnan(v[c]) & ~finite_time[c], "not a TTFT kvsim writes"))
    for c, high in (("hit_ratio", 1.0), ("gpu_recompute_frac", 1.0), ("gpu_busy_frac", 1e6)):
        bad = ~np.isnan(v[c]) & ~((v[c] >= 0) & (v[c] <= high * (1 + 1e-9)))
        checks.append((c, bad, "not a fraction kvsim writes"))
    for c, bad, why in checks:
        hit = np.flatnonzero(bad)
        if len(hit):
            row = int(hit[0])
            raise InputError(
                f"column {c}: {float(v[c][row])!r} is {why}", where=row_where(path, row)
            )
    return df


@dataclass(frozen=True)
class RunFolder:
    """A run's --out folder, read and checked: its summary, its finished requests
    (warm-up included) and those measured (after warm-up), its time series and its
    per-tier counters (:func:`read_tier_counts`; {} for an older kvsim's summary)."""

    summary: dict[str, Any]
    requests: Any
    measured: Any
    series: Any
    tiers: dict[str, dict[str, Any]]


def read_run_folder(out_dir: str | os.PathLike[str]) -> RunFolder:
    """One run's --out folder (summary.json + requests table), every table checked."""
    d = Path(out_dir)
    summary = read_summary(d / "summary.json")
    table = d / "requests.parquet"
    if not table.exists() and not table.is_symlink():
        table = d / "requests.csv"
        if not table.exists() and not table.is_symlink():
            raise InputError(
                "no requests.parquet or requests.csv beside summary.json", where=str(d)
            )
    df = read_table(table, "requests table")
    require_columns(df, RUN_COLUMNS, table)
    require_times(df, table)
    done = np.isfinite(df[["arrival_s", "start_s", "finish_s", "ttft_s"]].to_numpy(float)).all(1)
    df = df[done]
    m = df[~df["warmup"].astype(bool)]
    if m.empty:
        raise InputError("no finished requests after warm-up to plot", where=str(table))
    series = _run_timeseries(d, df)
    tiers = read_tier_counts(summary, d / "summary.json")  # {}: an older kvsim's summary
    return RunFolder(summary, df, m, series, tiers)


def _run_timeseries(d: Path, df: Any) -> Any:
    """The folder's timeseries table, checked; for a folder without one (an older
    kvsim's), the same computed from its requests table in default windows, without the
    GPU's busy time (which needs the run's activity spans)."""
    for table in (d / "timeseries.parquet", d / "timeseries.csv"):
        if table.exists() or table.is_symlink():
            return read_timeseries(table)
    # only the numeric columns it reads (a damaged optional one is left out, not read)
    keep = [c for c in df.columns if c == "decision" or pd.api.types.is_numeric_dtype(df[c])]
    return timeseries(df[keep], [], Run().timeseries_window, 1)


#: the tiers in the order a lookup walks them
TIER_ORDER = ("gpu", "host", "nvme", "peer", "remote")
#: per-tier counters the tiers figure draws (summary["tiers"][tier] and its ``engines``)
TIER_COUNTS = ("hits", "misses", "evictions", "write_bytes", "read_bytes")


def read_tier_counts(summary: Mapping[str, Any], path: Path) -> dict[str, dict[str, Any]]:
    """The counters of summary["tiers"] the tiers figure draws, checked: per tier (in
    lookup order) ``total`` (counter -> value) and ``engines`` (one counter -> value
    mapping per engine; empty when the summary has none). Counters a summary lacks (an
    older kvsim's) are left out; {} when it has none of them. A value kvsim never writes
    (negative, not finite, not a number) is refused, naming its field."""
    tiers = summary.get("tiers")
    if tiers is None:
        return {}
    if not isinstance(tiers, dict):
        raise InputError("field tiers: expected a mapping of tiers", where=str(path))

    def counts(obj: Any, field: str) -> dict[str, float]:
        if not isinstance(obj, dict):
            raise InputError(f"field {field}: expected a mapping", where=str(path))
        out = {}
        for k in TIER_COUNTS:
            if k not in obj:
                continue
            v = obj[k]
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
            if not ok or not math.isfinite(v) or not 0 <= v <= 2.0**63:
                raise InputError(
                    f"field {field}.{k}: {clean(repr(v), 40)} is not a count kvsim writes",
                    where=str(path),
                )
            out[k] = float(v)
        return out

    found: dict[str, dict[str, Any]] = {}
    for name in (*TIER_ORDER, *sorted(set(tiers) - set(TIER_ORDER), key=str)):
        if name not in tiers:
            continue
        shown = clean(str(name), 40)
        total = counts(tiers[name], f"tiers.{shown}")
        engines = tiers[name].get("engines", [])
        if not isinstance(engines, list) or len(engines) > 1_000_000:
            raise InputError(f"field tiers.{shown}.engines: expected a list", where=str(path))
        per = [counts(e, f"tiers.{shown}.engines[{i}]") for i, e in enumerate(engines)]
        if total or any(per):
            found[shown] = {"total": total, "engines": per}
    return found


# ---- a sweep ---------------------------------------------------------------------------

SWEEP_COLUMNS = ("run_id", "seed", "status", "ttft_p50_s", "ttft_p99_s")
CAPACITY_COLUMNS = ("configuration", "capacity_rps", "slo")
CAPACITY_BOUNDS = ("capacity_rps_lo", "capacity_rps_hi")  # the interval (older kvsim: ci95_rps)


SWEPT_ATTR = "swept"  # the results table's metadata: its swept columns (kvsim sweep's)


def read_sweep_results(path: Path) -> tuple[Any, list[str]]:
    """A sweep's results table and its swept columns: those its metadata lists (what
    ``kvsim sweep`` records in results.parquet), every one of which must be there; in a
    table without that metadata (an older kvsim's), those between run_id and seed. The
    TTFTs of its successful runs are checked as kvsim writes them."""
    df = read_table(path, "sweep results table")
    require_columns(df, SWEEP_COLUMNS, path, numeric=False)
    require_columns(df, ("ttft_p50_s", "ttft_p99_s"), path)
    swept = df.attrs.get(SWEPT_ATTR)
    if swept is None:
        cols = list(df.columns)
        start, stop = cols.index("run_id") + 1, cols.index("seed")
        columns = cols[start:stop] if start <= stop else []
    elif (
        not isinstance(swept, list)
        or len(swept) > 1000
        or not all(isinstance(c, str) and c not in SWEEP_COLUMNS for c in swept)
    ):
        raise InputError(
            f"its metadata ({SWEPT_ATTR!r}: the swept columns) is damaged", where=str(path)
        )
    else:
        columns = list(swept)
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise InputError(
                f"missing swept column(s) {', '.join(missing[:5])} (the sweep's metadata lists "
                f"{', '.join(columns[:5])}); damaged table?",
                where=str(path),
            )
    ok = (df["status"] == "ok").to_numpy()
    p50, p99 = (df[c].to_numpy(float) for c in ("ttft_p50_s", "ttft_p99_s"))
    for col, v in (("ttft_p50_s", p50), ("ttft_p99_s", p99)):
        bad = np.flatnonzero(ok & ~np.isnan(v) & ~((v >= 0) & (v <= MAX_TIME_S)))
        if len(bad):
            row = int(bad[0])
            raise InputError(
                f"column {col}: {float(v[row])!r} is not a TTFT kvsim writes (>= 0 s, finite)",
                where=row_where(path, row),
            )
    bad = np.flatnonzero(ok & (p50 > p99 * (1 + 1e-9)))
    if len(bad):
        raise InputError(
            "ttft_p50_s is above ttft_p99_s: not a results table kvsim wrote",
            where=row_where(path, int(bad[0])),
        )
    if "ttft_p95_s" in df.columns:  # (an older kvsim's table has none)
        require_columns(df, ("ttft_p95_s",), path)
        p95 = df["ttft_p95_s"].to_numpy(float)
        bad = np.flatnonzero(ok & ~np.isnan(p95) & ~((p95 >= 0) & (p95 <= MAX_TIME_S)))
        if len(bad):
            row = int(bad[0])
            raise InputError(
                f"column ttft_p95_s: {float(p95[row])!r} is not a TTFT kvsim writes "
                "(>= 0 s, finite)",
                where=row_where(path, row),
            )
        bad = np.flatnonzero(ok & ((p50 > p95 * (1 + 1e-9)) | (p95 > p99 * (1 + 1e-9))))
        if len(bad):
            raise InputError(
                "ttft_p95_s is not between ttft_p50_s and ttft_p99_s: not a results table "
                "kvsim wrote",
                where=row_where(path, int(bad[0])),
            )
    return df, columns


def read_capacity(path: Path) -> Any:
    """A capacity.csv, checked: its columns, numbers and at least one row. The interval
    is ``capacity_rps_lo`` and ``capacity_rps_hi``; an older kvsim's table has a
    half-width ``ci95_rps`` instead, read as the interval mean -+ it (never below 0)."""
    df = read_table(path, "capacity table")
    require_columns(df, CAPACITY_COLUMNS, path, numeric=False)
    legacy = "ci95_rps" in df.columns and not set(CAPACITY_BOUNDS) <= set(df.columns)
    bounds = ("ci95_rps",) if legacy else CAPACITY_BOUNDS
    require_columns(df, ("capacity_rps", *bounds), path)
    if df.empty:
        raise InputError("no rows", where=str(path))
    for c in ("capacity_rps", *bounds):
        v = df[c].to_numpy(float)
        bad = ~np.isnan(v) & ~(np.isfinite(v) & (v >= 0))
        if bad.any():
            row = int(np.argmax(bad))
            raise InputError(
                f"column {c}: {v[row]} is not a finite number >= 0", where=f"{path}:{row + 2}"
            )
    df = capacity_bounds(df)
    lo, mid, hi = (
        df[c].to_numpy(float) for c in ("capacity_rps_lo", "capacity_rps", "capacity_rps_hi")
    )
    bad = np.isfinite(lo) & np.isfinite(hi) & ~((lo <= mid * (1 + 1e-9)) & (mid <= hi * (1 + 1e-9)))
    if bad.any():
        row = int(np.argmax(bad))
        raise InputError(
            "capacity_rps is not inside [capacity_rps_lo, capacity_rps_hi]",
            where=f"{path}:{row + 2}",
        )
    return df


def capacity_bounds(df: Any) -> Any:
    """A capacity table with its interval as ``capacity_rps_lo`` and ``_hi``: an older
    kvsim's half-width ``ci95_rps`` read as the mean -+ it (never below 0)."""
    if set(CAPACITY_BOUNDS) <= set(df.columns) or "ci95_rps" not in df.columns:
        return df
    cap, half = df["capacity_rps"].astype(float), df["ci95_rps"].astype(float)
    return df.assign(capacity_rps_lo=(cap - half).clip(lower=0.0), capacity_rps_hi=cap + half)


def load_axis(columns: Sequence[str]) -> str | None:
    """The first of ``columns`` that is a load (an arrival rate or a time scale), or None."""
    for c in columns:
        if c.endswith(("arrivals.rate", "time_scale")):
            return c
    return None


def as_number(v: Any) -> float:
    """A swept value as a number in base units ("600 GB" -> 6e11, "2/s" -> 2); NaN when
    it is not a quantity (a policy name, say)."""
    if isinstance(v, bool):
        return math.nan
    if isinstance(v, (int, float)):
        return float(v)
    text = str(v).strip().strip('"')
    try:
        return float(text)
    except ValueError:
        pass
    for parse in (parse_rate, parse_bandwidth, parse_size, parse_duration):
        try:
            return float(parse(text))
        except (ValueError, TypeError):
            continue
    return math.nan


def plain(value: Any) -> Any:
    """A table cell as plain Python (a numpy scalar's repr is noisy in a message)."""
    return value.item() if hasattr(value, "item") else value


def read_sweep_folder(d: Path, x: str | None) -> tuple[Any, list[str], str | None]:
    """A sweep folder's successful runs, its swept columns and its load axis (or None);
    the axis's values checked: numbers (or quantities), finite, >= 0, and > 0 for a load
    (an arrival rate or a time scale)."""
    results = d / "results.parquet"
    df, columns = read_sweep_results(results)
    if x and x not in columns:
        raise InputError(f"not a swept field; swept: {', '.join(columns) or 'none'}", where="--x")
    df = df[df["status"] == "ok"]
    axis = x or load_axis(columns)
    if axis is not None and not df.empty:
        values = df[axis].map(as_number)
        if values.isna().any():
            raise InputError(
                f"{axis} is not a number or quantity, so it cannot be an axis", where="--x"
            )
        v = values.to_numpy(float)
        load = load_axis([axis]) is not None
        bad = np.flatnonzero(~(np.isfinite(v) & ((v > 0) if load else (v >= 0))))
        if len(bad):
            row = int(values.index[bad[0]])
            least = "> 0" if load else ">= 0"
            raise InputError(
                f"column {axis}: {plain(df[axis].iloc[bad[0]])!r} is not a value kvsim sweeps "
                f"(finite, {least})",
                where=row_where(results, row),
            )
    return df, columns, axis
