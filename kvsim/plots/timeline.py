"""A run over simulated time: requests in prefill and waiting (from the requests table),
and its time series (TTFT percentiles, hit ratio, GPU busy, recompute share) a panel each."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter, PercentFormatter

from kvsim.plots import style
from kvsim.plots.style import seconds_axis, wrap


def engine_timeline_plot(
    df: Any,
    engines: int,
    path: str | os.PathLike[str],
    title: str,
    bins: int = 200,
    in_folder: bool = False,
) -> Path:
    """Requests in prefill (from their first step to their last chunk; batch-mates share a
    step, so this counts requests, not GPU time: the summary's gpu_busy_frac is that) and
    requests waiting, over simulated time, all engines."""
    start = float(df["arrival_s"].min())
    end = float(df["finish_s"].max())
    if not end > start:  # every request at one instant: a window of one second
        end = start + 1.0
    edges = np.linspace(start, end, bins + 1)
    width = edges[1] - edges[0]

    def covered(t: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """sum over intervals of max(0, t - start), for each t (starts sorted)."""
        k = np.searchsorted(starts, t)
        csum = np.concatenate([[0.0], np.cumsum(starts)])
        return t * k - csum[k]

    def occupancy(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Time each bin spends inside the intervals [a, b], summed over intervals."""
        f = covered(edges, np.sort(a)) - covered(edges, np.sort(b))  # integral up to t
        return np.diff(f)

    fin = df["finish_s"].to_numpy() - df["store_s"].to_numpy()
    computing = occupancy(fin - df["compute_s"].to_numpy(), fin) / width
    waiting = occupancy(df["arrival_s"].to_numpy(), df["start_s"].to_numpy()) / width
    per, unit = _time_unit(end - start)
    mid = (edges[:-1] + edges[1:]) / 2 / per
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    ax1.plot(mid, computing, lw=1)
    ax1.set_ylabel(f"requests in prefill\n({engines} engines)")
    ax1.set_ylim(0, None)
    ax1.grid(alpha=0.3)
    ax2.plot(mid, waiting, lw=1, color="#c44e52")
    ax2.set_ylabel("requests waiting\n(first wait)")
    ax2.set_xlabel(f"simulated time ({unit})")
    ax2.grid(alpha=0.3)
    ax1.set_title(wrap(title, 80))
    fig.tight_layout()
    return style.save(fig, path, in_folder)


def _time_unit(span: float) -> tuple[float, str]:
    """Seconds per unit and the unit's name for a simulated-time axis ``span`` long."""
    if span > 2 * 3600:
        return 3600.0, "h"
    if span > 10 * 60:
        return 60.0, "min"
    return 1.0, "s"


def timeseries_plot(
    ts: Any, path: str | os.PathLike[str], title: str, in_folder: bool = False
) -> Path:
    """A run's time series (:func:`kvsim.results.timeseries.timeseries`) over simulated
    time, a panel each: TTFT p50 and p95, hit ratio, GPU busy, and the share of GPU
    compute time spent recomputing evicted tokens; one point per window, at its middle
    (empty windows leave gaps). A panel whose column the run did not record says so."""
    start = ts["window_start_s"].to_numpy(float)
    end = ts["window_end_s"].to_numpy(float)
    span = float(end.max() - start.min()) if len(ts) else 0.0
    per, unit = _time_unit(span)
    mid = (start + end) / 2 / per
    fig, axes = plt.subplots(4, 1, figsize=(8, 8.4), sharex=True)
    ax_t, ax_hit, ax_gpu, ax_re = axes

    def values(column: str) -> np.ndarray:
        v = ts[column].to_numpy(float) if column in ts else np.full(len(ts), np.nan)
        return np.where(np.isfinite(v), v, np.nan)

    def draw(ax: Any, column: str, label: str, scale: float = 1.0, **kw: Any) -> bool:
        v = values(column)
        if not np.isfinite(v).any():
            return False
        ax.plot(mid, v * scale, "o-", ms=2.5, lw=1, label=label, **kw)
        return True

    def none(ax: Any, what: str) -> None:
        ax.text(0.5, 0.5, f"{what}: not recorded", transform=ax.transAxes, ha="center", va="center")

    drawn = [draw(ax_t, f"ttft_{q}_s", f"TTFT {q}") for q in ("p50", "p95")]
    if any(drawn):
        ax_t.legend(fontsize=8, loc="upper left")
        ax_t.set_ylim(0, None)
    else:
        none(ax_t, "TTFT")
    ttfts = [v for q in ("p50", "p95") for v in values(f"ttft_{q}_s")]
    seconds_axis(ax_t, ttfts, "TTFT")
    for ax, column, label, what in (
        (ax_hit, "hit_ratio", "hit ratio\n(% of prompt tokens)", "hit ratio"),
        (ax_gpu, "gpu_busy_frac", "GPU busy\n(% of engine time)", "GPU busy"),
        (
            ax_re,
            "gpu_recompute_frac",
            "recompute share\n(% of GPU compute)",
            "recomputed tokens",
        ),
    ):
        if not draw(ax, column, label, 100.0):
            none(ax, what)
        ax.set_ylabel(label)
        top = float(np.nanmax(values(column), initial=0.0))
        ax.set_ylim(0, max(105.0, min(105.0 * top, 1e6)))  # GPU work summed over overlapping spans
        ax.yaxis.set_major_formatter(PercentFormatter(100, decimals=0))
    for ax in axes:
        ax.grid(alpha=0.3)
    ax_re.set_xlabel(f"simulated time ({unit}; arrivals per window)")
    ax_re.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax_t.set_title(wrap(title, 80))
    fig.tight_layout()
    return style.save(fig, path, in_folder)
