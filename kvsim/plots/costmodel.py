"""The cost model's figure (``kvsim costmodel --plot``): restore time against prompt
length per restore path, recompute for reference, the crossovers marked."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from kvsim.physics.costmodel import GIB, CostModel
from kvsim.plots import style
from kvsim.units import fmt_duration


def costmodel_plot(
    model: CostModel,
    paths: Sequence[Mapping[str, Any]],
    path: str | os.PathLike[str],
    recompute: Callable[[int], float] | None = None,
    title: str = "",
) -> Path:
    """Restore time against prompt length, one line per restore path of ``paths`` (the
    rows ``kvsim costmodel`` prints: ``path``, ``bandwidth``, ``t0_s``; nothing else is
    drawn), recompute for reference; each crossover marked where a line meets the
    recompute line. Line labels are :func:`costmodel_label` of their row."""
    tokens = np.linspace(1024, 131072, 256)
    # (constrained: the legend below the axes gets its room, the axes keep the width)
    fig, ax = plt.subplots(figsize=(7.5, 5.6), layout="constrained")
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
            label="recompute, step model (super-linear)",
        )
    for row in paths:
        bw = float(row["bandwidth"])
        m = CostModel(model.kv_bytes, model.rate, float(row["t0_s"]), model.reference_tokens)
        restore = [m.restore(t, bw) for t in tokens]
        (line,) = ax.plot(tokens / 1000, restore, lw=1.5, label=costmodel_label(row))
        x = m.crossover(bw)
        if math.isfinite(x) and x <= tokens[-1]:
            ax.plot([x / 1000], [m.recompute(x)], "o", color=line.get_color())
            ax.annotate(
                f"{x / 1000:.1f}k",
                (x / 1000, m.recompute(x)),
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
    # below the axes, in two columns: beside them it took half the figure's width
    fig.legend(loc="outside lower center", ncol=2, fontsize=7, frameon=False)
    return style.save(fig, path)


def costmodel_label(row: Mapping[str, Any]) -> str:
    """The legend entry of a restore path's line: its name, bandwidth and T0, as the table
    prints them."""
    return (
        f"restore, {row['path']}: {float(row['bandwidth']) / GIB:.4g} GiB/s, "
        f"T0 {fmt_duration(float(row['t0_s']))}"
    )
