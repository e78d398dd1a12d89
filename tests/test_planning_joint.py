"""Issue 39, points 16 and 7 (first item): the planner's joint question (--minimize over a
sweep's layouts, --cheapest writing its table and figure), one interval form for scripts
(numeric ``<value>_lo``/``<value>_hi`` everywhere), no "widen --range" at the least value
a field can take, and the planning figures (whole-number axes, bands above 0, the
tornado's symmetric-log axis, tiers.png's legend, the sweep bars' paired differences)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection
from test_planner_hardening import POISSON  # cold prompts: replications differ in engines

from kvsim import plots
from kvsim.cli import main
from kvsim.experiments.capacity import Capacity, capacity_table
from kvsim.experiments.planner import Minimum, NumericField
from kvsim.experiments.slo import SLO
from kvsim.plots import style
from kvsim.results.readers import read_capacity
from kvsim.results.uncertainty import bound_keys, read_bounds

from test_planning import BASE  # the toy scenario of the planner's tests

# two configurations of the toy whose smallest engine counts differ (shorter prompts:
# fewer engines); the router rides along
LAYOUTS = """\
base: pois.yaml
zip:
  cluster.router: [round_robin, least_loaded]
  workload.prompt_tokens.value: [1000, 500]
"""
SLO_TEXT = "ttft_p99<=3s"


@pytest.fixture
def joint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "base.yaml").write_text(BASE)
    (tmp_path / "pois.yaml").write_text(POISSON)
    (tmp_path / "layouts.yaml").write_text(LAYOUTS)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_bounds(row: dict, name: str) -> None:
    """``name_lo <= name <= name_hi``, both numbers (or both null: no interval)."""
    lo, hi = row[f"{name}_lo"], row[f"{name}_hi"]
    if lo is None or (isinstance(lo, float) and math.isnan(lo)):
        assert hi is None or (isinstance(hi, float) and math.isnan(hi)), (name, lo, hi)
        return
    assert isinstance(lo, (int, float)) and isinstance(hi, (int, float)), (name, lo, hi)
    assert lo <= row[name] <= hi, (name, lo, row[name], hi)


# ---- --minimize over a sweep's layouts ---------------------------------------------------


def test_minimize_over_a_sweep_gives_each_layout_its_own_answer(joint, capsys):
    """Per layout, the same answer (values, interval, provision) as --minimize on that
    layout alone (the scenario with the layout's values set); the price is the layout's
    at the value to provision, and the cheapest layout is marked."""
    argv = ("--slo", SLO_TEXT, "--minimize", "cluster.engines", "--range", "1..8", "--reps", "3")
    code, out, err = cli(capsys, "capacity", "--sweep", "layouts.yaml", *argv, "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["cluster.router"] for r in rows] == ["round_robin", "least_loaded"]
    for r in rows:
        tokens = r["workload.prompt_tokens.value"]
        sets = [f"--set=cluster.router={r['cluster.router']}"]
        sets.append(f"--set=workload.prompt_tokens.value={tokens}")
        code, alone, err = cli(capsys, "capacity", "pois.yaml", *argv, *sets, "--json")
        assert code == 0, err
        alone = json.loads(alone)
        for key in ("values", "mean", "mean_lo", "mean_hi", "provision", "range"):
            assert r[key] == alone[key], (r["cluster.router"], key)
        assert_bounds(r, "mean")
        assert "ci95" not in r
        # BASE prices an engine at $10/h: the price is the one at the value to provision
        assert r["usd_per_hour"] == pytest.approx(10.0 * r["provision"])
    best = min(rows, key=lambda r: r["usd_per_hour"])
    assert [r["cheapest"] for r in rows] == [r is best for r in rows]
    assert len({tuple(r["values"]) for r in rows}) == 2  # (the layouts do differ)
    code, text, err = cli(capsys, "capacity", "--sweep", "layouts.yaml", *argv)
    assert code == 0, err
    assert f"cheapest: cluster.router={best['cluster.router']}" in text
    assert text.count("<- cheapest") == 1


def test_minimize_over_a_sweep_refuses_a_swept_field(joint, capsys):
    argv = ("--slo", SLO_TEXT, "--minimize", "cluster.router", "--out", "o")
    code, _, err = cli(capsys, "capacity", "--sweep", "layouts.yaml", *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    code, _, err = cli(
        capsys, "capacity", "--sweep", "layouts.yaml", "--slo", SLO_TEXT,
        "--minimize", "cluster.router",
    )  # fmt: skip
    assert code == 2 and "swept by the sweep file" in err and "--minimize cluster.router" in err
    assert not (joint / "o").exists()


# ---- --cheapest --out --------------------------------------------------------------------


def test_cheapest_writes_its_table_json_and_figure(joint, capsys):
    (joint / "prices.yaml").write_text(
        "base: pois.yaml\nzip:\n  cluster.engines: [2, 3]\n  cost.gpu_node_hour: [10, 5]\n"
    )
    argv = ("capacity", "--sweep", "prices.yaml", "--slo", SLO_TEXT, "--cheapest", "--reps", "3")
    code, printed, err = cli(capsys, *argv, "--json")
    assert code == 0, err
    code, _, err = cli(capsys, *argv, "--out", "cheap")
    assert code == 0, err
    folder = joint / "cheap"
    assert sorted(p.name for p in folder.iterdir()) == [
        "cheapest.csv",
        "cheapest.json",
        "cheapest.png",
    ]
    assert json.loads((folder / "cheapest.json").read_text()) == json.loads(printed)
    assert (folder / "cheapest.png").stat().st_size > 5_000
    table = pd.read_csv(folder / "cheapest.csv")
    assert table["cheapest"].tolist() == [False, True]  # 3 engines at $5 < 2 at $10
    for r in [*json.loads(printed), *table.to_dict("records")]:
        assert "ci95" not in r and not any(k.endswith("_ci") for k in r)
        assert_bounds(r, "ttft_p99_s")
        if not r["reference"]:
            for name in ("ttft_p99_s", "usd_per_hour", "usd_per_million_prompt_tokens"):
                assert_bounds(r, f"delta_{name}")


def test_cheapest_out_refuses_bad_input_and_writes_nothing(joint, capsys):
    """A sweep without prices: exit 2, one line naming the sweep file, no folder."""
    (joint / "free.yaml").write_text(LAYOUTS + "set: {cost: null}\n")
    code, _, err = cli(
        capsys, "capacity", "--sweep", "free.yaml", "--slo", SLO_TEXT, "--cheapest",
        "--out", "cheap",
    )  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "free.yaml" in err and "needs prices" in err
    assert not (joint / "cheap").exists()


# ---- the one interval form --------------------------------------------------------------


def test_bound_keys_and_the_capacity_table_are_numeric():
    assert bound_keys("x", (1.0, 2.0)) == {"x_lo": 1.0, "x_hi": 2.0}
    assert bound_keys("x", None) == {"x_lo": None, "x_hi": None}
    assert bound_keys("x", (math.nan, 1.0)) == {"x_lo": None, "x_hi": None}
    assert read_bounds({"d_ci": "[1, 2]"}, "d", legacy="d_ci") == (1.0, 2.0)  # older kvsim
    assert read_bounds({"d_lo": 1.0, "d_hi": 2.0}, "d") == (1.0, 2.0)
    slo = SLO("ttft_p99_s", "<=", 1.0)
    caps = [
        Capacity(slo, [10.0, 12.0, 11.0], [1.0] * 3, 9, {"x": 1}, base_rate=1.0),
        Capacity(slo, [13.0, 14.0, 15.0], [1.0] * 3, 9, {"x": 2}, base_rate=1.0),
    ]
    df = capacity_table(caps)
    assert "ci95_rps" not in df.columns
    for r in df.to_dict("records"):
        assert_bounds(r, "capacity_rps")
        assert r["capacity_rps_lo"] < r["capacity_rps_hi"]  # an interval, not a half-width
    assert_bounds(df.to_dict("records")[1], "delta_capacity_rps")


# ---- 7: no "widen --range" at the least value a field can take ---------------------------


def _minimum(bottom: float, values: list[float]) -> Minimum:
    f = NumericField("cluster.engines", 4.0, True, None, floor=1.0)
    at = sum(v == bottom for v in values)
    return Minimum(SLO("ttft_p99_s", "<=", 1.0), f, values, 6, (bottom, 8.0), at)


def test_no_widen_range_note_at_the_fields_floor():
    text = "\n".join(_minimum(1.0, [1.0, 1.0, 1.0]).lines())
    assert "widen --range" not in text and "or lower" not in text
    assert "1, the least cluster.engines can be" in text
    assert "widen --range" not in "\n".join(_minimum(1.0, [1.0, 2.0, 2.0]).lines())
    # above the floor the note stays: a lower range might find less
    assert "widen --range" in "\n".join(_minimum(2.0, [2.0, 2.0, 2.0]).lines())
    assert "widen --range" in "\n".join(_minimum(2.0, [2.0, 3.0, 3.0]).lines())
    assert _minimum(1.0, [1.0] * 3).as_json()["at_field_floor"] is True


def test_minimize_engines_answering_one_says_no_widen_through_the_cli(joint, capsys):
    argv = ("capacity", "pois.yaml", "--slo", "ttft_p99<=60s", "--minimize", "cluster.engines")
    code, out, err = cli(capsys, *argv, "--range", "1..4", "--reps", "1")
    assert code == 0, err
    assert "the least cluster.engines can be" in out and "widen" not in out
    code, out, err = cli(capsys, *argv, "--range", "2..4", "--reps", "1")
    assert code == 0, err
    assert "widen --range" in out


# ---- figures ----------------------------------------------------------------------------


@pytest.fixture
def figures(monkeypatch) -> dict[str, object]:
    """Every figure kvsim.plots saves, by file name, kept open to be read."""
    drawn: dict[str, object] = {}

    def keep(fig, path, in_folder=False):
        drawn[Path(path).stem] = fig
        return Path(path)

    monkeypatch.setattr(style, "save", keep)
    yield drawn
    import matplotlib.pyplot as plt

    plt.close("all")


def _sweep_folder(tmp_path: Path, x: str, xs: list, p99: dict) -> Path:
    """A sweep table over ``x`` with 3 seeds, p99 per (x value, seed) from ``p99``."""
    rows = []
    for i, v in enumerate(xs):
        for seed in (1, 2, 3):
            t = p99[v, seed]
            rows.append({"run": len(rows), "run_id": f"r{len(rows)}", x: v, "seed": seed,
                         "status": "ok", "error": "", "ttft_p50_s": t / 4, "ttft_p95_s": t / 2,
                         "ttft_p99_s": t, "conf": i})  # fmt: skip
    df = pd.DataFrame(rows)
    ref = df[df["conf"] == 0].set_index("seed")["ttft_p99_s"]
    for q, k in (("p50", 4), ("p95", 2), ("p99", 1)):
        d = df["ttft_p99_s"] / k - df["seed"].map(ref) / k
        df[f"delta_ttft_{q}_s"] = np.where(df["conf"] == 0, np.nan, d)
    df = df.drop(columns="conf")
    df.attrs["swept"] = [x]
    out = tmp_path / "sw"
    out.mkdir()
    df.to_parquet(out / "results.parquet", index=False)
    return out


def test_a_count_axis_ticks_on_whole_numbers_and_bands_stay_above_0(tmp_path, figures):
    """`plot --x cluster.engines`: ticks only on whole engine counts; a p99 whose seeds
    spread widely (a Student-t interval reaching below 0) is banded from 0, never below."""
    seeds = {1: 0.001, 2: 0.002, 3: 0.9}  # mean 0.3, t interval far below 0
    p99 = {(n, s): v / n for n in (1, 2, 3, 4) for s, v in seeds.items()}
    folder = _sweep_folder(tmp_path, "cluster.engines", [1, 2, 3, 4], p99)
    assert main(["plot", str(folder), "--x", "cluster.engines"]) == 0
    fig = figures["ttft_vs_load"]
    fig.canvas.draw()
    for ax in fig.axes:
        lo, hi = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
        assert ticks and all(t == int(t) for t in ticks), ticks
        assert ax.get_ylim()[0] >= 0
        bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
        assert bands
        for band in bands:
            for path in band.get_paths():
                assert path.vertices[:, 1].min() >= 0


def test_sweep_bars_draw_the_paired_difference_against_the_reference(tmp_path, figures):
    """Two layouts whose p99 moves a lot between seeds but by exactly +0.1 s on every
    seed: the lower panels draw that paired difference (0.1 s, no spread), not two
    overlapping unpaired intervals."""
    seeds = {1: 0.2, 2: 1.0, 3: 2.5}
    p99 = {(v, s): t + (0.1 if v == "b" else 0.0) for v in ("a", "b") for s, t in seeds.items()}
    folder = _sweep_folder(tmp_path, "cluster.load_policy", ["a", "b"], p99)
    assert main(["plot", str(folder)]) == 0
    fig = figures["ttft_by_config"]
    fig.canvas.draw()
    assert len(fig.axes) == 6  # p50, p95, p99 means, and their paired differences below
    delta99 = fig.axes[-1]
    assert "minus the reference" in delta99.get_ylabel()
    heights = [p.get_height() for p in delta99.patches]
    assert heights == pytest.approx([0.0, 0.1])
    texts = [t.get_text() for t in delta99.texts]
    assert "reference" in texts
    for ax in fig.axes[:3]:  # the means carry no unpaired error bars
        assert not [c for c in ax.collections if c.get_segments()]


def test_the_tornado_uses_a_symlog_axis_when_one_swing_dwarfs_the_rest():
    from test_plot_artists import sensitivity_result

    from kvsim.experiments.sensitivity import tornado_figure

    fig = tornado_figure(sensitivity_result(3))
    (ax,) = fig.axes
    assert ax.get_xscale() == "symlog"
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    bars = [p for c in ax.containers for p in getattr(c, "patches", []) if p.get_width() != 0]
    assert len(bars) >= 5  # (two sides of three rows, one side refused)
    # every drawn side of every row is wider than a few pixels (on a linear axis the
    # small swings were under a pixel beside the large one)
    assert min(p.get_window_extent(renderer).width for p in bars) > 3


def test_tiers_legend_lists_only_engines_drawn(tmp_path, figures):
    tiers = {
        "gpu": {
            "total": {"hits": 5.0, "misses": 3.0},
            "engines": [{"hits": 5.0, "misses": 3.0}, {"hits": 0.0, "misses": 0.0}],
        }
    }
    plots.tiers_plot(tiers, tmp_path / "tiers.png", "t")
    fig = figures["tiers"]
    legend = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert legend == ["engine 0"]
    assert "engine 1: every counter 0" in fig._suptitle.get_text().replace("\n", " ")


def test_capacity_png_names_each_value_beside_its_field(tmp_path, figures):
    slo = SLO("ttft_p99_s", "<=", 1.0)
    caps = [
        Capacity(slo, [3.0, 3.5, 4.0], [1.0] * 3, 9, {"tiers.nvme.enabled": b}, base_rate=1.0)
        for b in (False, True)
    ]
    df = capacity_table(caps)
    df.to_csv(tmp_path / "capacity.csv", index=False)
    plots.capacity_plot(read_capacity(tmp_path / "capacity.csv"), tmp_path / "c.png")
    (ax,) = figures["c"].axes
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["tiers.nvme.enabled = false", "tiers.nvme.enabled = true"]


# ---- a fuzz of the new forms ------------------------------------------------------------


def test_fuzz_the_joint_forms_exit_cleanly(joint, capsys):
    """Seeded random combinations of the new forms' options (some valid, most not): every
    one exits 0, 1 or 2; a refusal (2) is one line on stderr and leaves no --out folder;
    a folder is written only by a search that ran (never by --minimize)."""
    import random

    rng = random.Random(39)
    (joint / "priced.yaml").write_text(
        "base: pois.yaml\nzip:\n  cluster.engines: [3, 4]\n  cost.gpu_node_hour: [10, 5]\n"
    )
    sweeps = ["layouts.yaml", "priced.yaml", "priced.yaml", "missing.yaml", "pois.yaml"]
    fields = ["cluster.engines", "cluster.engines", "cluster.engines", "cluster.router", "seed",
              "run.warmup", "remote.servers", "tiers.host.capacity", "nope.field",
              "cost.gpu_node_hour"]  # fmt: skip
    ranges = [None, "1..4", "1..4", "2..5", "0..4", "4..1", "1.5..3", "x..y", "1 GB..2 GB"]
    slos = ["ttft_p99<=3s", "ttft_p99<=3s", "ttft_p99<=3s", "ttft_p99<=0.01s", "nonsense<=1"]
    for i in range(16):
        argv = ["capacity", "--sweep", rng.choice(sweeps), "--slo", rng.choice(slos)]
        argv += ["--reps", "1"]
        if rng.random() < 0.6:
            argv += ["--minimize", rng.choice(fields)]
            span = rng.choice(ranges)
            if span is not None:
                argv += ["--range", span]
        if rng.random() < 0.5:
            argv += ["--cheapest"]
        out = f"o{i}"
        if rng.random() < 0.5:
            argv += ["--out", out]
        if rng.random() < 0.3:
            argv += ["--json"]
        code = main(argv)
        _, err = capsys.readouterr()
        assert code in (0, 1, 2), (argv, code)
        if code == 2:  # (progress lines may come first: a refusal once the runs began)
            lines = err.strip().splitlines()
            assert [x for x in lines if "error" in x] == lines[-1:], (argv, err)
            assert lines[-1].startswith("kvsim: error: ") and "Traceback" not in err
            assert not (joint / out).exists(), argv
        wrote = (joint / out).exists()
        # (a rate search and --cheapest write --out; --minimize never does)
        assert wrote == ("--out" in argv and "--minimize" not in argv and code in (0, 1)), argv


def test_a_sweep_files_seed_count_is_the_default_replications(joint, capsys):
    # `replications: 2` in the sweep file: the search runs 2 replications unless --reps
    # says otherwise (it was silently 3, --reps' own default)
    (joint / "two.yaml").write_text(LAYOUTS + "replications: 2\n")
    argv = ("--slo", SLO_TEXT, "--minimize", "cluster.engines", "--range", "1..8", "--json")
    code, out, err = cli(capsys, "capacity", "--sweep", "two.yaml", *argv)
    assert code == 0, err
    assert [len(r["values"]) for r in json.loads(out)] == [2, 2]
    code, out, err = cli(capsys, "capacity", "--sweep", "two.yaml", *argv, "--reps", "3")
    assert code == 0, err
    assert [len(r["values"]) for r in json.loads(out)] == [3, 3]
