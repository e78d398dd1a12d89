"""A run's measurements over time: one row per window of arrival times (timeseries.parquet).

:func:`timeseries` is pure: the requests table and the engines' activity spans in, a
DataFrame out. Windows are ``[k * window, (k + 1) * window)`` of simulated time, from the
one holding the first measured request's arrival to the one holding the last (windows
with no arrival in between are kept, with 0 requests and NaN statistics), so the rows of
two runs with the same window line up. A request belongs to the window of its arrival;
the GPU's busy fraction is of the window's own time (the engines' GPU work spans clipped
to the window and to the last first token, as the summary's ``gpu_busy_frac``).

Columns the requests table lacks (``warm``, ``restore_*_s``, ``recomputed_tokens``,
``gpu_compute_s``: an older kvsim's table) give NaN columns, so the table always has
:data:`TIMESERIES_COLUMNS`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from kvsim.errors import InputError
from kvsim.results.metrics import SOURCES

if TYPE_CHECKING:
    from kvsim.results.records import Results

RESTORE_PARTS = ("lookup", "queue", "read", "h2d")
BYTE_TIERS = ("host", "nvme", "remote", "peer")
#: past this many windows a run's table would not fit in memory: a typo in the window
MAX_WINDOWS = 1_000_000

TIMESERIES_COLUMNS: tuple[tuple[str, str], ...] = (
    ("window_start_s", "start of the window (simulated time, a multiple of the window)"),
    ("window_end_s", "end of the window (window_start_s + run.timeseries_window)"),
    ("requests", "measured requests that arrived in the window (finished, not warm-up)"),
    ("requests_cold", "of them, cold: the first of their session or shared prefix"),
    ("requests_warm", "of them, warm: later ones"),
    ("ttft_p50_s", "median TTFT of the window's requests"),
    ("ttft_p95_s", "95th percentile of their TTFT"),
    ("ttft_p99_s", "99th percentile of their TTFT"),
    ("ttft_cold_p50_s", "median TTFT of the window's cold requests"),
    ("ttft_warm_p50_s", "median TTFT of the window's warm requests"),
    ("hit_ratio", "prompt tokens served from any cache tier / all prompt tokens"),
    ("recomputed_tokens", "tokens computed again that had been computed or stored before"),
    (
        "gpu_recompute_frac",
        "share of the window's requests' GPU compute time spent on recomputed tokens",
    ),
    (
        "gpu_busy_frac",
        "GPU (SM) work of the engines inside the window / (engines x window), the window cut "
        "at the last first token",
    ),
    *(
        (f"restore_{p}_mean_s", f"mean restore_{p}_s over the window's requests that restored")
        for p in RESTORE_PARTS
    ),
    *((f"tokens_{s}", f"prompt tokens from {s}") for s in SOURCES),
    *((f"bytes_{t}", f"bytes read from {t}") for t in BYTE_TIERS),
)
COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _ in TIMESERIES_COLUMNS)


def _covered(t: np.ndarray, points: np.ndarray) -> np.ndarray:
    """For each time in ``t``: sum over ``points`` (sorted) of max(0, t - point)."""
    k = np.searchsorted(points, t, side="right")
    csum = np.concatenate(([0.0], np.cumsum(points)))
    return t * k - csum[k]


def _quantile(values: pd.Series, idx: np.ndarray, n: int, q: float) -> np.ndarray:
    """The q-quantile (0..1, linear interpolation, numpy's default) of ``values`` per
    window index; NaN for a window with none."""
    out = np.full(n, np.nan)
    if len(values):
        got = values.groupby(idx, sort=True).quantile(q)
        out[got.index.to_numpy(dtype=np.int64)] = got.to_numpy(dtype=float)
    return out


def _sums(values: np.ndarray, idx: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(idx, weights=values.astype(float), minlength=n)[:n]


def timeseries(
    df: pd.DataFrame,
    activity: Sequence[Mapping[str, Sequence[float]]],
    window: float,
    engines: int,
) -> pd.DataFrame:
    """One row per ``window`` seconds of the measured requests' arrival times, with the
    columns :data:`TIMESERIES_COLUMNS` (see the module's text). ``activity``: per engine,
    its flat ``gpu`` spans (:class:`kvsim.sim.simulation.SimOutput`); none gives a NaN
    ``gpu_busy_frac``. :class:`InputError` naming ``run.timeseries_window`` when the
    windows would be more than :data:`MAX_WINDOWS`."""
    if not (window > 0 and np.isfinite(window)):
        raise InputError(f"{window!r} is not a positive duration", where="run.timeseries_window")
    done = df[df["decision"] != "dropped"] if "decision" in df else df
    done = done[
        np.isfinite(done["ttft_s"].to_numpy(dtype=float))
        & np.isfinite(done["arrival_s"].to_numpy(dtype=float))
    ]
    m = done[~done["warmup"].astype(bool)] if "warmup" in done else done
    if m.empty:
        return pd.DataFrame({c: pd.Series(dtype=float) for c in COLUMN_NAMES})
    arrival = m["arrival_s"].to_numpy(dtype=float)
    k = np.floor(arrival / window)
    k0 = float(k.min())
    n = int(k.max() - k0) + 1
    if n > MAX_WINDOWS:
        raise InputError(
            f"{window:g} s makes {n:,} windows of the run's "
            f"{float(arrival.max() - arrival.min()):g} s of arrivals (at most {MAX_WINDOWS:,}); "
            "give a wider window",
            where="run.timeseries_window",
        )
    idx = (k - k0).astype(np.int64)
    starts = (k0 + np.arange(n)) * window
    ends = starts + window
    count = np.bincount(idx, minlength=n)[:n]
    empty = count == 0
    out: dict[str, np.ndarray] = {
        "window_start_s": starts,
        "window_end_s": ends,
        "requests": count.astype(np.int64),
    }
    ttft = m["ttft_s"].astype(float)
    if "warm" in m:
        warm = m["warm"].to_numpy(dtype=bool)
        out["requests_warm"] = np.bincount(idx[warm], minlength=n)[:n].astype(np.int64)
        out["requests_cold"] = out["requests"] - out["requests_warm"]
    else:
        out["requests_cold"] = out["requests_warm"] = np.full(n, np.nan)
    for q in (50, 95, 99):
        out[f"ttft_p{q}_s"] = _quantile(ttft, idx, n, q / 100)
    for name, sel in (("cold", False), ("warm", True)):
        if "warm" in m:
            keep = m["warm"].to_numpy(dtype=bool) == sel
            out[f"ttft_{name}_p50_s"] = _quantile(ttft[keep], idx[keep], n, 0.5)
        else:
            out[f"ttft_{name}_p50_s"] = np.full(n, np.nan)
    if "input_tokens" in m and "tokens_compute" in m:
        prompt = _sums(m["input_tokens"].to_numpy(), idx, n)
        computed = _sums(m["tokens_compute"].to_numpy(), idx, n)
        with np.errstate(invalid="ignore", divide="ignore"):
            out["hit_ratio"] = np.where(prompt > 0, (prompt - computed) / prompt, np.nan)
    else:
        out["hit_ratio"] = np.full(n, np.nan)
    if "recomputed_tokens" in m:
        recomputed = m["recomputed_tokens"].to_numpy(dtype=float)
        out["recomputed_tokens"] = _sums(recomputed, idx, n)
    else:
        out["recomputed_tokens"] = np.full(n, np.nan)
    if "recomputed_tokens" in m and "gpu_compute_s" in m and "tokens_compute" in m:
        gpu = np.nan_to_num(m["gpu_compute_s"].to_numpy(dtype=float))
        tc = m["tokens_compute"].to_numpy(dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(tc > 0, recomputed / tc, 0.0)
        num, den = _sums(gpu * share, idx, n), _sums(gpu, idx, n)
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.where(den > 0, num / den, 0.0)  # no GPU compute: none recomputed
        out["gpu_recompute_frac"] = np.where(empty, np.nan, frac)
    else:
        out["gpu_recompute_frac"] = np.full(n, np.nan)
    out["gpu_busy_frac"] = _gpu_busy(done, activity, starts, ends, engines)
    restored = _restored(m)
    for p in RESTORE_PARTS:
        col = f"restore_{p}_s"
        if col in m:
            v = m[col].to_numpy(dtype=float)
            ok = restored & np.isfinite(v)
            total, seen = _sums(v[ok], idx[ok], n), np.bincount(idx[ok], minlength=n)[:n]
            with np.errstate(invalid="ignore", divide="ignore"):
                out[f"restore_{p}_mean_s"] = np.where(seen > 0, total / seen, np.nan)
        else:
            out[f"restore_{p}_mean_s"] = np.full(n, np.nan)
    for s in SOURCES:
        col = f"tokens_{s}"
        out[col] = (
            _sums(m[col].to_numpy(), idx, n).astype(np.int64) if col in m else np.full(n, np.nan)
        )
    for t in BYTE_TIERS:
        col = f"bytes_{t}"
        out[col] = _sums(m[col].to_numpy(), idx, n) if col in m else np.full(n, np.nan)
    return pd.DataFrame({c: out[c] for c in COLUMN_NAMES})


def _restored(m: pd.DataFrame) -> np.ndarray:
    """The requests that restored: decision restore or fallback (the summary's restore
    parts are over these); in a table without decisions, those with a restore time."""
    if "decision" in m:
        return m["decision"].astype(str).isin(("restore", "fallback")).to_numpy()
    restore = m["load_s"].to_numpy(dtype=float) if "load_s" in m else np.zeros(len(m))
    if "load_prefetch_s" in m:
        restore = restore - m["load_prefetch_s"].to_numpy(dtype=float)
    return restore > 0


def of_results(results: Results) -> pd.DataFrame:
    """A run's time series in its scenario's ``run.timeseries_window`` (what ``kvsim run
    --out`` writes as timeseries.parquet)."""
    sc = results.scenario
    return timeseries(
        results.requests, results.activity, sc.run.timeseries_window, sc.cluster.engines
    )


def _gpu_busy(
    done: pd.DataFrame,
    activity: Sequence[Mapping[str, Sequence[float]]],
    starts: np.ndarray,
    ends: np.ndarray,
    engines: int,
) -> np.ndarray:
    """GPU work inside each window / (engines x the window's time up to the last first
    token of any finished request, warm-up included: the summary's clock)."""
    if not activity or engines <= 0:
        return np.full(len(starts), np.nan)
    hi = float(done["finish_s"].max())
    lo = starts
    top = np.minimum(ends, hi)
    # busy time in [start, min(end, hi)]: the spans' integral at both ends of each window
    edges = np.concatenate((lo, top))
    flat = [np.asarray(a.get("gpu", ()), dtype=float) for a in activity]
    spans = np.concatenate(flat).reshape(-1, 2) if flat else np.empty((0, 2))
    spans = spans[spans[:, 1] > spans[:, 0]]
    upto = _covered(edges, np.sort(spans[:, 0])) - _covered(edges, np.sort(spans[:, 1]))
    n = len(starts)
    busy = upto[n:] - upto[:n]
    span = top - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(span > 0, busy / (engines * span), 0.0)
