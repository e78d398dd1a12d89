"""Issue 28, point 6: figures ready for a slide. Each figure kvsim draws is read back
from its artists (axis labels, tick labels, titles, legend entries, bands): units on
every quantity axis, human tick labels (no 1e12), titles and legends that name the swept
field and its tier, bands only from 3 seeds on, a tornado without zero-swing rows, and
no text outside the figure."""

from __future__ import annotations

import math
import re
from itertools import pairwise
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection

from kvsim import plots
from kvsim.cli import main
from kvsim.experiments.planner import NumericField
from kvsim.experiments.sensitivity import Sensitivity, Swing, noise_row, tornado_figure
from kvsim.plots import style

from conftest import SCENARIOS

RAW = re.compile(r"\de[+-]?\d|\$|\\times|10\^")  # 1e12, 2e-05, mathtext 10^{12}


@pytest.fixture
def figures(monkeypatch) -> dict[str, object]:
    """Every figure kvsim.plots saves, by file name, kept open to be read (not written)."""
    drawn: dict[str, object] = {}

    def keep(fig, path, in_folder=False):
        drawn[Path(path).stem] = fig
        return Path(path)

    monkeypatch.setattr(style, "save", keep)
    yield drawn
    import matplotlib.pyplot as plt

    plt.close("all")


def texts(fig) -> dict[str, list[str]]:
    """The figure's words, drawn: labels, tick labels, titles and legend entries."""
    fig.canvas.draw()
    out: dict[str, list[str]] = {"xlabel": [], "ylabel": [], "ticks": [], "title": []}
    out["legend"] = []
    for ax in fig.axes:
        out["xlabel"].append(ax.get_xlabel())
        out["ylabel"].append(ax.get_ylabel())
        out["title"].append(ax.get_title())
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks():
                if lo <= tick.get_loc() <= hi and tick.label1.get_visible():
                    out["ticks"].append(tick.label1.get_text())
        if ax.get_legend():
            out["legend"] += [t.get_text() for t in ax.get_legend().get_texts()]
    if fig._suptitle is not None:
        out["title"].append(fig._suptitle.get_text())
    for legend in fig.legends:
        out["legend"] += [t.get_text() for t in legend.get_texts()]
    return out


def check_slide_ready(fig) -> dict[str, list[str]]:
    """What every figure must hold: no raw tick numbers, no text outside the figure."""
    words = texts(fig)
    raw = [t for t in words["ticks"] if RAW.search(t)]
    assert not raw, raw
    assert style.text_outside(fig) == []
    return words


def bands(fig) -> int:
    return sum(isinstance(c, PolyCollection) for ax in fig.axes for c in ax.collections)


def error_bars(ax) -> list[float]:
    """The lengths of the error bars of an axes' bars (0 for a bar without one)."""
    out = [0.0]
    for c in ax.containers:
        err = getattr(c, "errorbar", None)
        if err is not None:
            for col in err.lines[2]:
                out += [float(np.ptp(np.asarray(seg), axis=0).max()) for seg in col.get_segments()]
    return out


def sweep_table(folder: Path, field: str, values: list[str], seeds: int, other=None) -> Path:
    """A results table as kvsim sweep writes one (its swept columns between run_id and
    seed), TTFTs growing along the axis, and a second swept field ``other`` (name,
    values) when given."""
    rows = []
    others = [(other[0], v) for v in other[1]] if other else [(None, None)]
    for j, (oname, ov) in enumerate(others):
        for i, v in enumerate(values):
            for s in range(seeds):
                p50 = 0.05 * (i + 1) * (1 + 0.1 * s) * (1 + j)
                row = {"run_id": f"r{i}{j}{s}", field: v}
                if oname:
                    row[oname] = ov
                rows.append(
                    {**row, "seed": s, "status": "ok", "ttft_p50_s": p50,
                     "ttft_p95_s": 3 * p50, "ttft_p99_s": 6 * p50}
                )  # fmt: skip
    folder.mkdir()
    pd.DataFrame(rows).to_csv(folder / "results.csv", index=False)
    pd.DataFrame(rows).to_parquet(folder / "results.parquet")
    return folder


