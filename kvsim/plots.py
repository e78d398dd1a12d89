"""Figures (matplotlib, headless): labelled with units and the scenario name, saved as
PNG or SVG by the file's extension. Plotting is an edge: nothing in the core imports it."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from kvsim.physics.costmodel import GIB, CostModel


def _save(fig: plt.Figure, path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    tmp = p.with_name(f".{p.stem}.tmp-{os.getpid()}{p.suffix}")
    try:
        fig.savefig(tmp, dpi=130, bbox_inches="tight")
        os.replace(tmp, p)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return p


def costmodel_plot(
    model: CostModel,
    bandwidths: Sequence[float],
    path: str | os.PathLike[str],
    recompute: Callable[[int], float] | None = None,
    title: str = "",
) -> Path:
    """Restore time against prompt length, one line per bandwidth, recompute for
    reference; each crossover marked where a line meets the recompute line."""
    tokens = np.linspace(1024, 131072, 256)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    linear = [model.recompute(t) for t in tokens]
    ax.plot(
        tokens / 1000,
        linear,
        color="black",
        lw=2,
        label=f"recompute S/R (R = {model.rate / 1000:.1f}k tok/s)",
    )
    if recompute is not None:
        ax.plot(
            tokens / 1000,
            [recompute(int(t)) for t in tokens],
            color="black",
            lw=1,
            ls=":",
            label="recompute, timing table (super-linear)",
        )
    for bw in bandwidths:
        restore = [model.restore(t, bw) for t in tokens]
        (line,) = ax.plot(tokens / 1000, restore, lw=1.5, label=f"restore at {bw / GIB:.3g} GiB/s")
        x = model.crossover(bw)
        if math.isfinite(x) and x <= tokens[-1]:
            ax.plot([x / 1000], [model.recompute(x)], "o", color=line.get_color())
            ax.annotate(
                f"{x / 1000:.1f}k",
                (x / 1000, model.recompute(x)),
                textcoords="offset points",
                xytext=(4, -12),
                fontsize=8,
            )
    ax.set_xlabel("prompt length (thousand tokens)")
    ax.set_ylabel("time to have the prompt's KV (s)")
    ax.set_title(
        title
        or f"restore vs recompute: T0 = {model.t0 * 1000:.0f} ms, "
        f"B* = {model.b_star / GIB:.3g} GiB/s"
    )
    ax.set_ylim(0, max(linear) * 1.05)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return _save(fig, path)


def ttft_cdf_plot(
    series: Mapping[str, Sequence[float]], path: str | os.PathLike[str], title: str
) -> Path:
    """Empirical CDFs of TTFT (log time axis), p50 and p99 marked and given in the legend."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, values in series.items():
        v = np.sort(np.asarray(values, dtype=float))
        if v.size == 0:
            continue
        p50, p99 = (float(np.quantile(v, q)) for q in (0.5, 0.99))
        y = np.arange(1, v.size + 1) / v.size
        (line,) = ax.step(v, y, where="post", label=f"{label}: p50 {p50:.3g} s, p99 {p99:.3g} s")
        ax.plot([p50, p99], [0.5, 0.99], "o", color=line.get_color(), ms=4)
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (s, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3, which="both")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left")
    return _save(fig, path)
