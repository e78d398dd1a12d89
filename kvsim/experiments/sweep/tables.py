"""A sweep's results table: the summary of a run as row columns (:func:`flat_summary`),
the rows in expansion order with the paired differences from the reference configuration
(:func:`results_table`, :func:`add_paired`), and ``results.parquet`` / ``results.csv``
written whole (:func:`write_table`)."""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvsim.errors import InputError
from kvsim.experiments.sweep.spec import Sweep
from kvsim.results.metrics import INTERVALS, LEGACY_INTERVALS
from kvsim.results.uncertainty import bound_keys, paired_interval
from kvsim.results.writers import clean_leftovers

RESULTS = "results.parquet"
TABLES = (RESULTS, "results.csv")


def flat_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """The scalar summary metrics, nested ones as ``parent.child`` (per-tier lists out),
    and the run's 95% intervals (:data:`~kvsim.results.metrics.INTERVALS`) as the summary
    holds them, two numbers beside their value: ``ttft_p50_s_lo``, ``ttft_p50_s_hi``, ...
    (:func:`~kvsim.results.uncertainty.bound_keys`; NaN without one, a column of numbers).
    An older kvsim's summary's ``[lo, hi]`` lists (``ttft_p50_ci_s``...:
    :data:`~kvsim.results.metrics.LEGACY_INTERVALS`) become the same two numbers."""
    out: dict[str, Any] = {}
    for k, v in summary.items():
        if k in ("tiers", "provenance"):  # per-tier lists; no provenance column either
            continue
        if isinstance(v, dict):
            for k2, v2 in v.items():
                if not isinstance(v2, (dict, list)):
                    out[f"{k}.{k2}"] = v2
        elif k in LEGACY_INTERVALS:
            out.update(_bounds_of(LEGACY_INTERVALS[k], v))
        elif k in _BOUNDS:
            out[k] = math.nan if v is None else v
        elif not isinstance(v, list):
            out[k] = v
    return out


_BOUNDS = frozenset(key for pair in INTERVALS.values() for key in pair)


def _bounds_of(name: str, raw: Any) -> dict[str, Any]:
    """A run's interval (a list [lo, hi], or an older journal's JSON text of one) as
    ``name_lo``, ``name_hi`` (NaN without one: a column of numbers)."""
    try:
        lo, hi = json.loads(raw) if isinstance(raw, str) else raw
        bounds = (float(lo), float(hi))
    except (TypeError, ValueError):
        bounds = None
    return {k: math.nan if v is None else v for k, v in bound_keys(name, bounds).items()}


def results_table(sweep: Sweep, rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Rows in expansion order; swept columns first, then the metrics."""
    df = pd.DataFrame(list(rows))
    first = list(dict.fromkeys(["run", "run_id", *sweep.columns, "seed", "status", "error"]))
    if df.empty:
        return pd.DataFrame(columns=first)
    index = {r.run_id: r.index for r in sweep.runs}
    df["run"] = df["run_id"].map(index)
    df = df.sort_values("run", kind="stable").reset_index(drop=True)
    rest = [c for c in df.columns if c not in first]
    df = df[[c for c in first if c in df.columns] + rest]
    for old, name in LEGACY_INTERVALS.items():  # an older kvsim's journal rows: [lo, hi]
        if old in df.columns:
            bounds = pd.DataFrame([_bounds_of(name, v) for v in df[old]], index=df.index)
            for col in bounds.columns:
                df[col] = df[col].fillna(bounds[col]) if col in df.columns else bounds[col]
            df = df.drop(columns=old)
    df = add_paired(df, sweep)
    for col in df.columns:  # one type per column, or Parquet refuses it
        if col not in sweep.columns and df[col].dtype != object:
            continue
        kinds = {_kind(v) for v in df[col] if not _missing(v)}
        numeric = kinds <= {"int", "float"}
        if numeric or (col not in sweep.columns and len(kinds) == 1 and kinds <= {"str", "bool"}):
            continue
        df[col] = df[col].map(lambda v: v if isinstance(v, str) else json.dumps(v, default=str))
    # recorded in results.parquet's metadata: `kvsim plot` refuses a table missing one
    df.attrs["swept"] = list(sweep.columns)
    return df


#: the metrics a sweep compares between configurations (paired, per seed)
PAIRED_METRICS = ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "hit_ratio")


def add_paired(df: pd.DataFrame, sweep: Sweep) -> pd.DataFrame:
    """``df`` with the paired differences against the reference configuration
    (:meth:`Sweep.reference_index`), per compared metric M (:data:`PAIRED_METRICS`):
    ``delta_M``, per row, this run minus the reference's run with the same seed (every
    configuration runs every seed, so the two saw the same workload draw), and
    ``delta_M_lo`` and ``delta_M_hi``, the configuration's 95% interval of the mean
    difference over its seeds (:func:`~kvsim.results.uncertainty.paired_interval`),
    numbers on each of its rows. Both empty on the reference's rows, for a run that failed (or
    whose reference run did), and the interval with fewer than two paired seeds. A
    sweep of one configuration gets no columns."""
    conf_of = sweep.configuration_of()
    if len(set(conf_of.values())) < 2 or df.empty:
        return df
    conf = df["run_id"].map(conf_of).fillna(-1).to_numpy(dtype=int)
    ref = sweep.reference_index()
    ok = (df["status"] == "ok").to_numpy()
    seeds = df["seed"].to_numpy()
    is_ref = conf == ref
    added: dict[str, Any] = {}
    for m in PAIRED_METRICS:
        if m not in df.columns:
            continue
        values = np.where(ok, pd.to_numeric(df[m], errors="coerce").to_numpy(dtype=float), np.nan)
        base = {s: v for s, v in zip(seeds[is_ref], values[is_ref], strict=True)}
        paired = np.array([base.get(s, np.nan) for s in seeds], dtype=float)
        delta = values - paired
        delta[is_ref] = np.nan
        cis: dict[int, tuple[float, float]] = {}
        for c in np.unique(conf[~is_ref & (conf >= 0)]):
            mask = (conf == c) & np.isfinite(delta)
            iv = paired_interval(values[mask], paired[mask])
            if iv.bounded:
                cis[int(c)] = (iv.lo, iv.hi)
        added[f"delta_{m}"] = delta
        none = (math.nan, math.nan)
        added[f"delta_{m}_lo"] = [cis.get(int(c), none)[0] for c in conf]
        added[f"delta_{m}_hi"] = [cis.get(int(c), none)[1] for c in conf]
    return pd.concat([df, pd.DataFrame(added, index=df.index)], axis=1) if added else df


def _kind(value: Any) -> str:
    """The Parquet-relevant type of a table cell."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int" if -(2**63) <= value < 2**63 else "big"
    if isinstance(value, float):
        return "float"
    return "str" if isinstance(value, str) else "other"


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def write_table(df: pd.DataFrame, out: Path) -> None:
    """results.parquet and results.csv: both written whole beside the old ones, then renamed
    into place one after the other, so a failed write leaves the old pair untouched (and
    both are remade from the journal by the next run of the same command)."""
    clean_leftovers(out, TABLES)  # temporary tables of sweeps that died
    writers = {
        RESULTS: lambda p: df.to_parquet(p, index=False),
        "results.csv": lambda p: df.to_csv(p, index=False),
    }
    temps = {name: out / f".{name}.tmp-{os.getpid()}" for name in TABLES}
    try:
        for name in TABLES:
            writers[name](temps[name])
        for name in TABLES:
            os.replace(temps[name], out / name)
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror or e}", where=str(out)) from None
    finally:
        for tmp in temps.values():
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
