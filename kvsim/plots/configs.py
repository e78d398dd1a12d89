"""TTFT per configuration of a sweep with no load axis (policies, layouts): the mean over
seeds as bars, each configuration's paired difference from the reference below them;
upright bars for a few configurations, a row each for many."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from kvsim.plots import style
from kvsim.plots.bands import MIN_BAND_SEEDS, fewest_seeds, seeds_text, slo_line, slo_text, spread
from kvsim.plots.labels import value_text
from kvsim.plots.style import bar_width, fit_bar_labels, seconds_axis, suptitle, unit_axis, wrap
from kvsim.results.uncertainty import mean_interval

MAX_UPRIGHT_BARS = 12  # more configurations than this: one row each (horizontal bars)


def config_bars(
    df: Any, columns: list[str], path: Path, title: str, slo: Any, qs: Sequence[str]
) -> Path:
    """TTFT percentiles ``qs`` per configuration of a sweep with no load axis: the mean
    over seeds (top row), and below it each configuration's paired difference from the
    reference with its 95% interval over seeds (the table's paired differences, from 3
    seeds on: an unpaired interval of each mean would hide a difference every seed
    agrees on); each bar labelled with its fields' values, a line each. A table without
    paired differences (one configuration) gets the means with their own intervals."""
    groups = list(df.groupby(columns, sort=False))
    if len(groups) > MAX_UPRIGHT_BARS:
        return _config_rows(df, groups, columns, path, title, slo, qs)
    labels = [
        "\n".join(value_text(c, v) for c, v in zip(columns, _key(k), strict=True))
        for k, _ in groups
    ]
    paired = {q: _paired(groups, q) for q in qs}
    two = all(p is not None for p in paired.values())
    per_bar = bar_width(labels)
    width = min(20, max(4.5 * len(qs), (per_bar * len(groups) + 1) * len(qs)))
    fig, grid = plt.subplots(2 if two else 1, len(qs), figsize=(width, 8.0 if two else 4.4),
                             squeeze=False)  # fmt: skip
    axes = list(grid[0])
    for ax, q in zip(axes, qs, strict=True):
        stats = [spread(g[f"ttft_{q}_s"]) for _, g in groups]
        means = [s[0] for s in stats]
        if two:  # the means alone: their intervals are the paired row's
            ax.bar(range(len(groups)), means, color="#4c78a8")
            seconds_axis(ax, means, f"TTFT {q} (mean)")
        else:
            err = [[m - lo for m, (_, lo, _) in zip(means, stats, strict=True)]]
            err.append([hi - m for m, (_, _, hi) in zip(means, stats, strict=True)])
            ax.bar(range(len(groups)), means, yerr=err, capsize=4, color="#4c78a8")
            seconds_axis(ax, [v for st in stats for v in st], f"TTFT {q}")
        ax.grid(alpha=0.3, axis="y")
    if two:
        for ax, q in zip(grid[1], qs, strict=True):
            _delta_bars(ax, paired[q], q)  # type: ignore[arg-type]
            ax.grid(alpha=0.3, axis="y")
    slo_line(axes, slo, qs)
    if slo is not None:
        for ax in axes:
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
    n = fewest_seeds(df, columns)
    if two:
        seeds = (
            f"mean of {n} seeds; below: paired difference from the reference, 95% interval "
            "over seeds"
            if n >= MIN_BAND_SEEDS
            else seeds_text(n).replace("band", "interval")
        )
    else:
        seeds = seeds_text(n).replace("band", "interval")
    bottom = list(grid[-1])
    for ax in bottom:
        ax.set_xlabel(_fields_label(columns))
    suptitle(fig, title or f"TTFT per configuration of {', '.join(columns)} ({seeds})")
    for ax in grid.flat:
        if ax in bottom:
            fit_bar_labels(fig, ax, labels)
        else:
            ax.set_xticks(range(len(labels)), [""] * len(labels))
    return style.save(fig, path, in_folder=True)


def _config_rows(
    df: Any,
    groups: list[Any],
    columns: list[str],
    path: Path,
    title: str,
    slo: Any,
    qs: Sequence[str],
) -> Path:
    """:func:`config_bars` for many configurations (a grid of several fields): one row
    per configuration, labelled on one line by its values in the fields' order (the
    fields are named once, in the axis label), the panels sharing the rows; each
    percentile's means, then (where the table has them) its paired differences from the
    reference with their 95% intervals."""
    labels = [
        " | ".join(
            value_text(c, v).split(" = ", 1)[-1] for c, v in zip(columns, _key(k), strict=True)
        )
        for k, _ in groups
    ]
    paired = {q: _paired(groups, q) for q in qs}
    two = all(p is not None for p in paired.values())
    panels = [(q, kind) for q in qs for kind in (("mean", "delta") if two else ("mean",))]
    longest = max(len(s) for s in labels)
    height = 1.6 + 0.24 * len(groups)
    width = min(26.0 if two else 22.0, 2.0 + 0.065 * longest + 3.6 * len(panels))
    fig, axes = plt.subplots(1, len(panels), figsize=(width, height), sharey=True)
    rows = np.arange(len(groups))
    for ax, (q, kind) in zip(axes, panels, strict=True):
        if kind == "delta":
            _delta_bars(ax, paired[q], q, horizontal=True)  # type: ignore[arg-type]
            ax.grid(alpha=0.3, axis="x")
            continue
        stats = [spread(g[f"ttft_{q}_s"]) for _, g in groups]
        means = np.array([s[0] for s in stats])
        if two:
            ax.barh(rows, means, color="#4c78a8", height=0.7)
            unit_axis(ax, "x", "duration", means, label=f"TTFT {q} (mean)", log=False)
        else:
            err = np.array(
                [
                    [m - lo for m, (_, lo, _) in zip(means, stats, strict=True)],
                    [hi - m for m, (_, _, hi) in zip(means, stats, strict=True)],
                ]
            )
            ax.barh(rows, means, xerr=err, capsize=2, color="#4c78a8", height=0.7)
            unit_axis(
                ax, "x", "duration", [v for st in stats for v in st], label=f"TTFT {q}", log=False
            )
        ax.grid(alpha=0.3, axis="x")
        if slo is not None and slo.metric == f"ttft_{q}_s":  # the axis is in seconds
            shown = slo_text(slo)
            ax.axvline(slo.threshold, color="red", ls="--", lw=1, label=shown)
            ax.legend(fontsize=7, loc="lower right")
    axes[0].set_yticks(rows, labels, fontsize=7)
    axes[0].invert_yaxis()  # the sweep's first configuration on top
    axes[0].set_ylabel(wrap(" | ".join(columns), 60), fontsize=8)
    seeds = seeds_text(fewest_seeds(df, columns)).replace("band", "interval")
    if two:
        seeds = seeds.split(",")[0].split(";")[0] + "; paired differences from the reference"
    suptitle(fig, title or f"TTFT per configuration ({len(groups)} configurations, {seeds})")
    return style.save(fig, path, in_folder=True)


def _paired(groups: list[Any], q: str) -> list[tuple[float, float, float] | None] | None:
    """Per configuration, its paired difference in TTFT ``q`` from the reference (the
    table's per-run ``delta_ttft_<q>_s``: this run minus the reference's on the same seed):
    the mean over seeds and its 95% interval (:func:`~kvsim.results.uncertainty.
    mean_interval` of the differences, as the sweep's table gives it); None for the
    reference (the configuration without differences). None for the whole table when it
    has no differences (one configuration)."""
    column = f"delta_ttft_{q}_s"
    if not groups or column not in groups[0][1].columns:
        return None
    out: list[tuple[float, float, float] | None] = []
    for _, g in groups:
        d = [float(x) for x in g[column] if np.isfinite(float(x))]
        if not d:
            out.append(None)
            continue
        iv = mean_interval(d, nonnegative=False)
        if len(d) < MIN_BAND_SEEDS or not iv.bounded:
            out.append((iv.mean, iv.mean, iv.mean))
        else:
            out.append((iv.mean, iv.lo, iv.hi))
    return out if sum(x is None for x in out) == 1 else None


def _delta_bars(ax: Any, deltas: list[Any], q: str, horizontal: bool = False) -> None:
    """The paired differences from the reference as bars with their 95% intervals; the
    reference a marker at 0, named; the axis in one unit of seconds."""
    at = np.arange(len(deltas))
    mean = np.array([d[0] if d is not None else 0.0 for d in deltas])
    err = np.array(
        [
            [d[0] - d[1] if d is not None else 0.0 for d in deltas],
            [d[2] - d[0] if d is not None else 0.0 for d in deltas],
        ]
    )
    colors = ["#e45756" if m > 0 else "#54a24b" for m in mean]
    draw = ax.barh if horizontal else ax.bar
    kw = {"xerr": err} if horizontal else {"yerr": err}
    draw(at, mean, color=colors, capsize=3, **kw)
    ref = [i for i, d in enumerate(deltas) if d is None]
    for i in ref:
        xy = (0.0, i) if horizontal else (i, 0.0)
        ax.plot(*xy, "kD", ms=5)
        ax.annotate("reference", xy, textcoords="offset points", fontsize=7,
                    xytext=(4, 0) if horizontal else (0, 5), ha="left" if horizontal else "center",
                    va="center" if horizontal else "bottom")  # fmt: skip
    (ax.axvline if horizontal else ax.axhline)(0.0, color="black", lw=0.8)
    values = [v for d in deltas if d is not None for v in d] + [0.0]
    unit_axis(ax, "x" if horizontal else "y", "duration", values,
              label=f"TTFT {q} minus the reference's", log=False)  # fmt: skip


def _key(k: Any) -> tuple[Any, ...]:
    """A groupby key as a tuple (pandas gives a scalar for one column)."""
    return k if isinstance(k, tuple) else (k,)


def _fields_label(fields: Sequence[str]) -> str:
    """The x label of bars labelled by their values, a line per field: the fields in
    full, in the lines' order."""
    if len(fields) == 1:
        return fields[0]
    return "; ".join(f"line {i}: {f}" for i, f in enumerate(fields, 1))
