"""Issue 24 (sweeps, run ids, the gate): stale results, the gate with too few seeds, swept
plugin names, swept loads, the journal behind a link, resampling with a limit, bucket
spreads, and progress lines that count right. Every case runs through the CLI, tiny."""

from __future__ import annotations

import json
import os
import shutil

import pandas as pd
import pytest

from kvsim.cli import main
from kvsim.errors import InputError
from kvsim.experiments.regression import Comparison
from kvsim.experiments.regression.suite import MIN_SEEDS
from kvsim.experiments.sweep import JOURNAL, load_sweep, run_sweep

from conftest import ROOT, SCENARIOS

QS = SCENARIOS / "quickstart.yaml"
MICRO = SCENARIOS / "paper" / "micro.yaml"
ROUTER = ROOT / "examples" / "load_aware_router.py"


def mline(ts_ms: int, block: int, tokens: int = 400) -> str:
    return json.dumps(
        {"timestamp": ts_ms, "input_length": tokens, "output_length": 4, "hash_ids": [block]}
    )


def trace_folder(d, n: int = 20, *, uneven: bool = False):
    """A folder with a tiny Mooncake trace (``t.jsonl``) and a scenario replaying it;
    ``uneven``: arrivals ever further apart (a bootstrap's windows hold different counts)."""
    d.mkdir(parents=True, exist_ok=True)
    times = [50 * i * i if uneven else 500 * i for i in range(n)]
    (d / "t.jsonl").write_text("".join(mline(t, i % 5) + "\n" for i, t in enumerate(times)))
    (d / "s.yaml").write_text(
        f"extends: {QS}\nrun: {{warmup: 0 s}}\nworkload: {{kind: mooncake, path: t.jsonl}}\n"
    )
    return d


def sweep(path, out, *extra) -> int:
    return main(["sweep", str(path), "--out", str(out), "--quiet", "--workers", "1", *extra])


def last_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    err = [x for x in err if not x.startswith("kvsim: importing plugin code")]
    assert err and err[-1].startswith("kvsim: error: ") and "Traceback" not in "\n".join(err)
    return err[-1]


# ---- 5: a run id follows the content of every file the run reads --------------------------


def test_a_changed_trace_is_run_again_and_an_unchanged_one_reused(tmp_path, capsys):
    d = trace_folder(tmp_path / "a")
    (d / "sw.yaml").write_text("base: s.yaml\ngrid:\n  cluster.engines: [1, 2]\n")
    out = tmp_path / "out"
    assert sweep(d / "sw.yaml", out) == 0
    assert "2 runs (0 reused" in capsys.readouterr().out
    # a new modification time, the same content: the same run ids, the rows reused
    os.utime(d / "t.jsonl", (1, 1))
    assert sweep(d / "sw.yaml", out) == 0
    assert "2 runs (2 reused" in capsys.readouterr().out
    # the same name, another content: run again, never the old rows
    with (d / "t.jsonl").open("a") as fh:
        fh.write(mline(20_000, 9) + "\n")
    assert sweep(d / "sw.yaml", out) == 0
    assert "2 runs (0 reused" in capsys.readouterr().out
    df = pd.read_parquet(out / "results.parquet")
    assert (df["requests"] == 21).all()


def test_a_changed_plugin_file_is_run_again(tmp_path, capsys):
    d = tmp_path / "p"
    d.mkdir()
    shutil.copy(ROUTER, d / "router.py")
    (d / "sw.yaml").write_text(
        f"base: {MICRO}\nset: {{plugins: [router.py], cluster.router: load_aware, "
        "workload.requests: 20}\n"
    )
    out = tmp_path / "out"
    ids = [r.run_id for r in load_sweep(d / "sw.yaml").runs]
    assert sweep(d / "sw.yaml", out) == 0
    assert sweep(d / "sw.yaml", out) == 0
    assert "1 run (1 reused" in capsys.readouterr().out
    with (d / "router.py").open("a") as fh:
        fh.write("\nLoadAware.queue_weight = 2.0\n")
    assert [r.run_id for r in load_sweep(d / "sw.yaml").runs] != ids
    assert sweep(d / "sw.yaml", out) == 0
    assert "1 run (0 reused" in capsys.readouterr().out


def test_a_file_a_swept_value_names_is_hashed_too(tmp_path):
    d = trace_folder(tmp_path / "g")
    (d / "sw.yaml").write_text(
        f"base: {QS}\nset: {{run.warmup: 0 s}}\n"
        "grid:\n  workload: [{kind: mooncake, path: t.jsonl}]\n"
    )
    before = [r.run_id for r in load_sweep(d / "sw.yaml").runs]
    assert before == [r.run_id for r in load_sweep(d / "sw.yaml").runs]  # deterministic
    (d / "t.jsonl").write_text(mline(0, 1) + "\n" + mline(10, 2) + "\n")
    assert [r.run_id for r in load_sweep(d / "sw.yaml").runs] != before


