"""Capacity figures: requests/s meeting the SLO per configuration (capacity.csv), and
``kvsim capacity --cheapest``'s layouts against the SLO beside their price per hour."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter

from kvsim.plots import style
from kvsim.plots.bands import MIN_BAND_SEEDS
from kvsim.plots.labels import config_text, value_text
from kvsim.plots.style import (
    bar_width,
    fit_bar_labels,
    metric_unit,
    suptitle,
    tick_text,
    unit_axis,
    wrap,
)
from kvsim.results.readers import capacity_bounds


def capacity_plot(
    cdf: Any, path: str | os.PathLike[str], title: str = "", in_folder: bool = False
) -> Path:
    """Capacity (requests/s meeting the SLO) per configuration, with its 95% interval
    (``capacity_rps_lo`` .. ``_hi``, :func:`kvsim.results.readers.read_capacity`) from 3
    replications on; each bar labelled with its fields, a line each, every value beside
    its field's name ("tiers.nvme.enabled = false": a bare "False" says nothing)."""
    cdf = capacity_bounds(cdf)
    labels = _capacity_labels(cdf)
    fig, ax = plt.subplots(figsize=(min(16, max(5.0, bar_width(labels) * len(cdf) + 1)), 4.4))
    reps = cdf["replications"].to_numpy(float) if "replications" in cdf else None
    cap = cdf["capacity_rps"].to_numpy(float)
    below = np.nan_to_num(cap - cdf["capacity_rps_lo"].to_numpy(float), nan=0.0)
    above = np.nan_to_num(cdf["capacity_rps_hi"].to_numpy(float) - cap, nan=0.0)
    if reps is not None:  # no interval under 3 replications
        below, above = (np.where(reps >= MIN_BAND_SEEDS, e, 0.0) for e in (below, above))
    ax.bar(range(len(cdf)), cap, yerr=[np.maximum(below, 0.0), np.maximum(above, 0.0)], capsize=4)
    ax.set_ylabel("capacity (requests/s meeting the SLO)")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: tick_text(v)))
    few = reps is not None and bool((reps < MIN_BAND_SEEDS).any())
    note = "; no interval under 3 replications" if few else "; 95% interval"
    text = title or f"capacity per configuration ({cdf['slo'].iloc[0]}{note})"
    ax.set_title(wrap(text, int(fig.get_figwidth() * 11)), fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    fit_bar_labels(fig, ax, labels)
    return style.save(fig, path, in_folder)


def _capacity_labels(cdf: Any) -> list[str]:
    """capacity.csv's configurations as bar labels, a line per swept field, each
    "field = value" (:func:`~kvsim.plots.labels.value_text`: booleans as YAML writes
    them, sizes in a unit): from the table's per-field columns where it has them (kvsim
    writes the swept values beside ``configuration``), else parsed from the
    ``configuration`` text."""
    fields, values = _split_configurations([str(c) for c in cdf["configuration"]])
    if not fields:
        return values
    out = []
    for (_, row), text in zip(cdf.iterrows(), values, strict=True):
        parts = text.split("\n")
        lines = []
        for f, shown in zip(fields, parts, strict=True):
            v = row[f] if f in cdf.columns and not _missing_cell(row[f]) else shown
            if isinstance(v, str) and v in ("True", "False"):  # (str() of a Python bool)
                v = v == "True"
            lines.append(f"{f} = {value_text(f, v)}")
        out.append("\n".join(lines))
    return out


def _missing_cell(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _split_configurations(configs: Sequence[str]) -> tuple[list[str], list[str]]:
    """capacity.csv's configuration labels ("tiers.host.capacity=600 GB, ...") as the
    fields they set (the same for every row, else []) and each row's values, a line per
    field; a label that is not such a list is kept whole."""
    parsed = []
    for c in configs:
        parts = [p.partition("=") for p in c.split(", ")]
        if not all(sep for _, sep, _ in parts):
            return [], [wrap(c, 24) for c in configs]
        parsed.append(([k.strip() for k, _, _ in parts], [v.strip() for _, _, v in parts]))
    fields = parsed[0][0] if parsed else []
    if any(f != fields for f, _ in parsed):
        return [], ["\n".join(f"{k} = {v}" for k, v in zip(f, v, strict=True)) for f, v in parsed]
    return fields, ["\n".join(v) for _, v in parsed]


def cheapest_plot(
    rows: Sequence[Mapping[str, Any]],
    configs: Sequence[Mapping[str, Any]],
    slo: Any,
    path: str | os.PathLike[str],
) -> Path:
    """``kvsim capacity --sweep ... --cheapest --out``: one row per layout, its SLO metric
    (the mean over replications, its 95% interval from ``<metric>_lo`` .. ``_hi``) against
    the threshold, coloured by whether it meets it, and beside it the layout's price per
    hour, the cheapest that meets the SLO marked."""
    metric = slo.metric
    labels = [config_text(list(c), list(c.values())) or "the scenario" for c in configs]
    labels = [wrap(t, 44) for t in labels]
    height = 1.8 + 0.5 * sum(t.count("\n") + 1 for t in labels) ** 0.9
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, max(3.2, height)), sharey=True)
    at = np.arange(len(rows))
    mean = np.array([_number_or_nan(r[metric]) for r in rows], dtype=float)
    lo = np.array([_number_or_nan(r.get(f"{metric}_lo")) for r in rows])
    hi = np.array([_number_or_nan(r.get(f"{metric}_hi")) for r in rows])
    err = np.nan_to_num(np.array([mean - lo, hi - mean]), nan=0.0).clip(min=0.0)
    colors = ["#4c78a8" if r["meets"] else "#bab0ac" for r in rows]
    left.barh(at, mean, xerr=err, capsize=3, color=colors, height=0.6)
    unit = metric_unit(metric)
    shown = [*mean, *lo, *hi, float(slo.threshold)]
    scale, name = unit_axis(left, "x", unit, [v for v in shown if np.isfinite(v)],
                            label=f"{metric.removesuffix('_s')} (mean, 95% interval)",
                            log=False)  # fmt: skip
    line = f"SLO {slo.op} {tick_text(slo.threshold / scale)} {name}".strip()
    left.axvline(float(slo.threshold), color="red", ls="--", lw=1, label=line)
    left.legend(fontsize=7, loc="lower right")
    usd = np.array([_number_or_nan(r["usd_per_hour"]) for r in rows], dtype=float)
    right.barh(at, usd, color=colors, height=0.6)
    unit_axis(right, "x", "usd_per_hour", usd, label="price", log=False)
    for i, r in enumerate(rows):
        if r.get("cheapest"):
            right.annotate("cheapest", (usd[i], i), textcoords="offset points", xytext=(4, 0),
                           va="center", fontsize=8, fontweight="bold")  # fmt: skip
    right.set_xlim(0, float(np.nanmax(usd)) * 1.25 if np.isfinite(usd).any() else 1.0)
    left.set_yticks(at, labels, fontsize=7)
    left.invert_yaxis()  # the sweep's first layout on top
    for ax in (left, right):
        ax.grid(alpha=0.3, axis="x")
    suptitle(fig, f"layouts at their own load against {slo} (grey: fails it)")
    return style.save(fig, path)


def _number_or_nan(v: Any) -> float:
    try:
        return float(v) if v is not None else math.nan
    except (TypeError, ValueError):
        return math.nan
