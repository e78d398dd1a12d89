"""Intervals over seeds on the sweep figures: a value's mean and 95% band (none under
:data:`MIN_BAND_SEEDS` seeds), the seeds behind a configuration and how a figure says so,
and the SLO's threshold line."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kvsim.results.uncertainty import mean_interval
from kvsim.units import fmt_duration

MIN_BAND_SEEDS = 3  # a band (an interval over seeds) is drawn from this many seeds on


def spread(values: Any) -> tuple[float, float, float]:
    """Mean and 95% interval (Student t over seeds, never below 0: a TTFT); the mean
    three times under :data:`MIN_BAND_SEEDS` seeds, which draws no band (two seeds give
    an interval too wide to read: t = 12.7)."""
    v = [float(x) for x in values if np.isfinite(float(x))]
    if not v:
        return math.nan, math.nan, math.nan
    iv = mean_interval(v)
    if len(v) < MIN_BAND_SEEDS or not math.isfinite(iv.lo):  # too few seeds: no band
        return iv.mean, iv.mean, iv.mean
    return iv.mean, iv.lo, iv.hi


def fewest_seeds(df: Any, columns: Sequence[str]) -> int:
    """Seeds per configuration of a sweep table (the fewest any configuration has)."""
    if df.empty:
        return 0
    if not columns:
        return int(df["seed"].nunique())
    counts = df.groupby(list(columns), sort=False, dropna=False)["seed"].nunique()
    return int(counts.min()) if len(counts) and not math.isnan(counts.min()) else 0


def seeds_text(n: int) -> str:
    """What a curve or bar is, by the seeds behind it."""
    if n >= MIN_BAND_SEEDS:
        return f"mean of {n} seeds, 95% band over seeds"
    if n == 2:
        return "mean of 2 seeds; no band under 3 seeds"
    return "one seed"


def slo_text(slo: Any) -> str:
    """An SLO as its threshold line's legend entry names it: its metric, test and time."""
    return f"SLO {slo.metric} {slo.op} {fmt_duration(slo.threshold)}"


def slo_line(axes: Sequence[Any], slo: Any, qs: Sequence[str]) -> None:
    """The SLO's threshold as a dashed line on the axis of its metric (p50, p95 or p99)."""
    if slo is None:
        return
    for ax, q in zip(axes, qs, strict=True):
        if slo.metric == f"ttft_{q}_s":
            shown = slo_text(slo)
            ax.axhline(slo.threshold, color="red", ls="--", lw=1, label=shown)
            ax.legend(fontsize=7)  # (the curves' legend on the last axis holds it too)
