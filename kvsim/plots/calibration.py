"""The calibration's residual figure (``kvsim calibrate --out``: residuals.png): each
row's predicted / measured TTFT at the fitted values, against prompt length and by the
tier its cached prefix sat in, fit rows filled and held-out rows open, the 1.25x band
shaded; the scenario's values (before the fit) as grey marks for comparison."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from kvsim.plots import style

TIER_COLORS = {"none": "#4c72b0", "gpu": "#55a868", "host": "#c44e52"}
TIER_NAMES = {"none": "cold (no cached prefix)", "gpu": "prefix in GPU", "host": "prefix in host"}
BAND = 1.25


def residual_plot(
    rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str], title: str = ""
) -> Path:
    """Two panels from :func:`kvsim.calibrate.report.row_table`'s records (see the module
    docstring)."""
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(11, 4.6), gridspec_kw={"width_ratios": [3, 2]}, sharey=True
    )
    tiers = [t for t in TIER_COLORS if any(r["tier"] == t for r in rows)]
    for ax in (left, right):
        ax.axhspan(1 / BAND, BAND, color="0.92", zorder=0)
        ax.axhline(1.0, color="0.4", lw=0.8, zorder=1)
        ax.set_yscale("log")
    for i, tier in enumerate(tiers):
        mine = [r for r in rows if r["tier"] == tier]
        rng = np.random.default_rng(i)  # a fixed jitter: the same figure every time
        for held in (False, True):
            sel = [r for r in mine if (r["split"] == "held-out") == held]
            if not sel:
                continue
            x = np.array([r["prompt_tokens"] for r in sel], dtype=float)
            y = np.array([r["ratio_after"] for r in sel])
            yb = np.array([r["ratio_before"] for r in sel])
            face = "none" if held else TIER_COLORS[tier]
            label = f"{TIER_NAMES[tier]}, {'held out' if held else 'fit'}"
            left.scatter(x, yb, marker="_", color="0.6", s=60, zorder=2)
            left.scatter(
                x, y, facecolors=face, edgecolors=TIER_COLORS[tier], s=36, zorder=3, label=label
            )
            jitter = i + rng.uniform(-0.15, 0.15, len(sel))
            right.scatter(jitter, yb, marker="_", color="0.6", s=60, zorder=2)
            right.scatter(jitter, y, facecolors=face, edgecolors=TIER_COLORS[tier], s=36, zorder=3)
    left.set_xscale("log")
    left.set_xlabel("prompt tokens")
    left.set_ylabel("kvsim / measured TTFT")
    left.legend(fontsize=8, loc="best")
    right.set_xticks(range(len(tiers)))
    right.set_xticklabels([TIER_NAMES[t] for t in tiers], fontsize=8)
    right.set_xlim(-0.6, len(tiers) - 0.4)
    right.set_xlabel("where the cached prefix sat")
    lo = min([r["ratio_after"] for r in rows] + [r["ratio_before"] for r in rows] + [1 / BAND])
    hi = max([r["ratio_after"] for r in rows] + [r["ratio_before"] for r in rows] + [BAND])
    left.set_ylim(lo / 1.1, hi * 1.1)
    for ax in (left, right):
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _p: f"{v:g}"))
        ax.yaxis.set_minor_formatter(plt.FuncFormatter(lambda v, _p: f"{v:g}"))
    style.suptitle(
        fig,
        title or "residuals at the fitted values (grey: the scenario's values; band: within 1.25x)",
    )
    return style.save(fig, path, in_folder=True)
