"""TTFT figures of a run: its empirical CDF (p50, p95 and p99 marked), and where the time
goes (queue, load, compute, store) per TTFT percentile band."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from kvsim.plots import style
from kvsim.plots.style import seconds_axis, unit_axis, wrap
from kvsim.units import fmt_duration


def ttft_cdf_plot(
    series: Mapping[str, Sequence[float]],
    path: str | os.PathLike[str],
    title: str,
    in_folder: bool = False,
) -> Path:
    """Empirical CDFs of TTFT (log time axis, in s or ms), p50, p95 and p99 marked and
    given in the legend."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    shown: list[float] = []
    for label, values in series.items():
        v = np.sort(np.asarray(values, dtype=float))
        if v.size == 0:
            continue
        p50, p95, p99 = (float(np.quantile(v, q)) for q in (0.5, 0.95, 0.99))
        y = np.arange(1, v.size + 1) / v.size
        shown += [float(v[v > 0].min()) if (v > 0).any() else p50, float(v[-1])]
        (line,) = ax.step(
            v,
            y,
            where="post",
            label=wrap(
                f"{label}: p50 {fmt_duration(p50)}, p95 {fmt_duration(p95)}, "
                f"p99 {fmt_duration(p99)}",
                70,
            ),
        )
        ax.plot([p50, p95, p99], [0.5, 0.95, 0.99], "o", color=line.get_color(), ms=4)
    unit_axis(ax, "x", "duration", shown, label="TTFT", log=True)
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3, which="both")
    ax.set_title(wrap(title, 70))
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return style.save(fig, path, in_folder)


PARTS = (  # TTFT's parts (lost_s and frontend_s only where some request has any)
    ("lost_s", "lost (failed engine)"),
    ("frontend_s", "frontend (API server, tokenizer, output)"),
    ("queue_wait_s", "queue"),
    ("load_s", "load (prefetch wait, restore)"),
    ("compute_s", "compute"),
    ("store_s", "store copy"),
)
BANDS = ((0, 50), (50, 90), (90, 99), (99, 100))


def ttft_breakdown_plot(
    df: Any, path: str | os.PathLike[str], title: str, in_folder: bool = False
) -> Path:
    """Mean lost / frontend / queue / load / compute / store time of the requests in each TTFT
    percentile band, stacked (they sum to its mean TTFT): where the tail's time goes."""
    optional = ("lost_s", "frontend_s")
    # the parts present and numeric (a damaged optional column is left out, not read)
    parts = [
        (c, name)
        for c, name in PARTS
        if c in df
        and pd.api.types.is_numeric_dtype(df[c])
        and (c not in optional or (df[c].fillna(0) > 0).any())
    ]
    ttft = df["ttft_s"].to_numpy()
    edges = np.percentile(ttft, [b[0] for b in BANDS] + [100])
    fig, ax = plt.subplots(figsize=(7, 4.2))
    labels = []
    bottoms = np.zeros(len(BANDS))
    means = []
    for lo, hi, (a, b) in zip(edges[:-1], edges[1:], BANDS, strict=True):
        sel = (ttft >= lo) & (ttft <= hi) if b == 100 else (ttft >= lo) & (ttft < hi)
        part = df[sel]
        means.append([float(part[c].mean()) if len(part) else 0.0 for c, _ in parts])
        labels.append(f"p{a}-p{b}\n({int(sel.sum())} req)")
    means_arr = np.array(means)
    for j, (_, name) in enumerate(parts):
        ax.bar(labels, means_arr[:, j], bottom=bottoms, label=name)
        bottoms += means_arr[:, j]
    seconds_axis(ax, bottoms, "mean time per request")
    ax.set_xlabel("requests by TTFT percentile band")
    ax.set_title(wrap(title, 70))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return style.save(fig, path, in_folder)