# ---- sweeps ------------------------------------------------------------------------------


def test_a_sweep_over_a_tier_size_names_it_in_gb_on_a_log_axis(tmp_path, figures, capsys):
    """A real (tiny) sweep over tiers.host.capacity x tiers.nvme.enabled, 3 seeds: x axis
    "tiers.host.capacity (GB, log scale)" (20 GB .. 600 GB is 30x), a title naming it
    (not "load"), legend entries naming the tier, a band per curve."""
    sweep = tmp_path / "host.yaml"
    sweep.write_text(
        f"base: {SCENARIOS / 'quickstart.yaml'}\n"
        "grid:\n  tiers.host.capacity: [20 GB, 120 GB, 600 GB]\n"
        "  tiers.nvme.enabled: [false, true]\n"
        "set: {workload.requests: 100, run.warmup: 0 s}\nreplications: 3\n"
    )
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1", "--quiet"]) == 0
    assert main(["plot", str(out), "--x", "tiers.host.capacity"]) == 0
    fig = figures["ttft_vs_load"]
    words = check_slide_ready(fig)
    assert set(words["xlabel"]) == {"tiers.host.capacity (GB, log scale)"}
    assert words["ylabel"][0] in ("TTFT p50 (ms)", "TTFT p50 (s)")
    assert {"20", "50", "100", "200", "500"} <= set(words["ticks"])
    title = words["title"][-1]
    assert "TTFT against tiers.host.capacity" in title and "load" not in title
    assert "mean of 3 seeds, 95% band" in title
    assert "tiers.nvme.enabled = false" in words["legend"]
    assert "tiers.nvme.enabled = true" in words["legend"]
    assert bands(fig) == 2 * 3  # a band per curve per panel
    # without --x: bars per configuration, their values labelled, the fields named
    assert main(["plot", str(out)]) == 0
    bars = check_slide_ready(figures["ttft_by_config"])
    assert "20 GB\nfalse" in bars["ticks"]
    assert "line 1: tiers.host.capacity; line 2: tiers.nvme.enabled" in bars["xlabel"]


def test_a_bandwidth_sweep_in_gb_per_s_and_two_seeds_draw_no_band(tmp_path, figures):
    d = sweep_table(tmp_path / "bw", "node.h2d_per_gpu", ["5 GB/s", "20 GB/s", "80 GB/s"], 2)
    assert plots.sweep_plots(d, x="node.h2d_per_gpu")
    fig = figures["ttft_vs_load"]
    words = check_slide_ready(fig)
    assert set(words["xlabel"]) == {"node.h2d_per_gpu (GB/s, log scale)"}
    assert bands(fig) == 0
    assert "mean of 2 seeds; no band under 3 seeds" in words["title"][-1]


def test_a_load_sweep_is_titled_against_load_on_a_linear_rate_axis(tmp_path, figures):
    """1/s .. 4/s spans 4x: a linear axis; the legend names the other field in full."""
    d = sweep_table(
        tmp_path / "load", "workload.arrivals.rate", ["1/s", "2/s", "4/s"], 3,
        other=("remote.enabled", [False, True]),
    )  # fmt: skip
    assert plots.sweep_plots(d)
    fig = figures["ttft_vs_load"]
    words = check_slide_ready(fig)
    assert set(words["xlabel"]) == {"workload.arrivals.rate (per s)"}
    assert "TTFT against load (workload.arrivals.rate)" in words["title"][-1]
    assert {"remote.enabled = false", "remote.enabled = true"} <= set(words["legend"])
    assert bands(fig) == 2 * 3