def test_check_strict_refuses_a_trace_changed_since_the_baseline(tmp_path, capsys):
    d = trace_folder(tmp_path / "c")
    suite = d / "suite.yaml"
    suite.write_text("seeds: [0, 1, 2]\nentries:\n  - scenario: s.yaml\n    name: t\n")
    base = tmp_path / "base"
    assert main(["baseline", str(suite), "--out", str(base), "--workers", "1"]) == 0
    assert json.loads((base / "baseline.json").read_text())["entries"][0]["files"].keys() == {
        "t.jsonl"
    }
    capsys.readouterr()
    lines = (d / "t.jsonl").read_text().splitlines()
    lines[3] = mline(1500, 3, tokens=300)  # one prompt shorter: same path, same scenario hash
    (d / "t.jsonl").write_text("\n".join(lines) + "\n")
    check = ["check", str(suite), "--baseline", str(base), "--workers", "1"]
    assert main([*check, "--strict"]) == 2
    err = last_error(capsys)
    assert "entry 't'" in err and "t.jsonl changed since the baseline" in err
    main(check)  # not strict: said, not hidden
    assert "note: entry 't': file t.jsonl changed since the baseline" in capsys.readouterr().out


# ---- 6: fewer than three seeds cannot gate on intervals: means are compared, and said -------

SUITE2 = f"""
seeds: [0, 1]
entries:
  - scenario: {MICRO}
    name: micro
    set: {{workload.requests: 60}}
"""


