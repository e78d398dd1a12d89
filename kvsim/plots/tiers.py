"""Where a run's prompt tokens came from (a bar per source), and per tier and engine its
lookups, evictions and bytes in and out (summary.json's ``tiers``)."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch

from kvsim.plots import style
from kvsim.plots.style import unit_axis, wrap


def token_sources_plot(
    fractions: Mapping[str, float],
    path: str | os.PathLike[str],
    title: str,
    in_folder: bool = False,
    enabled: Collection[str] | None = None,
) -> Path:
    """Share of prompt tokens by where they came from. ``enabled``: the run's tiers (its
    summary's ``tiers``); a tier not among them (disabled) has no bar, where a 0% bar
    would read as a tier that served nothing; GPU and compute are always drawn. None (an
    older kvsim's summary, without tiers): every source."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    always = ("gpu", "compute")
    names = [n for n in fractions if enabled is None or n in always or n in enabled]
    values = [100 * fractions[n] for n in names]
    # a source keeps its colour whichever are left out; compute is always the last colour
    # (a tier kind of the user's takes a colour after the built-in sources')
    palette = ["#4c72b0", "#55a868", "#c44e52", "#8172b2", "#ccb974", "#da8bc3", "#8c8c8c"]
    order = [n for n in fractions if n != "compute"]
    colours = [
        "#937860" if n == "compute" else palette[order.index(n) % len(palette)] for n in names
    ]
    bars = ax.bar(names, values, color=colours)
    for bar, v in zip(bars, values, strict=True):
        ax.annotate(
            f"{v:.1f}%",
            (bar.get_x() + bar.get_width() / 2, v),
            textcoords="offset points",
            xytext=(0, 3),
            ha="center",
            fontsize=8,
        )
    ax.set_ylabel("share of prompt tokens (%)")
    ax.set_ylim(0, max([*values, 1]) * 1.15)
    ax.set_title(wrap(title, 60))
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return style.save(fig, path, in_folder)


TIERS_ENGINE_BARS = 16  # more engines: one bar per tier (the mean engine, a min-max whisker)


def _tier_values(tier: Mapping[str, Any], key: str) -> tuple[list[float] | None, float | None]:
    """A counter of one tier: its value per engine (None: not kept per engine) and for
    the tier as a whole (None: not kept)."""
    per = [e[key] for e in tier["engines"] if key in e]
    whole = tier["total"].get(key)
    return (per if tier["engines"] and len(per) == len(tier["engines"]) else None), whole


def tiers_plot(
    tiers: Mapping[str, Mapping[str, Any]],
    path: str | os.PathLike[str],
    title: str,
    in_folder: bool = False,
) -> Path:
    """Per tier (in lookup order) and per engine, from
    :func:`kvsim.results.readers.read_tier_counts`: blocks the lookups asked it for
    (hits solid, misses hatched above them; the tier's hit ratio over its group), blocks
    evicted, bytes stored into it (``write_bytes``) and read out of it (``read_bytes``).
    Up to :data:`TIERS_ENGINE_BARS` engines get a bar each; with more, a tier gets one
    bar (the mean engine) with a whisker from the smallest to the largest engine. A
    counter kept only for the tier as a whole (the shared remote store's evictions; a
    summary without per-engine entries) is one outlined bar; a tier without the counter
    says n/a."""
    names = list(tiers)
    n_eng = max((len(t["engines"]) for t in tiers.values()), default=0)
    each = 0 < n_eng <= TIERS_ENGINE_BARS
    # engine colours: tab20's, darker first, greys left out (grey: n/a)
    cmap = plt.get_cmap("tab20")
    palette = [cmap(i) for i in (*range(0, 20, 2), *range(1, 20, 2)) if i not in (14, 15)]
    colors = [palette[i % len(palette)] for i in range(max(n_eng, 1))]
    grey = "#8c8c8c"
    whole_style: dict[str, Any] = {"facecolor": "none", "edgecolor": "black", "linewidth": 1.0}
    x = np.arange(len(names), dtype=float)
    width = 0.8 / n_eng if each else 0.6
    whole_used = False  # a whole-tier bar above 0 was drawn
    drawn: set[int] = set()  # engines with a bar above 0 (the legend lists only those)

    def bars(ax: Any, key: str, under: str | None = None, **kw: Any) -> list[float]:
        """One counter's bars (stacked on ``under``'s); every bar top drawn."""
        nonlocal whole_used
        tops: list[float] = []
        for i, name in enumerate(names):
            per, whole = _tier_values(tiers[name], key)
            base_per, base_whole = _tier_values(tiers[name], under) if under else (None, None)
            if per is not None and each:
                at = x[i] - 0.4 + width * (np.arange(len(per)) + 0.5)
                bottom = np.asarray(base_per if base_per is not None else [0.0] * len(per))
                ax.bar(at, per, width, bottom=bottom, color=colors[: len(per)], **kw)
                tops += list(bottom + np.asarray(per))
                drawn.update(j for j, v in enumerate(per) if v > 0)
            elif per is not None:  # many engines: the mean engine, a whisker min..max
                a = np.asarray(per, dtype=float)
                b = float(np.mean(base_per)) if base_per is not None else 0.0
                mean = float(a.mean())
                err = [[mean - float(a.min())], [float(a.max()) - mean]]
                ax.bar(x[i], mean, width, bottom=b, color=colors[0], yerr=err, capsize=3, **kw)
                tops.append(b + float(a.max()))
            elif whole is not None:  # kept for the tier as a whole only
                b = base_whole if base_per is None and base_whole is not None else 0.0
                ax.bar(x[i], whole, width, bottom=b, **{**kw, **whole_style})
                tops.append(b + whole)
                whole_used = whole_used or whole > 0
            else:
                ax.annotate("n/a", (x[i], 0), textcoords="offset points", xytext=(0, 3),
                            ha="center", fontsize=8, color=grey)  # fmt: skip
        return tops

    def finish(ax: Any, tops: list[float], unit: str | None, label: str, what: str) -> None:
        ax.set_xticks(x, names)
        ax.set_xlim(-0.6, len(names) - 0.4)
        ax.set_xlabel("tier (in lookup order)")
        ax.set_title(what, fontsize=10)
        unit_axis(ax, "y", unit, tops or [0.0], label=label, log=False)
        top = max([*tops, 0.0])
        ax.set_ylim(0, top * 1.2 if top > 0 else 1.0)
        ax.grid(alpha=0.3, axis="y")

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), layout="constrained")
    look, evicted, into, out_of = axes.flat
    tops = bars(look, "hits")
    tops += bars(look, "misses", "hits", alpha=0.4, hatch="///", edgecolor="white")
    finish(look, tops, None, "blocks looked up", "lookups: hits (solid), misses (hatched)")
    for i, name in enumerate(names):
        h, m = (tiers[name]["total"].get(k) for k in ("hits", "misses"))
        if h is not None and m is not None and h + m > 0:
            r = h / (h + m)
            shown = "<1%" if 0 < r < 0.005 else ">99%" if 0.995 <= r < 1 else f"{r:.0%}"
            look.annotate(f"{shown} hits", (x[i], max(tops) * 1.03),
                          ha="center", va="bottom", fontsize=8)  # fmt: skip
    finish(evicted, bars(evicted, "evictions"), None, "blocks evicted", "evictions")
    finish(into, bars(into, "write_bytes"), "size", "bytes stored into the tier",
           "bytes in (write_bytes)")  # fmt: skip
    finish(out_of, bars(out_of, "read_bytes"), "size", "bytes read out of the tier",
           "bytes out (read_bytes)")  # fmt: skip
    idle = [i for i in range(n_eng) if i not in drawn] if each else []
    if each:  # a legend entry only for what is drawn; engines with every counter 0 named
        handles = [Patch(color=colors[i], label=f"engine {i}") for i in sorted(drawn)]
    elif n_eng:
        handles = [Patch(color=colors[0], label=f"mean of {n_eng} engines (whisker: min to max)")]
    else:
        handles = []
    if whole_used:
        handles.append(Patch(**whole_style, label="the tier as a whole"))
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 9),
                   fontsize=8, frameon=False)  # fmt: skip
    if idle:
        shown = ", ".join(map(str, idle[:8])) + (", ..." if len(idle) > 8 else "")
        title = f"{title} (engine{'s' if len(idle) > 1 else ''} {shown}: every counter 0)"
    fig.suptitle(wrap(title, 90))
    return style.save(fig, path, in_folder)
