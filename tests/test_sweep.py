"""Sweeps: expansion, parallel runs, resume, failures, and a Dask cluster."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest

from kvsim.cli import main
from kvsim.experiments.sweep import JOURNAL, load_sweep, run_sweep

from conftest import SCENARIOS

SWEEP = f"""
name: demo
base: {SCENARIOS / "quickstart.yaml"}
grid:
  cluster.load_policy: [sync, async]
  remote.sharding: [none, per_rank]
  workload.arrivals.rate: [1/s, 2/s]
set: {{workload.requests: 300, run.warmup: 0 s, remote.servers: 8}}
replications: 2
"""


@pytest.fixture
def sweep_file(tmp_path):
    p = tmp_path / "sweep.yaml"
    p.write_text(SWEEP)
    return p


def journal_lines(out):
    return (out / JOURNAL).read_text().count("\n")


def test_2x2x2_with_2_replications_gives_16_rows_and_resumes(sweep_file, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["sweep", str(sweep_file), "--out", str(out), "--workers", "2", "--quiet"]) == 0
    df = pd.read_parquet(out / "results.parquet")
    assert len(df) == 16 and (df["status"] == "ok").all()
    assert df["run"].tolist() == list(range(16))
    for col in (
        "cluster.load_policy",
        "remote.sharding",
        "workload.arrivals.rate",
        "seed",
        "ttft_p99_s",
        "gpu_busy_frac",
        "token_source_frac.remote",
    ):
        assert col in df.columns
    assert (
        df.groupby(["cluster.load_policy", "remote.sharding", "workload.arrivals.rate"])
        .size()
        .eq(2)
        .all()
    )
    assert journal_lines(out) == 16
    first = capsys.readouterr().out
    assert "16 runs (0 reused" in first
    # a table of the 8 grid points: their key metrics, mean over the 2 seeds
    points = [line for line in first.splitlines() if line.startswith(("sync ", "async "))]
    assert len(points) == 8 and all(line.rstrip().endswith(" 2") for line in points)
    # the same command again runs nothing, says so, and gives the same table
    assert main(["sweep", str(sweep_file), "--out", str(out), "--workers", "2", "--quiet"]) == 0
    assert journal_lines(out) == 16
    assert "16 runs (16 reused" in capsys.readouterr().out
    pd.testing.assert_frame_equal(df, pd.read_parquet(out / "results.parquet"))


def test_results_do_not_depend_on_the_number_of_workers(sweep_file, tmp_path):
    sweep = load_sweep(sweep_file)
    a = run_sweep(sweep, tmp_path / "a", workers=1)
    b = run_sweep(sweep, tmp_path / "b", workers=2)
    pd.testing.assert_frame_equal(a, b)


def test_a_failing_run_is_recorded_and_the_others_finish(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(
        textwrap.dedent(f"""
        base: {SCENARIOS / "azure-sample.yaml"}
        grid:
          cluster.engines: [1, 0, 2]
        set: {{workload.limit: 50}}
    """)
    )
    df = run_sweep(load_sweep(p), tmp_path / "out", workers=1)
    assert df["status"].tolist() == ["ok", "error", "ok"]
    assert "cluster.engines" in df.loc[1, "error"] and "greater than 0" in df.loc[1, "error"]
    assert df.loc[0, "requests"] == 50


def test_an_interrupted_sweep_resumes_without_duplicates(sweep_file, tmp_path):
    sweep = load_sweep(sweep_file)
    out = tmp_path / "out"
    calls = []

    def stop_after_three(done, total):
        calls.append(done)
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep, out, workers=1, progress=stop_after_three)
    # only the journal: no results table that would look complete with 3 runs of 16
    assert journal_lines(out) == 3 and not (out / "results.parquet").exists()
    full = run_sweep(sweep, out, workers=1)
    assert len(full) == 16 and full["run_id"].is_unique
    assert journal_lines(out) == 16


def test_ctrl_c_on_a_real_sweep_then_rerun_resumes_without_duplicates(tmp_path):
    """SIGINT to the whole process group (what Ctrl-C does) while worker processes run;
    the re-run finishes the rest and every run appears once."""
    spec = tmp_path / "sweep.yaml"
    spec.write_text(
        f"base: {SCENARIOS / 'quickstart.yaml'}\ngrid:\n  cluster.engines: [1, 2, 3, 4]\n"
        "set: {workload.requests: 1500}\nreplications: 3\n"
    )
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "kvsim.cli", "sweep", str(spec), "--out", str(out)]
    proc = subprocess.Popen(
        [*cmd, "--workers", "2"],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    journal = out / JOURNAL
    while proc.poll() is None and not (journal.exists() and journal_lines(out) >= 2):
        time.sleep(0.02)  # poll until two runs are journaled (no time limit asserted)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate()
    interrupted = journal_lines(out)
    if proc.returncode == 130:  # it was interrupted part-way (not already finished)
        assert "interrupted" in err and "Traceback" not in err
        assert 2 <= interrupted < 12
        assert "run the same command again to resume" in err
        assert not (out / "results.parquet").exists()  # no table of a part of the sweep
    assert main(["sweep", str(spec), "--out", str(out), "--quiet"]) == 0
    ids = [json.loads(line)["run_id"] for line in journal.read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 12
    df = pd.read_parquet(out / "results.parquet")
    assert len(df) == 12 and df["run_id"].is_unique and (df["status"] == "ok").all()


def test_sweep_file_mistakes(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    for body, fragment in [
        ("base: nowhere.yaml\n", "not found"),
        (f"base: {SCENARIOS / 'quickstart.yaml'}\ngird: {{}}\n", "gird"),
        (f"base: {SCENARIOS / 'quickstart.yaml'}\nzip: {{a.b: [1, 2], c.d: [1]}}\n", "same length"),
        (f"base: {SCENARIOS / 'quickstart.yaml'}\nseeds: [1]\nreplications: 2\n", "not both"),
    ]:
        bad.write_text(body)
        assert main(["sweep", str(bad), "--out", str(tmp_path / "o"), "--quiet"]) == 2
        assert fragment in capsys.readouterr().err


def test_dask_local_cluster_gives_the_same_rows(tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    p = tmp_path / "s.yaml"
    p.write_text(
        textwrap.dedent(f"""
        base: {SCENARIOS / "azure-sample.yaml"}
        grid:
          cluster.engines: [1, 2]
          workload.time_scale: [0.25, 0.5]
        set: {{workload.limit: 80}}
    """)
    )
    sweep = load_sweep(p)
    local = run_sweep(sweep, tmp_path / "local", workers=1)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        assert (
            main(
                [
                    "sweep",
                    str(p),
                    "--out",
                    str(tmp_path / "dask"),
                    "--quiet",
                    "--scheduler",
                    cluster.scheduler_address,
                ]
            )
            == 0
        )
    remote = pd.read_parquet(tmp_path / "dask" / "results.parquet")
    pd.testing.assert_frame_equal(local, remote)
    assert json.loads((tmp_path / "dask" / JOURNAL).read_text().splitlines()[0])["status"] == "ok"


def test_unreachable_scheduler_is_a_clear_error(sweep_file, tmp_path, capsys):
    pytest.importorskip("dask.distributed")
    assert (
        main(
            [
                "sweep",
                str(sweep_file),
                "--out",
                str(tmp_path / "o"),
                "--quiet",
                "--scheduler",
                "tcp://127.0.0.1:1",
            ]
        )
        == 2
    )
    assert "Dask scheduler" in capsys.readouterr().err
