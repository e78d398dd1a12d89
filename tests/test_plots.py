"""Figures: produced, non-empty, in PNG and SVG."""

import pytest

from kvsim.cli import main

from conftest import SCENARIOS


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_run_plots(tmp_path, capsys, fmt):
    out = tmp_path / "run"
    assert main(["run", str(SCENARIOS / "mooncake-sample.yaml"), "--quiet", "--out", str(out)]) == 0
    assert main(["plot", str(out), "--format", fmt]) == 0
    for name in ("ttft_cdf", "ttft_breakdown", "token_sources", "engine_timeline"):
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