def test_one_seed_bars_have_no_error_bars(tmp_path, figures):
    d = sweep_table(tmp_path / "one", "cluster.load_policy", ["sync", "async"], 1)
    assert plots.sweep_plots(d)
    fig = figures["ttft_by_config"]
    words = check_slide_ready(fig)
    assert "one seed" in words["title"][-1]
    assert all(max(error_bars(ax)) == 0 for ax in fig.axes)  # no error bars drawn
    assert set(words["xlabel"]) == {"cluster.load_policy"}


# ---- capacity ----------------------------------------------------------------------------


@pytest.mark.parametrize("reps", [2, 5])
def test_capacity_bar_labels_fit_and_intervals_need_3_replications(tmp_path, figures, reps):
    """Six configurations of three long field names: every label inside the figure and
    none overlapping the next (the issue: they overflowed)."""
    fields = ("tiers.host.capacity", "tiers.nvme.enabled", "remote.enabled")
    configs = [
        (f"{h} GB", n, r) for h in (120, 600) for n, r in (("false", "false"), ("true", "true"))
    ] + [("2000 GB", "true", "false"), ("40 GB", "false", "true")]
    cdf = pd.DataFrame(
        {
            "configuration": [
                ", ".join(f"{f}={v}" for f, v in zip(fields, c, strict=True)) for c in configs
            ],
            "slo": "ttft_p99_s <= 1",
            "capacity_rps": np.linspace(2.0, 7.0, len(configs)),
            "ci95_rps": 0.4,
            "replications": reps,
        }
    )
    plots.capacity_plot(cdf, tmp_path / "capacity.png")
    fig = figures["capacity"]
    words = check_slide_ready(fig)
    (ax,) = fig.axes
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels()]
    assert all(a.x1 <= b.x0 + 1 for a, b in pairwise(boxes))  # none overlaps the next
    # each value beside its field (a bare "false" says nothing), booleans as YAML writes them
    assert words["ticks"][0] == (
        "tiers.host.capacity = 120 GB\ntiers.nvme.enabled = false\nremote.enabled = false"
    )
    assert "requests/s" in words["ylabel"][0]
    title = " ".join(words["title"]).replace("\n", " ")
    assert ("no interval under 3 replications" in title) == (reps < 3)
    assert (max(error_bars(ax)) > 0) == (reps >= 3)


# ---- the tornado -------------------------------------------------------------------------


def sensitivity_result(seeds: int) -> Sensitivity:
    """Four fields on ``seeds`` seeds: a large compute effect, a small path-noise one, a
    one-sided one and one whose swing is exactly 0 (it changed the run, not the metric)."""
    base = [0.50 + 0.04 * s for s in range(seeds)]

    def sw(path, unit, value, low, high, refused=None):
        f = NumericField(path, value, False, unit)
        mean = lambda v: sum(v) / len(v) if v else math.nan  # noqa: E731
        return Swing(path, "M", value, value * 0.75, value * 1.25, mean(low), mean(high), f,
                     mean(base), refused or {}, "", low, high, base)  # fmt: skip

    swings = [
        sw("timing.roofline.achievable_flops", None, 7.2e15,
           [b + 0.15 + 0.01 * i for i, b in enumerate(base)], [b - 0.1 for b in base]),
        sw("timing.roofline.linear_flops_per_token_of_a_long_name", None, 7.8e10,
           [b + 0.002 * (-1) ** i for i, b in enumerate(base)],
           [b + 0.003 * (-1) ** (i + 1) for i, b in enumerate(base)]),
        sw("tiers.host.capacity", "size", 120e9, [b + 0.02 for b in base], [],
           {"high": "past the node's DRAM"}),
        sw("node.network_latency", "duration", 50e-6, list(base), list(base)),
    ]  # fmt: skip
    swings.sort(key=lambda s: -s.size())
    return Sensitivity("ttft_p99_s", sum(base) / seeds, noise_row(base), 0.25, swings, [], [],
                       base)  # fmt: skip


