"""Every figure of one run's --out folder (``kvsim plot RUN``), drawn from the folder as
:func:`kvsim.results.readers.read_run_folder` reads it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kvsim.plots.latency import ttft_breakdown_plot, ttft_cdf_plot
from kvsim.plots.style import check_figure_paths
from kvsim.plots.tiers import tiers_plot, token_sources_plot
from kvsim.plots.timeline import engine_timeline_plot, timeseries_plot
from kvsim.results.readers import read_run_folder
from kvsim.units import fmt_duration

RUN_FIGURES = (
    "ttft_cdf", "ttft_breakdown", "token_sources", "engine_timeline", "timeseries", "tiers",
)  # fmt: skip


def run_plots(out_dir: str | os.PathLike[str], fmt: str = "png") -> list[Path]:
    """Every figure of one run from its --out folder (summary.json + requests table)."""
    d = Path(out_dir)
    run = read_run_folder(d)
    summary, df, m, series, tiers = run.summary, run.requests, run.measured, run.series, run.tiers
    name = summary["scenario"]
    engines = int(summary.get("engines", 1))
    cdf, breakdown, sources, timeline, over_time, per_tier = (d / f"{n}.{fmt}" for n in RUN_FIGURES)
    check_figure_paths([cdf, breakdown, sources, timeline, over_time, per_tier])
    drawn = [
        ttft_cdf_plot({name: m["ttft_s"]}, cdf, f"{name}: TTFT CDF", in_folder=True),
        ttft_breakdown_plot(m, breakdown, f"{name}: where the time goes", in_folder=True),
        token_sources_plot(
            summary["token_source_frac"],
            sources,
            f"{name}: prompt tokens by source",
            in_folder=True,
            enabled=set(tiers) or None,  # (disabled tiers: no bar)
        ),
        engine_timeline_plot(
            df,
            engines,
            timeline,
            f"{name}: requests in prefill and waiting over time ({engines} engines)",
            in_folder=True,
        ),
        timeseries_plot(series, over_time, _timeseries_title(name, series), in_folder=True),
    ]
    if tiers:
        title = f"{name}: per tier and engine over the whole run (warm-up included)"
        drawn.append(tiers_plot(tiers, per_tier, title, in_folder=True))
    return drawn


def _timeseries_title(name: str, series: Any) -> str:
    w = series["window_end_s"] - series["window_start_s"]
    width = f"{fmt_duration(float(w.iloc[0]))} windows" if len(w) else "windows"
    return f"{name}: TTFT, hits and GPU time over the run ({width} of arrivals)"
