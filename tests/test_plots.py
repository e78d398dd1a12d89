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
