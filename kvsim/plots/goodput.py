"""The goodput figure of a sweep judged against an SLO (``kvsim sweep --slo``, or its
file's ``slo:``): goodput (requests/s within every per-request bound) beside the
throughput against load, a curve per configuration; and, when the runs decode
(co-located serving: a ``tpot_p99_s`` column), TPOT p99 against load."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from kvsim.plots import style
from kvsim.plots.bands import fewest_seeds, seeds_text, spread
from kvsim.plots.labels import config_text, field_unit_of
from kvsim.plots.style import seconds_axis, suptitle, unit_axis, wrap
from kvsim.results.readers import as_number


def has_goodput(df: Any) -> bool:
    """Whether a sweep table was judged against an SLO (a ``goodput_rps`` with a value)."""
    return "goodput_rps" in df.columns and bool(
        np.isfinite(df["goodput_rps"].to_numpy(float)).any()
    )


def goodput_curves(
    df: Any, columns: Sequence[str], axis: str, path: Path, title: str = "", slo: Any = None
) -> Path:
    """Goodput (solid) and throughput (dashed, ``requests_per_s``) against the load axis,
    mean over seeds per configuration; a TPOT p99 panel when the table has one, with the
    threshold of ``slo``'s tpot_p99_s term as a line."""
    tpot = "tpot_p99_s" in df.columns and bool(np.isfinite(df["tpot_p99_s"].to_numpy(float)).any())
    fig, axes = plt.subplots(1, 2 if tpot else 1, figsize=(10 if tpot else 5.5, 4.4))
    axes = list(np.atleast_1d(axes))
    others = [c for c in columns if c != axis]
    inverse = axis.endswith("time_scale")  # a smaller time scale is more load
    xs = df[axis].map(as_number)
    df = df.assign(_x=1 / xs if inverse else xs)
    groups = df.groupby(others, sort=False) if others else [((), df)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        label = wrap(config_text(others, key) or "all", 48)
        pts = sorted(
            (x, spread(h["goodput_rps"])[0], spread(h["requests_per_s"])[0])
            for x, h in g.groupby("_x", sort=False)
        )
        (line,) = axes[0].plot([p[0] for p in pts], [p[1] for p in pts], "o-", ms=3, label=label)
        axes[0].plot([p[0] for p in pts], [p[2] for p in pts], "--", color=line.get_color(), lw=1)
        if tpot:
            tp = sorted((x, spread(h["tpot_p99_s"])[0]) for x, h in g.groupby("_x", sort=False))
            axes[1].plot([p[0] for p in tp], [p[1] for p in tp], "o-", ms=3, label=label)
    shown = [float(v) for v in df["_x"]]
    for ax in axes:
        if inverse:
            unit_axis(ax, "x", None, shown, label=f"load (x the trace's rate = 1 / {axis})")
        else:
            unit_axis(ax, "x", field_unit_of(axis), shown, label=axis)
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("requests/s: goodput (solid), throughput (dashed)")
    axes[0].set_ylim(bottom=0.0)
    if tpot:
        seconds_axis(axes[1], df["tpot_p99_s"], "TPOT p99")
        for t in getattr(slo, "terms", ()):
            if t.metric == "tpot_p99_s":
                axes[1].axhline(t.threshold, color="red", ls="--", lw=1, label=f"SLO {t}")
        axes[1].set_ylim(bottom=0.0)
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(fontsize=7)
    slo_name = (
        str(df["slo"].dropna().iloc[0])
        if "slo" in df.columns and df["slo"].notna().any()
        else "the SLO"
    )
    seeds = seeds_text(fewest_seeds(df, list(columns)))
    suptitle(fig, title or f"goodput under {slo_name} against {axis} ({seeds})")
    return style.save(fig, path, in_folder=True)
