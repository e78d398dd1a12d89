"""Issue 27: TTFT p95 beside p50/p90/p99 everywhere, and the run's time series
(timeseries.parquet, its figure)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import kvsim
from kvsim.cli import main
from kvsim.errors import InputError
from kvsim.plots import RUN_FIGURES
from kvsim.results.timeseries import COLUMN_NAMES, timeseries

from conftest import ROOT, SCENARIOS

QS = SCENARIOS / "quickstart.yaml"
PARTS = ("lookup", "queue", "read", "h2d")
SMALL = ["--set", "workload.requests=200", "--set", "run.warmup=0 s"]


def _row(
    i,
    arrival,
    ttft,
    *,
    warm,
    input_tokens=100,
    compute=100,
    recomputed=0,
    gpu=0.0,
    load=0.0,
    prefetch=0.0,
    parts=(0.0, 0.0, 0.0, 0.0),
    host=0,
    warmup=False,
    decision="cold",
):
    return {
        "id": i,
        "arrival_s": arrival,
        "finish_s": arrival + ttft,
        "ttft_s": ttft,
        "warmup": warmup,
        "decision": decision,
        "warm": warm,
        "input_tokens": input_tokens,
        "tokens_gpu": input_tokens - compute - host,
        "tokens_host": host,
        "tokens_nvme": 0,
        "tokens_remote": 0,
        "tokens_peer": 0,
        "tokens_compute": compute,
        "recomputed_tokens": recomputed,
        "gpu_compute_s": gpu,
        "load_s": load,
        "load_prefetch_s": prefetch,
        **{f"restore_{p}_s": v for p, v in zip(PARTS, parts, strict=True)},
        "bytes_host": 10.0 * host,
        "bytes_nvme": 0.0,
        "bytes_remote": 0.0,
        "bytes_peer": 0.0,
    }


def hand_table() -> pd.DataFrame:
    """Seven requests: three measured in [0, 10), none in [10, 20), two in [20, 30), one in
    the warm-up and one dropped (both left out)."""
    rows = [
        _row(
            0,
            1.0,
            0.1,
            warm=False,
            compute=40,
            host=60,
            recomputed=10,
            gpu=0.2,
            load=0.05,
            parts=(0.01, 0.01, 0.02, 0.01),
            decision="restore",
        ),
        _row(1, 4.0, 0.3, warm=True, compute=100, recomputed=50, gpu=0.4),
        _row(2, 8.0, 0.2, warm=True, input_tokens=200, compute=0, decision="gpu"),
        _row(3, 25.0, 1.0, warm=False, compute=100, gpu=0.5),
        _row(4, 5.0, 0.5, warm=False, warmup=True, compute=100, gpu=9.0),
        _row(5, 6.0, math.nan, warm=True, decision="dropped"),
        _row(
            6,
            27.0,
            2.0,
            warm=True,
            compute=20,
            host=80,
            recomputed=20,
            gpu=0.1,
            load=0.3,
            prefetch=0.1,
            parts=(0.02, 0.1, 0.05, 0.03),
            decision="restore",
        ),
    ]
    return pd.DataFrame(rows)


# two engines' GPU work spans, flat [start, end, ...]
ACTIVITY = [{"gpu": [0.0, 5.0, 12.0, 14.0]}, {"gpu": [8.0, 12.0, 25.0, 26.0]}]


def test_hand_built_windows():
    ts = timeseries(hand_table(), ACTIVITY, 10.0, 2)
    assert list(ts.columns) == list(COLUMN_NAMES)
    # arrivals 1..27 s measured: windows [0, 10), [10, 20) (empty, kept), [20, 30)
    assert ts["window_start_s"].tolist() == [0.0, 10.0, 20.0]
    assert ts["window_end_s"].tolist() == [10.0, 20.0, 30.0]
    assert ts["requests"].tolist() == [3, 0, 2]  # warm-up (id 4) and dropped (id 5) left out
    assert ts["requests_cold"].tolist() == [1, 0, 1]
    assert ts["requests_warm"].tolist() == [2, 0, 1]
    w0, w1, w2 = (ts.iloc[i] for i in range(3))
    # window 0: TTFTs sorted 0.1, 0.2, 0.3 (linear interpolation): p50 = 0.2; p95 at
    # rank 0.95 x 2 = 1.9: 0.2 + 0.9 x 0.1 = 0.29; p99 at 1.98: 0.298
    assert w0["ttft_p50_s"] == pytest.approx(0.2)
    assert w0["ttft_p95_s"] == pytest.approx(0.29)
    assert w0["ttft_p99_s"] == pytest.approx(0.298)
    assert w0["ttft_cold_p50_s"] == pytest.approx(0.1)  # id 0 alone
    assert w0["ttft_warm_p50_s"] == pytest.approx(0.25)  # (0.3 + 0.2) / 2
    # prompt 100 + 100 + 200 = 400 tokens, computed 40 + 100 + 0 = 140: (400 - 140) / 400
    assert w0["hit_ratio"] == pytest.approx(0.65)
    assert w0["recomputed_tokens"] == 60
    # GPU time on recomputed tokens: 0.2 x 10/40 + 0.4 x 50/100 + 0 = 0.25 of 0.6 s
    assert w0["gpu_recompute_frac"] == pytest.approx(0.25 / 0.6)
    # GPU spans in [0, 10]: engine 0 5 s, engine 1 [8, 10] 2 s: 7 / (2 engines x 10 s)
    assert w0["gpu_busy_frac"] == pytest.approx(0.35)
    # restore parts: id 0 alone restored (decision restore)
    assert [w0[f"restore_{p}_mean_s"] for p in ("lookup", "queue", "read", "h2d")] == (
        pytest.approx([0.01, 0.01, 0.02, 0.01])
    )
    assert w0["tokens_host"] == 60 and w0["tokens_compute"] == 140 and w0["tokens_gpu"] == 200
    assert w0["bytes_host"] == 600.0
    # window 1: no arrival: NaN statistics, 0 counts; the GPU's time still counts: engine 0
    # [12, 14] 2 s and engine 1 [10, 12] 2 s: 4 / 20
    assert w1["requests"] == 0 and w1["recomputed_tokens"] == 0 and w1["tokens_compute"] == 0
    for c in ("ttft_p50_s", "ttft_p95_s", "hit_ratio", "gpu_recompute_frac"):
        assert math.isnan(w1[c]), c
    assert w1["gpu_busy_frac"] == pytest.approx(0.2)
    # window 2: TTFTs 1.0, 2.0: p50 1.5, p95 1.95, p99 1.99
    assert [w2[f"ttft_p{q}_s"] for q in (50, 95, 99)] == pytest.approx([1.5, 1.95, 1.99])
    assert w2["ttft_cold_p50_s"] == pytest.approx(1.0)
    assert w2["ttft_warm_p50_s"] == pytest.approx(2.0)
    assert w2["hit_ratio"] == pytest.approx((200 - 120) / 200)
    assert w2["gpu_recompute_frac"] == pytest.approx(0.1 / 0.6)  # 0.1 x 20/20 of 0.5 + 0.1
    # the run's last first token is id 6's at 29 s: [20, 29] holds engine 1's [25, 26]
    assert w2["gpu_busy_frac"] == pytest.approx(1.0 / (2 * 9.0))
    # id 6 restored; id 3 did not (decision cold)
    assert w2["restore_queue_mean_s"] == pytest.approx(0.1)
    assert w2["restore_h2d_mean_s"] == pytest.approx(0.03)


def test_the_windows_sum_to_the_whole():
    df = hand_table()
    ts = timeseries(df, ACTIVITY, 10.0, 2)
    m = df[~df["warmup"] & (df["decision"] != "dropped")]
    assert ts["requests"].sum() == len(m)
    for c in ("tokens_gpu", "tokens_host", "tokens_compute", "recomputed_tokens", "bytes_host"):
        assert ts[c].sum() == m[c].sum(), c
    # one window over everything: its percentiles are the whole run's
    one = timeseries(df, ACTIVITY, 100.0, 2)
    assert len(one) == 1
    for q in (50, 95, 99):
        assert one[f"ttft_p{q}_s"].iloc[0] == pytest.approx(np.percentile(m["ttft_s"], q))


def test_a_requests_table_without_the_new_columns_gives_nan_columns():
    df = hand_table().drop(
        columns=["warm", "recomputed_tokens", "gpu_compute_s"]
        + [f"restore_{p}_s" for p in ("lookup", "queue", "read", "h2d")]
    )
    ts = timeseries(df, ACTIVITY, 10.0, 2)
    assert list(ts.columns) == list(COLUMN_NAMES)
    for c in (
        "requests_cold",
        "requests_warm",
        "ttft_cold_p50_s",
        "ttft_warm_p50_s",
        "recomputed_tokens",
        "gpu_recompute_frac",
        "restore_lookup_mean_s",
    ):
        assert ts[c].isna().all(), c
    full = timeseries(hand_table(), ACTIVITY, 10.0, 2)
    for c in ("requests", "ttft_p95_s", "hit_ratio", "gpu_busy_frac", "tokens_host"):
        pd.testing.assert_series_equal(ts[c], full[c])
    # no activity spans: the GPU's busy fraction is unknown, not 0
    assert timeseries(df, [], 10.0, 2)["gpu_busy_frac"].isna().all()


def test_windows_past_the_limit_are_refused_naming_the_field():
    with pytest.raises(InputError) as e:
        timeseries(hand_table(), ACTIVITY, 1e-6, 2)  # 26 s of arrivals in 1 us windows
    assert e.value.where == "run.timeseries_window" and "windows" in str(e.value)


def test_nothing_measured_gives_an_empty_table_with_the_columns():
    df = hand_table()
    df["warmup"] = True
    ts = timeseries(df, ACTIVITY, 10.0, 2)
    assert ts.empty and list(ts.columns) == list(COLUMN_NAMES)


# ---- through kvsim run --------------------------------------------------------------------


def test_kvsim_run_writes_the_time_series(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", str(QS), *SMALL, "--quiet", "--out", str(out)]) == 0
    assert "p95" in capsys.readouterr().out  # the terminal summary's TTFT row
    ts = pd.read_parquet(out / "timeseries.parquet")
    df = pd.read_parquet(out / "requests.parquet")
    assert list(ts.columns) == list(COLUMN_NAMES)
    m = df[~df["warmup"] & (df["decision"] != "dropped")]
    first, last = np.floor(m["arrival_s"].min() / 10), np.floor(m["arrival_s"].max() / 10)
    assert len(ts) == last - first + 1  # default window 10 s, empty ones kept
    assert ts["requests"].sum() == len(m)
    assert (ts["window_end_s"] - ts["window_start_s"]).eq(10.0).all()


def test_one_window_agrees_with_the_summary(tmp_path):
    """A window past the whole run: its row is the summary's numbers (the GPU's busy
    fraction over [0, last first token] rather than from the first arrival)."""
    out = tmp_path / "run"
    argv = ["run", str(QS), *SMALL, "--set", "run.timeseries_window=1 h"]
    assert main([*argv, "--quiet", "--out", str(out), "--format", "csv"]) == 0
    ts = pd.read_csv(out / "timeseries.csv")
    assert not (out / "timeseries.parquet").exists()
    import json

    s = json.loads((out / "summary.json").read_text())
    df = pd.read_csv(out / "requests.csv")
    assert len(ts) == 1
    row = ts.iloc[0]
    assert row["requests"] == s["requests"]
    for k in ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "hit_ratio"):
        assert row[k] == pytest.approx(s[k], rel=1e-9), k
    first = float(df["arrival_s"].min())
    hi = float(df["finish_s"].max())
    # summary: busy / (engines x (hi - first)); the window: busy / (engines x hi)
    assert row["gpu_busy_frac"] == pytest.approx(s["gpu_busy_frac"] * (hi - first) / hi, rel=1e-9)
    assert row["requests_cold"] == s["requests_cold"]
    assert row["ttft_cold_p50_s"] == pytest.approx(s["ttft_cold_p50_s"], rel=1e-9)
    assert row["recomputed_tokens"] == s["recomputed_tokens"]
    assert row["gpu_recompute_frac"] == pytest.approx(s["gpu_recompute_frac"], abs=1e-12)
    for p in PARTS:  # over the same requests (JSON null: none restored)
        want = s[f"restore_{p}_mean_s"]
        got = row[f"restore_{p}_mean_s"]
        assert math.isnan(got) if want is None else got == pytest.approx(want, rel=1e-9), p


@pytest.mark.parametrize("window", ["0 s", "-10 s"])
def test_a_window_not_positive_is_refused(tmp_path, capsys, window):
    out = tmp_path / "run"
    argv = ["run", str(QS), *SMALL, "--set", f"run.timeseries_window={window}", "--quiet"]
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "run.timeseries_window" in err and "\n" not in err
    assert not out.exists()


# ---- the figure ---------------------------------------------------------------------------


@pytest.fixture
def figures(monkeypatch):
    """The figures kvsim.plots saves, kept open for their artists to be read."""
    from kvsim.plots import style

    kept = []
    real = style.save

    def keep(fig, path, in_folder=False):
        kept.append(fig)
        fig.savefig(str(path), format=str(path).rsplit(".", 1)[-1])
        return path

    monkeypatch.setattr(style, "save", keep)
    yield kept
    monkeypatch.setattr(style, "save", real)
    import matplotlib.pyplot as plt

    for f in kept:
        plt.close(f)


def test_timeseries_figure_artists(tmp_path, figures):
    from kvsim.plots import timeseries_plot

    ts = timeseries(hand_table(), ACTIVITY, 10.0, 2)
    ts["gpu_recompute_frac"] = np.nan  # a run that did not record it
    timeseries_plot(ts, tmp_path / "t.png", "demo: over time")
    (fig,) = figures
    ax_t, ax_hit, ax_gpu, ax_re = fig.axes
    assert ax_t.get_title() == "demo: over time"
    assert ax_t.get_ylabel() == "TTFT (s)"  # issue 28: the unit named
    assert [line.get_label() for line in ax_t.get_lines()] == ["TTFT p50", "TTFT p95"]
    # points at the windows' middles; the empty window's TTFT is a gap (NaN)
    x, y = ax_t.get_lines()[1].get_data()
    assert list(x) == [5.0, 15.0, 25.0] and np.isnan(y[1]) and y[2] == pytest.approx(1.95)
    assert "hit ratio" in ax_hit.get_ylabel() and "GPU busy" in ax_gpu.get_ylabel()
    assert "recompute" in ax_re.get_ylabel()
    assert ax_gpu.get_lines()[0].get_data()[1][0] == pytest.approx(35.0)  # percent
    assert [t.get_text() for t in ax_re.texts] == ["recomputed tokens: not recorded"]
    assert ax_re.get_xlabel().startswith("simulated time (s")
    # TTFT ticks in human units: the axis's unit in its label (issue 28), plain numbers
    labels = [ax_t.yaxis.get_major_formatter()(v, 0) for v in (0.0, 0.5, 1.5)]
    assert labels == ["0", "0.5", "1.5"]


def test_kvsim_plot_draws_the_time_series_of_a_run(tmp_path, capsys, figures):
    out = tmp_path / "run"
    assert main(["run", str(QS), *SMALL, "--quiet", "--out", str(out)]) == 0
    assert main(["plot", str(out)]) == 0
    assert (out / "timeseries.png").stat().st_size > 5000
    timeseries = RUN_FIGURES.index("timeseries")  # (the figures are drawn in this order)
    fig = figures[timeseries]
    assert fig.axes[0].get_title().startswith("quickstart: ")
    assert "10 s windows" in fig.axes[0].get_title()
    cdf = figures[0]  # the TTFT CDF marks p95 too
    assert "p95" in cdf.axes[0].get_lines()[0].get_label()
    # an older run folder without the table: drawn from the requests (no GPU spans)
    (out / "timeseries.parquet").unlink()
    for f in out.glob("*.png"):
        f.unlink()
    assert main(["plot", str(out)]) == 0
    drawn = figures[-len(RUN_FIGURES) :]
    assert [t.get_text() for t in drawn[timeseries].axes[2].texts] == ["GPU busy: not recorded"]


def test_a_damaged_timeseries_table_is_refused_naming_it(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", str(QS), *SMALL, "--quiet", "--out", str(out)]) == 0
    ts = pd.read_parquet(out / "timeseries.parquet")
    ts.loc[1, "hit_ratio"] = 1.5
    ts.to_parquet(out / "timeseries.parquet", index=False)
    capsys.readouterr()
    assert main(["plot", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "timeseries.parquet (row 1)" in err and "hit_ratio" in err
    assert not list(out.glob("*.png"))


# ---- p95 everywhere -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_run():
    return kvsim.run(QS, {"workload.requests": 200, "run.warmup": "0 s"})


def test_the_python_api_gives_the_time_series(small_run):
    from kvsim.results.runfolder import of_results

    ts = of_results(small_run)
    assert list(ts.columns) == list(COLUMN_NAMES)
    assert ts["requests"].sum() == small_run.summary["requests"]
    assert ts["gpu_busy_frac"].notna().all() and (ts["gpu_busy_frac"] > 0).any()


def test_report_shows_p95(small_run):
    from kvsim.report import summary_table

    res = small_run
    line = next(x for x in summary_table(res.summary).splitlines() if x.startswith("TTFT"))
    assert "p90" in line and "p95" in line and "p99" in line
    assert line.index("p90") < line.index("p95") < line.index("p99")


def test_slo_on_p95_parses():
    from kvsim.experiments.slo import parse_slo

    slo = parse_slo("ttft_p95<=2s")
    assert (slo.metric, slo.op, slo.threshold) == ("ttft_p95_s", "<=", 2.0)


def test_gate_defaults_gate_p95_between_p90_and_p99():
    from kvsim.experiments.regression.suite import DEFAULT_METRICS, load_suite

    names = list(DEFAULT_METRICS)
    assert names.index("ttft_p90_s") < names.index("ttft_p95_s") < names.index("ttft_p99_s")
    p90, p95, p99 = (DEFAULT_METRICS[f"ttft_p{q}_s"] for q in (90, 95, 99))
    assert p90.rel <= p95.rel <= p99.rel and p90.abs <= p95.abs <= p99.abs
    assert "ttft_p95_s" in load_suite(ROOT / ".ci" / "suite.yaml").metrics


def test_sweep_results_and_plots_have_p95(tmp_path, capsys, figures):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(
        f"base: {QS}\ngrid:\n  workload.arrivals.rate: [1/s, 2/s]\n"
        "set: {workload.requests: 100, run.warmup: 0 s}\n"
    )
    out = tmp_path / "sweep"
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1", "--quiet"]) == 0
    header = capsys.readouterr().out.splitlines()[0].split()
    assert header.index("ttft_p50_s") < header.index("ttft_p95_s") < header.index("ttft_p99_s")
    csv = pd.read_csv(out / "results.csv")
    assert csv["ttft_p95_s"].notna().all()
    assert (csv["ttft_p50_s"] <= csv["ttft_p95_s"]).all()
    assert (csv["ttft_p95_s"] <= csv["ttft_p99_s"]).all()
    assert main(["plot", str(out), "--slo", "ttft_p95<=2s"]) == 0
    fig = figures[-1]
    labels = [ax.get_ylabel().rsplit(" (", 1)[0] for ax in fig.axes]  # (issue 28: "(ms)")
    assert labels == ["TTFT p50", "TTFT p95", "TTFT p99"]
    shown = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert "SLO ttft_p95_s <= 2 s" in shown, shown
    # an older kvsim's table without p95: two panels, and no p95 SLO to draw
    df = pd.read_parquet(out / "results.parquet").drop(columns=["ttft_p95_s"])
    df.attrs["swept"] = ["workload.arrivals.rate"]
    df.to_parquet(out / "results.parquet", index=False)
    (out / "ttft_vs_load.png").unlink()
    assert main(["plot", str(out)]) == 0
    labels = [ax.get_ylabel().rsplit(" (", 1)[0] for ax in figures[-1].axes]
    assert labels == ["TTFT p50", "TTFT p99"]
    capsys.readouterr()
    assert main(["plot", str(out), "--slo", "ttft_p95<=2s"]) == 2
    assert "--slo" in capsys.readouterr().err