def test_the_tornado_has_units_intervals_the_noise_row_and_no_zero_rows():
    res = sensitivity_result(3)
    fig = tornado_figure(res)
    words = check_slide_ready(fig)
    (ax,) = fig.axes
    # the unit on the axis, not "_s"; the change from the baseline, on a symmetric-log
    # axis (the swings span more than 10x: a linear axis squashes the small ones)
    assert words["xlabel"] == ["change in ttft_p99 from the baseline (ms, symmetric log scale)"]
    rows = [t.get_text() for t in ax.get_yticklabels()]
    assert len(rows) == 3 and not any("network_latency" in r for r in rows)  # zero swing
    assert "1 field(s) with zero swing not drawn" in " ".join(words["title"]).replace("\n", " ")
    assert any("within noise" in r for r in rows)
    assert any(lbl.startswith("noise row") for lbl in words["legend"])
    assert any("paired 95% interval" in lbl for lbl in words["legend"])
    assert max(error_bars(ax)) > 0  # error bars from the paired intervals
    spans = [p for p in ax.patches if p.get_label().startswith("noise row")]
    (span,) = spans
    if hasattr(span, "get_width"):  # a Rectangle (matplotlib >= 3.9)
        width = span.get_width()
    else:  # a Polygon
        xs = [v[0] for v in span.get_xy()]
        width = max(xs) - min(xs)
    assert width / 2 == pytest.approx(res.noise)


def test_a_one_seed_tornado_says_so_and_draws_no_noise_row():
    fig = tornado_figure(sensitivity_result(1))
    words = check_slide_ready(fig)
    assert "give --reps 3" in " ".join(words["title"]).replace("\n", " ")
    assert not any(lbl.startswith("noise row") for lbl in words["legend"])


# ---- a run's figures, the cost model, the MRC --------------------------------------------


def test_a_runs_figures_have_units_and_fit(tmp_path, figures):
    out = tmp_path / "run"
    argv = ["run", str(SCENARIOS / "quickstart.yaml"), "--quiet", "--out", str(out)]
    assert main([*argv, "--set", "workload.requests=300", "--set", "run.warmup=10s"]) == 0
    assert main(["plot", str(out)]) == 0
    assert set(figures) == set(plots.RUN_FIGURES)
    words = {name: check_slide_ready(fig) for name, fig in figures.items()}
    assert re.fullmatch(r"TTFT \((ms|s), log scale\)", words["ttft_cdf"]["xlabel"][0])
    assert re.fullmatch(r"mean time per request \((ms|s)\)", words["ttft_breakdown"]["ylabel"][0])
    assert "(%)" in words["token_sources"]["ylabel"][0]
    assert words["engine_timeline"]["xlabel"][-1] in ("simulated time (s)", "simulated time (min)")
    assert re.fullmatch(r"TTFT \((ms|s)\)", words["timeseries"]["ylabel"][0])


def test_the_cost_model_and_mrc_figures_fit(tmp_path, figures):
    from kvsim.physics.costmodel import CostModel

    model = CostModel(kv_bytes=70e3, rate=40e3, t0=0.005)
    rows = [
        {"path": "host DRAM over PCIe Gen5", "bandwidth": 50e9, "t0_s": 0.001},
        {"path": "remote store over two 400G NICs", "bandwidth": 80e9, "t0_s": 0.004},
    ]
    plots.costmodel_plot(model, rows, tmp_path / "cm.png")
    words = check_slide_ready(figures["cm"])
    assert words["xlabel"] == ["prompt length (thousand tokens)"]
    assert "(s)" in words["ylabel"][0]
    points = [{"capacity_tokens": c, "hit_ratio": h} for c, h in ((1e3, 0.1), (1e5, 0.3))]
    plots.mrc_plot([*points, {"capacity_tokens": None, "hit_ratio": 0.4}], tmp_path / "m.png",
                   "trace.jsonl: LRU prefix-cache hit ratio", kv_bytes=70e3)  # fmt: skip
    words = check_slide_ready(figures["m"])
    assert "cache capacity (tokens, log scale)" in words["xlabel"]
