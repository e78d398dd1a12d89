"""The figures of a sweep's --out folder (``kvsim plot SWEEP``): TTFT percentiles against
load, a curve per configuration with its band over seeds (several folders overlaid), or
bars per configuration when nothing swept is a load; and the capacity figure."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from kvsim.errors import InputError
from kvsim.plots import style
from kvsim.plots.bands import MIN_BAND_SEEDS, fewest_seeds, seeds_text, slo_line, spread
from kvsim.plots.capacity import capacity_plot
from kvsim.plots.configs import config_bars
from kvsim.plots.goodput import goodput_curves, has_goodput
from kvsim.plots.labels import config_text, field_is_whole, field_unit_of
from kvsim.plots.style import LOG_SPAN, check_figure_paths, seconds_axis, suptitle, unit_axis, wrap
from kvsim.results.readers import as_number, load_axis, read_capacity, read_sweep_folder


def sweep_plots(
    out_dir: str | os.PathLike[str],
    fmt: str = "png",
    x: str | None = None,
    title: str = "",
    slo: Any = None,
    overlay: Sequence[str | os.PathLike[str]] = (),
) -> list[Path]:
    """TTFT p50/p95/p99 against load, one curve per configuration (mean over seeds, with
    a 95% band over them), or, when nothing swept is a load, p50/p95/p99 bars per
    configuration with each one's paired difference from the reference below them (p50
    and p99 only for an older kvsim's table without p95); the SLO's
    threshold as a line; and, when the folder has a capacity.csv, the capacity of each
    configuration; a sweep judged against an SLO (a ``goodput_rps`` column) with a load axis
    also gets ``goodput_vs_load`` (:mod:`kvsim.plots.goodput`). ``overlay``: more sweep folders
    whose curves join this folder's on one figure (``overlay_ttft_vs_load``).

    Every table is read and checked, and every option matched to a figure that uses it,
    before anything is drawn: ``x``, ``slo`` and ``overlay`` act on the TTFT figure, so
    they are refused (InputError naming the option) where the folder gets none."""
    d = Path(out_dir)
    results = d / "results.parquet"
    cap = d / "capacity.csv"
    cdf = read_capacity(cap) if cap.exists() or cap.is_symlink() else None
    tables = []
    if results.exists() or results.is_symlink():
        tables.append((d, *read_sweep_folder(d, x)))
        for other in overlay:
            o = Path(other)
            if not (o / "results.parquet").exists():
                raise InputError("not a sweep folder (no results.parquet)", where=str(o))
            tables.append((o, *read_sweep_folder(o, x)))
        if tables[0][1].empty and cdf is None:
            raise InputError("no successful run to plot (every run failed)", where=str(results))
    draws: list[tuple[Path, Callable[[Path], Path]]] = []
    if tables and not tables[0][1].empty:
        df, columns, axis = tables[0][1], tables[0][2], tables[0][3]
        qs = percentiles([t[1] for t in tables] if axis is not None else [df])
        if slo is not None and slo.metric not in {f"ttft_{q}_s" for q in qs}:
            raise InputError(
                f"the sweep table has no {slo.metric} to draw the SLO on (an older kvsim's?)",
                where="--slo",
            )
        if axis is not None:
            for folder, t_df, _, t_axis in tables:
                if t_axis is None or t_df.empty:
                    raise InputError("no load axis to overlay (use --x)", where=str(folder))
            name = "overlay_ttft_vs_load" if overlay else "ttft_vs_load"
            draws.append(
                (
                    d / f"{name}.{fmt}",
                    lambda p: _load_curves(tables, p, title, slo, bool(overlay), qs),
                )
            )
            if has_goodput(df) and not overlay:  # judged against an SLO (sweep --slo)
                draws.append(
                    (
                        d / f"goodput_vs_load.{fmt}",
                        lambda p: goodput_curves(df, columns, axis, p, title, slo),
                    )
                )
        elif columns:  # a categorical sweep (policies, layouts): bars per configuration
            if overlay:
                raise InputError("overlays need a load axis (use --x)", where=str(d))
            draws.append(
                (
                    d / f"ttft_by_config.{fmt}",
                    lambda p: config_bars(df, columns, p, title, slo, qs),
                )
            )
    if not draws:  # no TTFT figure: the options that act on it would be ignored
        why = (
            "every run failed"
            if tables and tables[0][1].empty
            else "nothing swept"
            if tables
            else "no results.parquet"
        )
        if slo is not None:
            raise InputError(f"{d} gets no TTFT figure ({why}) to draw the SLO on", where="--slo")
        if x:
            raise InputError(f"{d} gets no TTFT figure ({why}) to use it as an axis", where="--x")
        if overlay:
            raise InputError(
                f"gets no TTFT figure ({why}) to overlay {overlay[0]} on", where=str(d)
            )
    if cdf is not None:
        draws.append((d / f"capacity.{fmt}", lambda p: capacity_plot(cdf, p, title, True)))
    check_figure_paths([p for p, _ in draws])
    return [draw(p) for p, draw in draws]


def percentiles(tables: Sequence[Any]) -> tuple[str, ...]:
    """The TTFT percentiles the sweep figures draw, a panel each: p50, p95 and p99, or
    p50 and p99 when a table has no p95 (an older kvsim's)."""
    has95 = all(
        "ttft_p95_s" in t.columns and np.isfinite(t["ttft_p95_s"].to_numpy(float)).any()
        for t in tables
    )
    return ("p50", "p95", "p99") if has95 else ("p50", "p99")


def _load_curves(
    tables: list[Any], path: Path, title: str, slo: Any, overlay: bool, qs: Sequence[str]
) -> Path:
    """The TTFT-percentiles figure of one sweep table (or several, overlaid) against its
    axis (a load, or the field given with --x), a panel per percentile of ``qs``; the
    axis in its field's unit, logarithmic where its values span more than 10x."""
    df, axis = tables[0][1], tables[0][3]
    fig, axes = plt.subplots(1, len(qs), figsize=(5 * len(qs), 4.4), sharex=True)
    for folder, t_df, t_cols, t_axis in tables:
        _draw_curves(axes, t_df, t_cols, t_axis, f"{folder.name}: " if overlay else "", qs)
    inverse = axis.endswith("time_scale")
    xs = [v for _, t_df, _, t_axis in tables for v in t_df[t_axis].map(as_number)]
    if inverse:
        xs = [1 / v for v in xs]
    load = load_axis([axis]) is not None
    slo_line(axes, slo, qs)
    for ax, q in zip(axes, qs, strict=True):
        if inverse:
            unit_axis(ax, "x", None, xs, label=f"load (x the trace's rate = 1 / {axis})")
        else:
            unit_axis(ax, "x", field_unit_of(axis), xs, label=axis)
            if field_is_whole(axis) and ax.get_xscale() == "linear":  # a count: 1, 2, 3
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        values = pd_values(df, f"ttft_{q}_s")
        seconds_axis(ax, values, f"TTFT {q}")
        if len(values) and values.min() > 0 and values.max() / values.min() > LOG_SPAN:
            unit_axis(ax, "y", "duration", values, label=f"TTFT {q}", log=True)
        elif ax.get_ylim()[0] < 0:  # a TTFT is never below 0: nor is its axis
            ax.set_ylim(bottom=0.0)
        ax.grid(alpha=0.3, which="both")
    if axes[-1].get_legend_handles_labels()[0]:  # nothing drawn when no run has a value
        axes[-1].legend(fontsize=7)
    against = f"load ({axis})" if load else axis
    seeds = seeds_text(min(fewest_seeds(t[1], t[2]) for t in tables))
    suptitle(fig, title or f"TTFT against {against} ({seeds})")
    return style.save(fig, path, in_folder=True)


def _draw_curves(
    axes: Sequence[Any], df: Any, columns: list[str], x: str, prefix: str, qs: Sequence[str]
) -> None:
    """TTFT percentiles ``qs`` against the axis ``x``, one curve per configuration of the
    other swept fields (named in full in the legend: "tiers.nvme.enabled = false"): the
    mean over seeds, and a band for its 95% interval from 3 seeds on."""
    others = [c for c in columns if c != x]
    xs = df[x].map(as_number)
    inverse = x.endswith("time_scale")  # a smaller time scale is more load
    df = df.assign(_x=1 / xs if inverse else xs)
    groups = df.groupby(others, sort=False) if others else [((), df)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        label = prefix + (config_text(others, key) or "all")
        band = g.groupby("_x")["seed"].nunique().min() >= MIN_BAND_SEEDS
        for ax, q in zip(axes, qs, strict=True):
            pts = sorted((xv, *spread(h[f"ttft_{q}_s"])) for xv, h in g.groupby("_x", sort=False))
            xv = [p[0] for p in pts]
            (line,) = ax.plot(xv, [p[1] for p in pts], "o-", label=wrap(label, 48), ms=3)
            if band:  # (a TTFT's interval never below 0: mean_interval clips it)
                low = np.maximum([p[2] for p in pts], 0.0)
                ax.fill_between(xv, low, [p[3] for p in pts], color=line.get_color(), alpha=0.15)


def pd_values(df: Any, column: str) -> Any:
    """A column's finite values."""
    v = df[column]
    return v[np.isfinite(v.to_numpy(float))]
