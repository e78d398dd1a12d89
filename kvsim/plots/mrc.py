"""Cache-analysis figures of a trace or a recorded run: miss-ratio curves (hit ratio
against cache capacity, a curve per policy) and the reuse-distance histogram."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator

from kvsim.plots import style
from kvsim.plots.style import tick_text, unit_axis, wrap


def mrc_plot(
    points: Sequence[Mapping[str, Any]],
    path: str | os.PathLike[str],
    title: str,
    kv_bytes: float | None = None,
) -> Path:
    """Hit ratio against cache capacity (log scale), one step curve per ``policy`` of the
    points (none: "LRU prefix cache"); the unlimited cache dashed. Capacities are
    ``capacity_tokens`` (a second axis in GB when ``kv_bytes`` is given) or
    ``capacity_bytes`` (a recorded run's stream)."""
    in_bytes = any("capacity_bytes" in p for p in points)
    cap = "capacity_bytes" if in_bytes else "capacity_tokens"
    curves: dict[str, list[Mapping[str, Any]]] = {}
    for p in points:
        curves.setdefault(str(p.get("policy", "LRU prefix cache")), []).append(p)
    unlimited = next((p["hit_ratio"] for p in points if p[cap] is None), None)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    xs: list[float] = []
    styles = ("-", "--", "-.", ":")
    for i, (name, pts) in enumerate(curves.items()):
        finite = sorted((p for p in pts if p[cap] is not None), key=lambda p: p[cap])
        x = [p[cap] for p in finite]
        xs += x
        ax.step(
            x,
            [100 * p["hit_ratio"] for p in finite],
            where="post",
            label=name,
            ls=styles[(i // 10) % len(styles)],
        )
    if unlimited is not None:
        ax.axhline(
            100 * unlimited, ls="--", color="grey", label=f"unlimited: {100 * unlimited:.1f}%"
        )
    if in_bytes:
        unit_axis(ax, "x", "size", xs, label="cache capacity", log=True)
        ax.set_ylabel("hit ratio (% of blocks asked)")
    else:
        unit_axis(ax, "x", None, xs, label="cache capacity (tokens)", log=True)
        ax.set_ylabel("hit ratio (% of prompt tokens)")
    if xs and max(xs) > 1e3 * max(min(xs), 1e-9):  # many decades: a tick a decade, readable
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0,)))
    if kv_bytes and not in_bytes:
        sec = ax.secondary_xaxis(
            "top", functions=(lambda t: t * kv_bytes / 1e9, lambda g: g * 1e9 / kv_bytes)
        )
        sec.set_xlabel("cache capacity (GB at this model's KV bytes/token)")
        sec.xaxis.set_major_formatter(FuncFormatter(lambda v, _: tick_text(v)))
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(wrap(title, 70))
    fig.tight_layout()
    return style.save(fig, path)


def reuse_plot(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str], title: str) -> Path:
    """Reuse-distance histogram: the share of block references per power-of-two bin of
    LRU stack distance (distinct blocks), first uses ("cold") as the last bar."""
    bins = [r for r in rows if r["low"] is not None]
    cold = next((r for r in rows if r["low"] is None), None)
    labels = [tick_text(r["low"]) for r in bins]
    shares = [100 * r["share"] for r in bins]
    if cold is not None:
        labels.append("cold")
        shares.append(100 * cold["share"])
    fig, ax = plt.subplots(figsize=(max(7.0, 0.35 * len(labels) + 2), 4.2))
    x = np.arange(len(labels))
    colors = ["C0"] * len(bins) + (["grey"] if cold is not None else [])
    ax.bar(x, shares, color=colors)
    ax.set_xticks(x, labels, rotation=90 if len(labels) > 14 else 0, fontsize=8)
    ax.set_xlabel(
        "reuse distance (distinct blocks since the last use; a bar from the value shown to "
        "twice it)"
    )
    ax.set_ylabel("block references (%)")
    ax.grid(alpha=0.3, axis="y")
    ax.set_title(wrap(title, 70))
    fig.tight_layout()
    return style.save(fig, path)
