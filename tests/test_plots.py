"""Figures: produced, non-empty, in PNG and SVG."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import kvsim
from kvsim.cli import main
from kvsim.results.runfolder import write_results

from conftest import SCENARIOS


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_run_plots(tmp_path, capsys, fmt):
    out = tmp_path / "run"
    assert main(["run", str(SCENARIOS / "mooncake-sample.yaml"), "--quiet", "--out", str(out)]) == 0
    assert main(["plot", str(out), "--format", fmt]) == 0
    for name in ("ttft_cdf", "ttft_breakdown", "token_sources", "engine_timeline", "tiers"):
        f = out / f"{name}.{fmt}"
        assert f.stat().st_size > 5000, f
    if fmt == "svg":
        text = (out / "ttft_cdf.svg").read_text()
        assert "TTFT" in text and "mooncake-sample" in text  # labelled


def test_sweep_plot(tmp_path, capsys):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"""
base: {SCENARIOS / "azure-sample.yaml"}
grid:
  cluster.engines: [1, 2]
  cluster.router: [round_robin]
  workload.time_scale: [0.5, 0.25, 0.125]
set: {{workload.limit: 100}}
""")
    out = tmp_path / "sweep"
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1", "--quiet"]) == 0
    assert main(["plot", str(out)]) == 0
    assert (out / "ttft_vs_load.png").stat().st_size > 10_000
    capsys.readouterr()
    # any swept quantity may be the x axis; a name cannot
    assert main(["plot", str(out), "--x", "cluster.engines"]) == 0
    assert main(["plot", str(out), "--x", "cluster.router"]) == 2
    assert "--x: cluster.router is not a number" in capsys.readouterr().err


def test_plot_mistakes(tmp_path, capsys):
    assert main(["plot", str(tmp_path)]) == 2
    assert "expected a run folder" in capsys.readouterr().err
    assert main(["plot", str(tmp_path / "nope")]) == 2


def _sweep(tmp_path, name, grid, reps=2):
    sweep = tmp_path / f"{name}.yaml"
    sweep.write_text(
        f"base: {SCENARIOS / 'azure-sample.yaml'}\ngrid:\n{grid}\n"
        f"set: {{workload.limit: 80}}\nreplications: {reps}\n"
    )
    out = tmp_path / name
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1", "--quiet"]) == 0
    return out


def test_planner_plots_slo_line_bands_bars_and_overlays(tmp_path, capsys):
    """An SLO line and 95% bands over seeds on the load curves; a sweep with no load
    axis as bars per configuration; two sweep folders overlaid into the first."""
    a = _sweep(tmp_path, "a", "  cluster.engines: [1, 2]\n  workload.time_scale: [0.5, 0.25]")
    b = _sweep(tmp_path, "b", "  cluster.router: [round_robin]\n  workload.time_scale: [0.5, 0.25]")
    bars = _sweep(tmp_path, "bars", "  cluster.load_policy: [sync, async]")
    capsys.readouterr()
    assert main(["plot", str(a), "--slo", "ttft_p99<=2s"]) == 0
    assert (a / "ttft_vs_load.png").stat().st_size > 10_000
    assert main(["plot", str(bars), "--slo", "ttft_p50<=500ms"]) == 0
    assert (bars / "ttft_by_config.png").stat().st_size > 10_000
    assert main(["plot", str(a), str(b)]) == 0
    assert (a / "overlay_ttft_vs_load.png").stat().st_size > 10_000
    capsys.readouterr()
    # an SLO the figures do not draw, and a run folder in an overlay, are refused
    assert main(["plot", str(a), "--slo", "hit_ratio>=0.5"]) == 2
    assert "--slo" in capsys.readouterr().err
    assert main(["plot", str(bars), str(a)]) == 2
    assert "overlays need a load axis" in capsys.readouterr().err


# ---- issue 24, point 12: options, values and links -----------------------------------------


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """Valid folders, made once: a run (300 requests), a sweep table with a load axis (and
    kvsim's metadata), a categorical sweep table, a capacity table."""
    base = tmp_path_factory.mktemp("made")
    res = kvsim.run(SCENARIOS / "mooncake-sample.yaml", {"workload.limit": 300})
    write_results(res, base / "run")
    rows = [
        {
            "run": i,
            "run_id": f"r{i}",
            "cluster.load_policy": policy,
            "workload.time_scale": ts,
            "seed": 1,
            "status": "ok",
            "error": "",
            "ttft_p50_s": 0.1 / ts,
            "ttft_p99_s": 0.5 / ts,
        }
        for i, (policy, ts) in enumerate((p, t) for p in ("sync", "async") for t in (1.0, 0.5))
    ]
    for name, swept in (
        ("sweep", ["cluster.load_policy", "workload.time_scale"]),
        ("bars", ["cluster.load_policy"]),
    ):
        (base / name).mkdir()
        table = pd.DataFrame(rows)
        if name == "bars":
            table = table[table["workload.time_scale"] == 1.0].drop(columns="workload.time_scale")
        table.attrs["swept"] = swept
        table.to_parquet(base / name / "results.parquet", index=False)
    (base / "cap").mkdir()
    (base / "cap" / "capacity.csv").write_text(
        "configuration,capacity_rps,ci95_rps,factor,slo\na,3.5,0.1,1.7,ttft_p99_s<=1\n"
    )
    return {p.name: p for p in base.iterdir()}


def _copy(made, tmp_path, *kinds: str) -> list[Path]:
    out = []
    for kind in kinds:
        shutil.copytree(made[kind], tmp_path / kind)
        out.append(tmp_path / kind)
    return out


def _refused(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert err.startswith("kvsim: error: ") and "\n" not in err, err
    return err


def _figures(*folders: Path) -> list[str]:
    return sorted(n for f in folders for n in os.listdir(f) if n.endswith((".png", ".svg")))


@pytest.mark.parametrize(
    ("kind", "extra", "where"),
    [
        ("run", ["--slo", "ttft_p99<=1s"], "--slo"),
        ("run", ["--x", "workload.time_scale"], "--x"),
        ("cap", ["--slo", "ttft_p99<=1s"], "--slo"),
        ("cap", ["--x", "workload.time_scale"], "--x"),
        ("cap", ["{sweep}"], "cap"),  # an overlay onto a folder with no TTFT figure
        ("failed+cap", ["--slo", "ttft_p99<=1s"], "--slo"),
    ],
)
def test_every_plot_option_acts_or_is_refused(made, tmp_path, capsys, kind, extra, where):
    # found by the attack round: --slo and --x silently ignored for a run folder
    if kind == "failed+cap":  # a sweep whose runs all failed, beside its capacity table
        (folder,) = _copy(made, tmp_path, "sweep")
        table = pd.read_parquet(folder / "results.parquet")
        table["status"] = "error"
        table.to_parquet(folder / "results.parquet", index=False)
        shutil.copy(made["cap"] / "capacity.csv", folder)
    else:
        (folder,) = _copy(made, tmp_path, kind)
    extra = [str(made["sweep"]) if a == "{sweep}" else a for a in extra]
    err = _refused(capsys, ["plot", str(folder), *extra])
    assert f": error: {where}" in err or f"{where}: " in err, err
    assert _figures(folder) == []
    # without the option, the same folder plots
    assert main(["plot", str(folder)]) == 0


@pytest.mark.parametrize(
    ("table", "column", "row", "value", "why"),
    [
        ("requests.parquet", "ttft_s", 3, -5.0, "column ttft_s"),
        ("requests.csv", "ttft_s", 3, -5.0, "column ttft_s"),
        ("requests.parquet", "compute_s", 4, -0.5, "column compute_s"),
        ("requests.csv", "store_s", 5, np.inf, "column store_s"),
        ("requests.parquet", "compute_s", 6, np.nan, "column compute_s: missing"),
        ("requests.parquet", "ttft_s", 7, 1.0e6, "ttft_s is not finish_s - arrival_s"),
        ("requests.parquet", "start_s", 8, 0.0, "start_s is before arrival_s"),
        ("requests.parquet", "warmup", 9, 2, "column warmup"),
        ("results.parquet", "ttft_p99_s", 1, -1.0, "column ttft_p99_s"),
        ("results.parquet", "ttft_p50_s", 2, np.inf, "column ttft_p50_s"),
        ("results.parquet", "ttft_p50_s", 3, 99.0, "ttft_p50_s is above ttft_p99_s"),
        ("results.parquet", "workload.time_scale", 2, 0.0, "column workload.time_scale"),
        ("results.parquet", "workload.time_scale", 1, -0.5, "column workload.time_scale"),
        ("results.parquet", "workload.time_scale", 3, np.nan, "workload.time_scale is not a"),
    ],
)
def test_plot_refuses_values_kvsim_never_writes(
    made, tmp_path, capsys, table, column, row, value, why
):
    # found by the attack round: a negative TTFT in a results table plotted with exit 0
    kind = "sweep" if table == "results.parquet" else "run"
    (folder,) = _copy(made, tmp_path, kind)
    df = pd.read_parquet(folder / ("results.parquet" if kind == "sweep" else "requests.parquet"))
    if column == "warmup":
        df["warmup"] = df["warmup"].astype(int)
    df.loc[row, column] = value
    if table == "requests.csv":
        (folder / "requests.parquet").unlink()
        df.to_csv(folder / table, index=False)
    else:
        df.to_parquet(folder / table, index=False)
    err = _refused(capsys, ["plot", str(folder)])
    assert why in err, err
    if kind == "run":
        assert table in err and (f":{row + 2}" in err or f"(row {row})" in err), err
    assert _figures(folder) == []


def test_plot_refuses_token_fractions_kvsim_never_writes(made, tmp_path, capsys):
    (folder,) = _copy(made, tmp_path, "run")
    doc = json.loads((folder / "summary.json").read_text())
    doc["token_source_frac"]["host"] = -0.25
    (folder / "summary.json").write_text(json.dumps(doc))
    err = _refused(capsys, ["plot", str(folder)])
    assert "summary.json" in err and "token_source_frac" in err


def test_the_tiers_figure_draws_every_tier_and_engine(made, tmp_path, monkeypatch):
    """Per tier (remote's evictions kept for the shared store only) and engine: one bar
    per engine and counter; the counters' numbers are the summary's."""
    from kvsim.plots import style

    drawn = {}

    def keep(fig, path, in_folder=False):
        drawn[Path(path).stem] = fig
        return Path(path)

    monkeypatch.setattr(style, "save", keep)
    (folder,) = _copy(made, tmp_path, "run")
    tiers = json.loads((folder / "summary.json").read_text())["tiers"]
    assert main(["plot", str(folder)]) == 0
    fig = drawn["tiers"]
    look, evicted, into, out_of = fig.axes
    heights = {id(ax): sorted(round(p.get_height()) for p in ax.patches) for ax in fig.axes}
    names = [t.get_text() for t in look.get_xticklabels()]
    assert names == [t for t in ("gpu", "host", "nvme", "peer", "remote") if t in tiers]
    hits = sorted(round(e["hits"]) for t in names for e in tiers[t]["engines"])
    misses = sorted(round(e["misses"]) for t in names for e in tiers[t]["engines"])
    assert heights[id(look)] == sorted(hits + misses)
    evictions = [e["evictions"] for t in names for e in tiers[t]["engines"] if "evictions" in e]
    whole = [tiers["remote"]["evictions"]]  # the shared store: one bar for the tier
    assert heights[id(evicted)] == sorted(round(v) for v in evictions + whole)
    assert "(GB)" in into.get_ylabel() or "(MB)" in into.get_ylabel()
    assert out_of.get_ylabel().startswith("bytes read out of the tier (")
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    # a legend entry only for what is drawn: the whole-tier bar only when it is above 0
    drawn_whole = ["the tier as a whole"] if tiers["remote"]["evictions"] > 0 else []
    assert legend == ["engine 0", "engine 1", *drawn_whole]
    import matplotlib.pyplot as plt

    plt.close("all")


def test_a_summary_without_tiers_plots_the_rest(made, tmp_path, capsys):
    (folder,) = _copy(made, tmp_path, "run")
    doc = json.loads((folder / "summary.json").read_text())
    del doc["tiers"]  # an older kvsim's summary
    (folder / "summary.json").write_text(json.dumps(doc))
    assert main(["plot", str(folder)]) == 0
    assert "tiers.png" not in _figures(folder) and "ttft_cdf.png" in _figures(folder)
    doc["tiers"] = {"gpu": {"hits": 3, "misses": -1, "engines": []}}
    (folder / "summary.json").write_text(json.dumps(doc))
    for name in _figures(folder):
        (folder / name).unlink()
    err = _refused(capsys, ["plot", str(folder)])
    assert "field tiers.gpu.misses: -1 is not a count kvsim writes" in err
    assert _figures(folder) == []


def test_plot_refuses_a_sweep_table_missing_a_swept_column(tmp_path, capsys):
    """kvsim sweep records its swept columns in results.parquet; a table that lost one is
    refused (it used to draw bars per configuration instead of the load curves)."""
    out = _sweep(
        tmp_path, "s", "  cluster.load_policy: [sync, async]\n  workload.time_scale: [0.5]", 1
    )
    table = pd.read_parquet(out / "results.parquet")
    assert table.attrs["swept"] == ["cluster.load_policy", "workload.time_scale"]
    table.drop(columns="workload.time_scale").to_parquet(out / "results.parquet", index=False)
    err = _refused(capsys, ["plot", str(out)])
    assert "results.parquet" in err and "missing swept column(s) workload.time_scale" in err
    assert _figures(out) == []


@pytest.mark.parametrize("kind", ["run", "sweep", "bars", "cap"])
@pytest.mark.parametrize("dangling", [False, True])
def test_plot_never_writes_through_a_symlink(made, tmp_path, capsys, kind, dangling):
    # found by the attack round: a symlinked PNG in the folder written through to a file
    # outside it; now refused before any figure is drawn (no half-written set)
    (folder,) = _copy(made, tmp_path, kind)
    main(["plot", str(folder)])
    names = _figures(folder)
    for name in names:
        (folder / name).unlink()
    outside = tmp_path / "elsewhere" / "precious.png"
    outside.parent.mkdir()
    if not dangling:
        outside.write_text("precious")
    (folder / names[-1]).symlink_to(outside)
    err = _refused(capsys, ["plot", str(folder)])
    assert names[-1] in err and "symlink" in err
    assert outside.exists() != dangling and (dangling or outside.read_text() == "precious")
    assert _figures(folder) == [names[-1]]  # only the link; nothing drawn
    assert os.listdir(outside.parent) == ([] if dangling else ["precious.png"])
