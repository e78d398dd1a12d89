"""Figures (matplotlib, headless): labelled with units and the scenario name, saved as PNG
or SVG by the file's extension; a module per family of figures, what they share in
:mod:`kvsim.plots.style`. The output folders they draw are read by
:mod:`kvsim.results.readers`. Plotting is an edge: nothing in the core imports it."""

from kvsim.plots.capacity import capacity_plot, cheapest_plot
from kvsim.plots.costmodel import costmodel_label, costmodel_plot
from kvsim.plots.latency import ttft_breakdown_plot, ttft_cdf_plot
from kvsim.plots.mrc import mrc_plot, reuse_plot
from kvsim.plots.run import RUN_FIGURES, run_plots
from kvsim.plots.sweep import sweep_plots
from kvsim.plots.tiers import tiers_plot, token_sources_plot
from kvsim.plots.timeline import engine_timeline_plot, timeseries_plot

__all__ = [
    "RUN_FIGURES",
    "capacity_plot",
    "cheapest_plot",
    "costmodel_label",
    "costmodel_plot",
    "engine_timeline_plot",
    "mrc_plot",
    "reuse_plot",
    "run_plots",
    "sweep_plots",
    "tiers_plot",
    "timeseries_plot",
    "token_sources_plot",
    "ttft_breakdown_plot",
    "ttft_cdf_plot",
]