def test_two_seeds_say_so_and_a_large_change_fails(tmp_path, capsys):
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE2)
    base = tmp_path / "base"
    assert main(["baseline", str(suite), "--out", str(base), "--workers", "1"]) == 0
    io = capsys.readouterr()
    assert "2 runs: 1 load point (of 1 entry) x 2 seeds" in io.err
    assert "note: 2 seeds per entry: too few for a 95% interval" in io.err
    assert "baseline of 1 entry, 1 load point, seeds [0, 1]" in io.out
    check = ["check", str(suite), "--baseline", str(base), "--workers", "1"]
    assert main(check) == 0  # unchanged: identical numbers pass, and the limit is said
    assert "too few for a 95% interval" in capsys.readouterr().out
    # a slower remote store: TTFT moves far beyond tolerance; never a pass
    assert main([*check, "--set", "remote.bandwidth=0.5 GiB/s"]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION micro @ 1x load: ttft_p99_s" in out and "means compared" in out


def test_a_wide_two_seed_interval_no_longer_hides_a_146_percent_change():
    # the attack: a baseline of two seeds whose p99 interval reached below 0 passed +146%
    base = {"mean": 1.0, "lo": 0.0, "hi": 13.7}
    new = {"mean": 2.46, "lo": 0.0, "hi": 30.0}
    assert not Comparison("e", 1.0, "ttft_p99_s", base, new, 0.1).failed  # intervals overlap
    c = Comparison("e", 1.0, "ttft_p99_s", base, new, 0.1, means_only=True)
    assert c.failed and "+146.0%" in c.line() and "means compared" in c.line()
    assert MIN_SEEDS == 3


def test_a_change_within_the_noise_of_three_seeds_passes_but_is_said():
    base = {"mean": 1.0, "lo": 0.2, "hi": 1.8}
    new = {"mean": 1.6, "lo": 1.0, "hi": 2.2}
    c = Comparison("e", 1.0, "ttft_p99_s", base, new, 0.1)
    assert not c.failed and c.within_noise
    assert "+60.0%" in c.noise_line() and "more seeds" in c.noise_line()
    same = Comparison("e", 1.0, "ttft_p99_s", base, dict(base), 0.1)
    assert not same.within_noise


# ---- 9: a policy name in the grid is checked before any run, named as the grid's ----------


def test_an_unknown_router_in_the_grid_is_refused_before_any_run(tmp_path, capsys, monkeypatch):
    p = tmp_path / "sw.yaml"
    p.write_text(f"base: {MICRO}\ngrid:\n  cluster.router: [round_robin, nosuch]\n")
    monkeypatch.setattr("kvsim.experiments.sweep.executor.run_one", lambda s: pytest.fail("it ran"))
    assert sweep(p, tmp_path / "out") == 2
    err = last_error(capsys)
    assert "sw.yaml: grid cluster.router=nosuch" in err and "unknown router" in err
    assert "--set" not in err
    assert not (tmp_path / "out").exists()


def test_a_router_of_a_plugin_a_configuration_does_not_list_is_refused(tmp_path, capsys):
    d = tmp_path / "u"
    d.mkdir()
    shutil.copy(ROUTER, d / "router.py")
    (d / "sw.yaml").write_text(
        f"base: {MICRO}\nset: {{cluster.router: load_aware}}\ngrid:\n  plugins: [[router.py], []]\n"
    )
    assert sweep(d / "sw.yaml", tmp_path / "out") == 2
    err = last_error(capsys)
    assert "sw.yaml: set cluster.router=load_aware" in err and "comes from plugin" in err
    assert not (tmp_path / "out").exists()


# ---- 10: sweeps and resampling --------------------------------------------------------------


def test_grid_plugins_with_a_router_in_set_runs_as_the_zip_form_does(tmp_path, capsys):
    d = tmp_path / "z"
    d.mkdir()
    shutil.copy(ROUTER, d / "router.py")
    (d / "sw.yaml").write_text(
        f"base: {MICRO}\nset: {{cluster.router: load_aware, workload.requests: 20}}\n"
        "grid:\n  plugins: [[router.py]]\n"
    )
    assert sweep(d / "sw.yaml", tmp_path / "out") == 0
    df = pd.read_parquet(tmp_path / "out" / "results.parquet")
    assert df["status"].tolist() == ["ok"]


def test_a_swept_arrivals_mapping_scales_the_warm_up(tmp_path):
    base = tmp_path / "b.yaml"
    base.write_text(
        f"extends: {MICRO}\nrun: {{warmup: 8 s}}\n"
        "workload: {requests: 40, arrivals: {process: poisson, rate: 2/s}}\n"
    )
    p = tmp_path / "sw.yaml"
    p.write_text(
        "base: b.yaml\ngrid:\n  workload.arrivals:\n"
        "    - {process: poisson, rate: 2/s}\n    - {process: constant, rate: 8/s}\n"
    )
    assert sweep(p, tmp_path / "out") == 0
    df = pd.read_parquet(tmp_path / "out" / "results.parquet")
    assert df["warmup_s"].tolist() == [8.0, 2.0]  # 4x the load: a quarter of the warm-up


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_the_journal_is_never_appended_through_a_link(tmp_path, capsys, monkeypatch, kind):
    outside = tmp_path / "precious.txt"
    outside.write_text("do not touch\n")
    p = tmp_path / "sw.yaml"
    p.write_text(f"base: {MICRO}\nset: {{workload.requests: 20}}\n")
    out = tmp_path / "out"
    out.mkdir()
    (os.symlink if kind == "symlink" else os.link)(outside, out / JOURNAL)
    monkeypatch.setattr("kvsim.experiments.sweep.executor.run_one", lambda s: pytest.fail("it ran"))
    assert sweep(p, out) == 2
    err = last_error(capsys)
    assert "runs.jsonl" in err and ("link" in err or "symlink" in err)
    assert outside.read_text() == "do not touch\n"
    # the sweep itself refuses it too (its API, and a link put there after --out's check)
    with pytest.raises(InputError, match=r"symbolic link|hard link"):
        run_sweep(load_sweep(p), out)
    assert outside.read_text() == "do not touch\n"


def test_a_resampled_trace_keeps_its_limit(tmp_path):
    d = trace_folder(tmp_path / "r", n=40, uneven=True)  # a windows draw held 17 to 33 of 20
    (d / "sw.yaml").write_text(
        "base: s.yaml\nset: {workload.limit: 20}\nseeds: [0, 1, 2, 3, 4]\n"  # auto: sessions
    )
    assert sweep(d / "sw.yaml", tmp_path / "out") == 0
    df = pd.read_parquet(tmp_path / "out" / "results.parquet")
    assert df["requests"].tolist() == [20] * 5


def test_a_bucket_spread_past_the_next_timestamp_names_the_trace_line(tmp_path, capsys):
    (tmp_path / "t.jsonl").write_text(mline(0, 1) + "\n" + mline(0, 2) + "\n" + mline(10, 3))
    s = tmp_path / "s.yaml"
    s.write_text(
        f"extends: {QS}\nrun: {{warmup: 0 s}}\n"
        "workload: {kind: mooncake, path: t.jsonl, bucket_spread: 60 s}\n"
    )
    for cmd in (["run", str(s), "--quiet"], ["trace", "stats", str(s)]):
        assert main(cmd) == 2
        err = last_error(capsys)
        assert "t.jsonl:2: workload.bucket_spread" in err and "out of time order" in err


# ---- 14: progress lines count what they say ---------------------------------------------------


def test_counts_read_right_in_the_singular(tmp_path, capsys, monkeypatch):
    p = tmp_path / "sw.yaml"
    p.write_text(f"base: {MICRO}\nset: {{workload.requests: 20}}\n")
    assert sweep(p, tmp_path / "out") == 0
    assert "1 run (0 reused" in capsys.readouterr().out
    monkeypatch.setattr("kvsim.experiments.sweep.spec.MAX_RUNS", 1)
    p.write_text(f"base: {MICRO}\ngrid:\n  cluster.engines: [1]\nreplications: 2\n")
    assert sweep(p, tmp_path / "o2") == 2
    assert "2 runs (1 value of cluster.engines x 2 seeds)" in last_error(capsys)
