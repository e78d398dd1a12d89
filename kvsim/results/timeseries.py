"""A run's measurements over time: one row per window of arrival times (timeseries.parquet).

:func:`timeseries` is pure: the requests table and the engines' activity spans in, a
DataFrame out. Windows are ``[k * window, (k + 1) * window)`` of simulated time, from the
one holding the first measured request's arrival to the one holding the last (windows
with no arrival in between are kept, with 0 requests and NaN statistics), so the rows of
two runs with the same window line up. A request belongs to the window of its arrival;
the GPU's busy fraction is of the window's own time (the engines' GPU work spans clipped
to the window and to the last first token, as the summary's ``gpu_busy_frac``).

The requests counted are those the summary measures: finished, after the warm-up and,
with ``run.prompt_range``, with a prompt in that range (``keep``;
:func:`kvsim.results.runfolder.of_results` passes it), so a window's statistics and the
summary's agree in scope. The GPU's busy fraction is the engines' and so covers every
request's work, as the summary's does.

Columns the requests table lacks (``warm``, ``restore_*_s``, ``recomputed_tokens``,
``gpu_compute_s``: an older kvsim's table) give NaN columns, so the table always has
:data:`TIMESERIES_COLUMNS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kvsim.errors import InputError
from kvsim.results.metrics import SOURCES, sources
from kvsim.units import fmt_duration

RESTORE_PARTS = ("lookup", "queue", "read", "h2d")
BYTE_TIERS = ("host", "nvme", "remote", "peer")
#: past this many windows a run's table would not fit in memory: a typo in the window
MAX_WINDOWS = 1_000_000

TIMESERIES_COLUMNS: tuple[tuple[str, str], ...] = (
    ("window_start_s", "start of the window (simulated time, a multiple of the window)"),
    ("window_end_s", "end of the window (window_start_s + run.timeseries_window)"),
    (
        "requests",
        "measured requests that arrived in the window (finished, not warm-up, a prompt in "
        "run.prompt_range when it is set: the summary's scope)",
    ),
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
        "at the last first token (every request's work, as the summary's gpu_busy_frac)",
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
    keep: pd.Series | np.ndarray | None = None,
) -> pd.DataFrame:
    """One row per ``window`` seconds of the measured requests' arrival times, with the
    columns :data:`TIMESERIES_COLUMNS` (see the module's text). ``activity``: per engine,
    its flat ``gpu`` spans (:class:`kvsim.sim.simulation.SimOutput`); none gives a NaN
    ``gpu_busy_frac``. ``keep`` (aligned with ``df``): the rows in the summary's scope
    (``run.prompt_range``); the others are not counted (None: every row).
    :class:`InputError` naming ``run.timeseries_window`` when the windows would be more
    than :data:`MAX_WINDOWS`."""
    if not (window > 0 and np.isfinite(window)):
        raise InputError(f"{window!r} is not a positive duration", where="run.timeseries_window")
    ok = np.isfinite(df["ttft_s"].to_numpy(dtype=float)) & np.isfinite(
        df["arrival_s"].to_numpy(dtype=float)
    )
    if "decision" in df:
        ok &= (df["decision"] != "dropped").to_numpy()
    done = df[ok]  # (the busy clock's end: every finished request's, as the summary's)
    if keep is not None:  # the summary's scope (run.prompt_range)
        ok &= np.asarray(keep, dtype=bool)
    m = df[ok]
    m = m[~m["warmup"].astype(bool)] if "warmup" in m else m
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
        again = recomputed
        if "preempted_tokens" in m:  # a preempted attempt's tokens: computed, and lost
            lost = m["preempted_tokens"].to_numpy(dtype=float)
            tc = tc + lost
            again = recomputed + lost
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(tc > 0, again / tc, 0.0)
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
    # a tier kind of the user's (docs/extending.md): its tokens and bytes, after the rest
    extra: list[str] = []
    for t in sources(m.columns):
        if t not in SOURCES:
            for col in (f"tokens_{t}", f"bytes_{t}"):
                if col in m:
                    total = _sums(m[col].to_numpy(), idx, n)
                    out[col] = total.astype(np.int64) if col.startswith("tokens_") else total
                    extra.append(col)
    return pd.DataFrame({c: out[c] for c in (*COLUMN_NAMES, *extra)})


def _restored(m: pd.DataFrame) -> np.ndarray:
    """The requests that restored: decision restore or fallback (the summary's restore
    parts are over these); in a table without decisions, those with a restore time."""
    if "decision" in m:
        return m["decision"].astype(str).isin(("restore", "fallback")).to_numpy()
    restore = m["load_s"].to_numpy(dtype=float) if "load_s" in m else np.zeros(len(m))
    if "load_prefetch_s" in m:
        restore = restore - m["load_prefetch_s"].to_numpy(dtype=float)
    return restore > 0


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


# ---- steady state: is the measured window still trending? -------------------------------

#: the measured window's series is cut into this many consecutive blocks, whose means
#: (batch means: nearly independent where single windows are not) the trend is fitted to
TREND_BLOCKS = 8
#: Student t quantile for a two-sided 1% test of the slope of TREND_BLOCKS block means
#: (TREND_BLOCKS - 2 = 6 degrees of freedom): a stationary series with independent block
#: means is flagged at most 1% of the time (tests/test_steady_state.py measures it)
TREND_T = 3.707
#: and only a change that matters: the fitted rise across the window is at least this
#: share of the series' mean (a long run's small but significant drift is not flagged)
TREND_MIN_RISE = 0.25
#: fewer windows than this (two per block) tell nothing: no verdict
TREND_MIN_WINDOWS = 2 * TREND_BLOCKS


@dataclass(frozen=True)
class Trend:
    """A series still rising over the measured window: the straight line through its
    block means, at the first block and the last, and the slope's t statistic."""

    first: float
    last: float
    t: float

    @property
    def rise(self) -> float:
        """last / first - 1 (inf from 0)."""
        return self.last / self.first - 1 if self.first > 0 else math.inf


def trend(
    values: Sequence[float] | np.ndarray,
    *,
    blocks: int = TREND_BLOCKS,
    t_crit: float = TREND_T,
    min_rise: float = TREND_MIN_RISE,
) -> Trend | bool | None:
    """Is a series (one value per window, in time order; NaN windows left out) still
    rising? Pure. Its values are cut into ``blocks`` consecutive blocks and a straight
    line fitted to the block means; a :class:`Trend` when the slope is positive with
    t above ``t_crit`` (a two-sided 1% test for 8 blocks) *and* the fitted rise from the
    first block to the last is at least ``min_rise`` of the series' mean; False when it
    is not (steady, as far as this test sees); None when fewer than two values a block
    (too short to tell)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if blocks < 3 or len(x) < 2 * blocks:
        return None
    means = np.array([b.mean() for b in np.array_split(x, blocks)])
    pos = np.arange(blocks, dtype=float)
    pos -= pos.mean()
    slope = float(pos @ (means - means.mean()) / (pos @ pos))
    fit = means.mean() + slope * pos
    resid = means - fit
    se = math.sqrt(float(resid @ resid) / (blocks - 2) / float(pos @ pos))
    t = slope / se if se > 0 else (math.inf if slope > 0 else 0.0)
    first, last = float(fit[0]), float(fit[-1])
    scale = abs(float(x.mean()))
    if t > t_crit and last - first >= min_rise * scale and last > first:
        return Trend(first, last, t)
    return False


def _percent(x: float) -> str:
    return f"{x:.0%}"


#: measured requests that let a run shorter than :data:`TREND_MIN_WINDOWS` windows be
#: judged on finer ones (four a window on average)
TREND_MIN_REQUESTS = 4 * TREND_MIN_WINDOWS


def steady_state(
    m: pd.DataFrame,
    activity: Sequence[Mapping[str, Sequence[float]]],
    window: float,
    engines: int,
    end: float,
) -> dict[str, object]:
    """The summary's ``steady_state``: whether the engines' GPU busy fraction or the
    measured requests' mean queue wait, per ``window`` of arrivals (as timeseries.parquet
    cuts them), is still rising across the measured window (:func:`trend`). ``m``: the
    measured requests (``arrival_s``, ``queue_wait_s``); ``end``: the summary's clock
    end (the last first token). ``{"steady": True | False | None, "warnings": [...]}``:
    None (with no warning) when the run has fewer than :data:`TREND_MIN_WINDOWS`
    windows and fewer than :data:`TREND_MIN_REQUESTS` measured requests (with as many
    requests, a run shorter than that many windows is cut into that many shorter ones)."""
    arrival = m["arrival_s"].to_numpy(dtype=float) if len(m) else np.empty(0)
    arrival = arrival[np.isfinite(arrival)]
    if not (window > 0 and np.isfinite(window)) or arrival.size == 0:
        return {"steady": None, "warnings": []}
    span = float(arrival.max() - arrival.min())
    if span < TREND_MIN_WINDOWS * window and arrival.size >= TREND_MIN_REQUESTS:
        window = span / TREND_MIN_WINDOWS  # a short, busy run: finer windows, same test
    k = np.floor(m["arrival_s"].to_numpy(dtype=float) / window) if window > 0 else arrival
    k0 = float(np.nanmin(k))
    n = int(np.nanmax(k) - k0) + 1
    if n < TREND_MIN_WINDOWS or n > MAX_WINDOWS:
        return {"steady": None, "warnings": []}
    ok = np.isfinite(k)
    idx = (k[ok] - k0).astype(np.int64)
    starts = (k0 + np.arange(n)) * window
    busy = (
        _gpu_busy(pd.DataFrame({"finish_s": [end]}), activity, starts, starts + window, engines)
        if activity
        else np.full(n, np.nan)
    )
    busy = np.where(starts < end, busy, np.nan)  # windows past the clock's end: no value
    wait = m["queue_wait_s"].to_numpy(dtype=float)[ok]
    seen = np.bincount(idx, minlength=n)[:n]
    with np.errstate(invalid="ignore", divide="ignore"):
        queue = np.where(seen > 0, _sums(np.nan_to_num(wait), idx, n) / seen, np.nan)
    warnings = []
    verdicts = []
    tail = busy[np.isfinite(busy)][-max(len(busy) // TREND_BLOCKS, 1) :]
    late = float(tail.mean()) if tail.size else math.nan  # GPU busy in the last block
    for name, series in (("GPU busy", busy), ("queue wait", queue)):
        got = trend(series)
        verdicts.append(got)
        if isinstance(got, Trend):
            show: Callable[[float], str] = _percent if name == "GPU busy" else fmt_duration
            t = f"t = {got.t:.1f}" if got.t < 100 else "t > 100"
            warnings.append(
                f"not in steady state: {name} still rises across the measured window, from "
                f"{show(max(got.first, 0.0))} to {show(got.last)} ({fmt_duration(window)} "
                f"windows of arrivals, a straight line through {TREND_BLOCKS} block means, "
                f"{t}): its figures mix a filling system with a full one; "
                + (
                    "run longer (more requests) if it is still filling; if arrivals outrun "
                    f"what the engines serve (GPU busy {_percent(late)} at the end), the "
                    "queue grows without bound and a longer run will not settle it: lower "
                    "the load or add engines"
                    if name == "queue wait"
                    else "run longer (more requests) or lower the load"
                )
            )
    steady: bool | None = None if all(v is None for v in verdicts) else not warnings
    return {"steady": steady, "warnings": warnings}


STEADY_COLUMN = "steady_state.steady"  # a sweep's results table: each run's verdict


def unsteady_runs_note(table: pd.DataFrame) -> str | None:
    """A sweep's (or capacity search's) line on its runs whose measured window was still
    filling (:func:`steady_state`, the results table's ``steady_state.steady`` column:
    False); None when every run was steady or could not tell (an older kvsim's table has
    no such column)."""
    if STEADY_COLUMN not in table.columns or "run" not in table.columns:
        return None
    flags = table[STEADY_COLUMN]
    bad = table[flags.notna() & (flags.astype(object) == False)]  # noqa: E712 (None too)
    if bad.empty:
        return None
    runs = ", ".join(str(r) for r in bad["run"].tolist()[:10])
    more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
    return (
        f"not in steady state: {len(bad)} of {len(table)} runs (run {runs}{more}) still had "
        "their GPU busy or queue wait rising across the measured window (each run's "
        "summary steady_state): their figures mix a filling system with a full one; give "
        "them more requests or a lower load"
    )
