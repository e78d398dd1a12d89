"""Hardening round 2 (issue 11) for sweeps, suites, baselines, the regression gate and
capacity: NaN never passes the gate, seeds are not grid keys, workers die with their
parent, baselines are checked before anything runs, grids are counted before they are
expanded, sweep folders are all-or-nothing, journals are repaired or refused, scheduler
addresses are checked first."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pandas as pd
import pytest

from kvsim.cli import main
from kvsim.errors import InputError
from kvsim.experiments import regression
from kvsim.experiments.regression import (
    CheckResult,
    Comparison,
    check_baseline,
    check_baseline_doc,
    compare,
    load_suite,
    read_baseline,
    terminal_table,
)
from kvsim.experiments.sweep import JOURNAL, RESULTS, load_sweep, run_sweep
from kvsim.experiments.sweep.cluster import parse_scheduler
from kvsim.experiments.sweep.journal import journal_line, read_journal
from kvsim.experiments.sweep.spec import MAX_RUNS

from conftest import ROOT, SCENARIOS

MICRO = SCENARIOS / "paper" / "micro.yaml"
DROP_ALL = "faults=[{kind: engine_down, engine: 0, at: 0 s, requests: drop}]"
SUITE = f"""
name: tiny
seeds: [0, 1]
entries:
  - scenario: {MICRO}
    name: micro
    set: {{workload.requests: 30, run.warmup: 0 s}}
    loads: [1.0]
"""


def one_line_error(capsys) -> str:
    """The error line (after any progress lines: `N runs: ...`)."""
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    err = err.splitlines()[-1] if err else err
    assert err.startswith("kvsim: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    suite = d / "suite.yaml"
    suite.write_text(SUITE)
    assert main(["baseline", str(suite), "--out", str(d / "base"), "--workers", "1"]) == 0
    return suite, d / "base"


# ---- class 2: NaN never passes the gate; a baseline never records NaN -------------------


def _cmp(new_mean: float, base_mean: float = 1.0, tol: float = 1e9) -> Comparison:
    base = {"mean": base_mean, "lo": base_mean, "hi": base_mean}
    new = {"mean": new_mean, "lo": new_mean, "hi": new_mean}
    return Comparison("e", 1.0, "ttft_p99_s", base, new, tol)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_metric_with_no_value_fails_the_gate_whatever_the_tolerance(value):
    c = _cmp(value)
    assert c.failed and c.missing
    table = terminal_table(CheckResult([c], []), ["ttft_p99_s"])
    assert "FAIL no value" in table and "nan" not in table.lower().replace("no value", "")
    assert "no value" in c.line() and "nan%" not in c.line()
    assert not _cmp(1.0).failed  # and a finite unchanged value still passes


def test_check_where_every_request_is_dropped_fails_not_ok_nan(tiny, capsys):
    suite, base = tiny
    rc = main(["check", str(suite), "--baseline", str(base), "--workers", "1", "--set", DROP_ALL])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "+nan%" not in out and "ok +nan" not in out
    assert "FAIL no value" in out and "FAILED" in out and "REGRESSION" in out


def test_baseline_refuses_to_record_nan(tmp_path, capsys):
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "base"
    suite.write_text(
        SUITE.replace("run.warmup: 0 s", f"run.warmup: 0 s, {DROP_ALL.replace('=', ': ')}")
    )
    assert main(["baseline", str(suite), "--out", str(out), "--workers", "1"]) == 2
    err = one_line_error(capsys)
    assert "no value" in err and "NaN" in err and "micro" in err
    assert not out.exists()


def test_a_zero_request_point_has_no_value_even_for_finite_metrics(tmp_path, capsys):
    # gpu_busy_frac and hit_ratio are 0.0, not NaN, when nothing is measured: still no value
    suite = tmp_path / "suite.yaml"
    body = SUITE.replace(
        "run.warmup: 0 s", f"run.warmup: 0 s, {DROP_ALL.replace('=', ': ')}"
    ).replace("seeds: [0, 1]", "seeds: [0, 1]\nmetrics: {gpu_busy_frac: {}, hit_ratio: {}}")
    suite.write_text(body)
    assert main(["baseline", str(suite), "--out", str(tmp_path / "b"), "--workers", "1"]) == 2
    assert "no measured request" in one_line_error(capsys)


def test_write_baseline_never_writes_nan(tmp_path):
    with pytest.raises(ValueError):
        regression.write_baseline({"entries": [], "x": math.nan}, tmp_path / "b")
    assert not (tmp_path / "b" / "baseline.json").exists()


def test_a_baseline_file_holding_nan_is_refused(tiny, tmp_path, capsys):
    suite, base = tiny
    doc = json.loads((base / "baseline.json").read_text())
    doc["entries"][0]["points"][0]["metrics"]["ttft_p99_s"]["mean"] = math.nan
    bad = tmp_path / "baseline.json"
    bad.write_text(json.dumps(doc))
    assert main(["check", str(suite), "--baseline", str(bad)]) == 2
    err = one_line_error(capsys)
    assert "entries[0].points[0].metrics.ttft_p99_s.mean" in err and "finite" in err


# ---- class 6: the baseline is checked before anything runs ------------------------------


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda d: d.pop("seeds"), "seeds: missing"),
        (lambda d: d.update(entries={}), "entries: expected a list"),
        (lambda d: d["entries"][0].update(points=[1]), "points[0]: expected an object"),
        (lambda d: d["entries"][0]["points"][0].update(load="1x"), "load: expected a number"),
        (lambda d: d["entries"][0]["points"][0].update(load=0), "load: must be > 0"),
        (lambda d: d["entries"][0]["points"][0]["metrics"].update(ttft_p99_s=[]), "ttft_p99_s"),
        (lambda d: d["entries"][0]["points"][0]["metrics"]["ttft_p50_s"].pop("hi"), "hi: missing"),
        (lambda d: d["entries"][0]["points"][0]["metrics"]["ttft_p50_s"].update(lo=9), "lo <="),
        (lambda d: d["entries"][0].update(id=7), "entries[0].id: expected text"),
        (lambda d: d["entries"][0]["points"][0].update(load=2.0), "no 1x load point"),
        (lambda d: d["entries"][0]["points"][0]["metrics"].pop("hit_ratio"), "no metric"),
    ],
)
def test_a_malformed_baseline_is_refused_before_the_suite_runs(
    tiny, tmp_path, capsys, monkeypatch, mutate, fragment
):
    suite, base = tiny
    doc = json.loads((base / "baseline.json").read_text())
    mutate(doc)
    (tmp_path / "baseline.json").write_text(json.dumps(doc))

    def no_runs(*a, **k):
        raise AssertionError("the suite ran before the baseline was checked")

    monkeypatch.setattr(regression, "measure", no_runs)
    assert main(["check", str(suite), "--baseline", str(tmp_path)]) == 2
    err = one_line_error(capsys)
    assert fragment in err


@pytest.mark.parametrize(
    "text",
    ["", "{", "[]", "null", '"x"', "[" * 100_000, '{"entries": 1e999}', "1" * 5000, "\ufeff{}"],
)
def test_baseline_text_that_is_not_a_baseline(tmp_path, text, capsys):
    f = tmp_path / "baseline.json"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_baseline(tmp_path)
    assert "\n" not in str(e.value)


def test_baseline_that_is_a_folder_or_a_fifo(tmp_path):
    (tmp_path / "a" / "baseline.json").mkdir(parents=True)
    with pytest.raises(InputError, match="folder"):
        read_baseline(tmp_path / "a")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="FIFO"):
        read_baseline(fifo)  # must not block


# ---- classes 4, 8, 10: sweep and suite files -------------------------------------------


def _sweep(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(f"base: {SCENARIOS / 'quickstart.yaml'}\n{body}")
    return p


@pytest.mark.parametrize(
    ("body", "fragments"),
    [
        ("grid: {seed: [1, 2]}\n", ("grid.seed", "seeds: [...]", "replications")),
        ("zip: {seed: [1, 2], cluster.engines: [1, 2]}\n", ("zip.seed", "seeds")),
        ("set: {seed: 3}\n", ("set.seed", "seeds")),
        ("grid: {status: [a, b]}\n", ("grid.status", "not a scenario field")),
        ("grid: {run_id: [a]}\n", ("not a scenario field",)),
        ("grid: {ttft_p99_s: [1]}\n", ("not a scenario field",)),
        ("grid: {'cluster..engines': [1]}\n", ("empty field name",)),
        ("grid: {cluster.engines: [1, 1]}\n", ("listed twice",)),
        ("zip: {cluster.engines: [1, 1], remote.servers: [2, 2]}\n", ("zip", "listed twice")),
        ("seeds: [1, 1]\n", ("seeds", "listed twice")),
        ("seeds: []\n", ("seeds",)),
        ("seeds: [-1]\n", ("seeds",)),
        ("replications: 0\n", ("replications",)),
        ("replications: 1000000000000\n", ("1,000,000,000,000 runs", "at most")),
    ],
)
def test_sweep_file_mistakes_round_2(tmp_path, capsys, body, fragments):
    out = tmp_path / "out"
    assert main(["sweep", str(_sweep(tmp_path, body)), "--out", str(out), "--quiet"]) == 2
    err = one_line_error(capsys)
    for f in fragments:
        assert f in err
    assert not out.exists()


def test_a_huge_grid_is_counted_not_expanded(tmp_path):
    keys = [
        "workload.arrivals.rate",
        "cluster.engines",
        "remote.servers",
        "remote.bandwidth",
        "remote.t0",
        "tiers.host.capacity",
        "tiers.nvme.capacity",
    ]
    grid = "\n".join(f"  {k}: [{', '.join(str(i + 1) for i in range(60))}]" for k in keys)
    p = _sweep(tmp_path, f"grid:\n{grid}\n")
    tracemalloc.start()
    try:
        with pytest.raises(InputError) as e:
            load_sweep(p)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f"{60**7:,} runs" in str(e.value) and f"{MAX_RUNS:,}" in str(e.value)
    assert peak < 50 * 2**20  # refused from the count: no expansion


def test_a_sweep_at_the_limit_still_loads(tmp_path, monkeypatch):
    monkeypatch.setattr("kvsim.experiments.sweep.spec.MAX_RUNS", 6)  # the limit, made small
    p = _sweep(tmp_path, "grid:\n  cluster.engines: [1, 2]\nreplications: 3\n")
    assert len(load_sweep(p).runs) == 6
    p = _sweep(tmp_path, "grid:\n  cluster.engines: [1, 2]\nreplications: 4\n")
    with pytest.raises(InputError, match="8 runs"):  # one over it is refused
        load_sweep(p)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ("loads: [1.0]", "loads: [0]"),
        ("loads: [1.0]", "loads: [-1]"),
        ("loads: [1.0]", "loads: [.inf]"),
        ("loads: [1.0]", "loads: [.nan]"),
        ("loads: [1.0]", "loads: [1, 1.0]"),
        ("seeds: [0, 1]", "seeds: [-1]"),
        ("seeds: [0, 1]", "seeds: [0, 0]"),
        ("seeds: [0, 1]", "seeds: [0, 1]\nmetrics: {seed: {}}"),
        ("seeds: [0, 1]", "seeds: [0, 1]\nmetrics: {engines: {}}"),
        ("seeds: [0, 1]", "seeds: [0, 1]\nmetrics: {ttft_p99_s: {rel: .inf}}"),
        ("seeds: [0, 1]", "seeds: [0, 1]\nmetrics: {ttft_p99_s: {abs: -1}}"),
    ],
)
def test_suite_numbers_round_2(tmp_path, capsys, change, fragment):
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE.replace(change, fragment))
    out = tmp_path / "out"
    assert main(["baseline", str(suite), "--out", str(out), "--workers", "1"]) == 2
    one_line_error(capsys)
    assert not out.exists()


@pytest.mark.parametrize("argv", [["--workers", "0"], ["--workers", "-2"]])
def test_worker_counts_below_one_are_refused(tmp_path, capsys, argv):
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE)
    assert main(["baseline", str(suite), "--out", str(tmp_path / "o"), *argv]) == 2
    assert "--workers" in one_line_error(capsys)
    sweep = _sweep(tmp_path, "grid: {cluster.engines: [1, 2]}\n")
    assert main(["capacity", "--sweep", str(sweep), "--slo", "ttft_p99<=2s", *argv]) == 2
    assert "--workers" in one_line_error(capsys)


@pytest.mark.parametrize("slo", ["seed<=3", "engines>=1", "ttft_p99<=nan", "hit_ratio>=inf"])
def test_slo_on_settings_or_non_finite_thresholds_is_refused(capsys, slo):
    assert main(["capacity", str(SCENARIOS / "quickstart.yaml"), "--slo", slo]) == 2
    err = one_line_error(capsys)
    assert "--slo" in err
    assert ", seed," not in err and ", engines," not in err


# ---- class 13: the sweep journal --------------------------------------------------------

TINY_SWEEP = f"""
base: {MICRO}
grid:
  cluster.load_policy: [sync, async]
set: {{workload.requests: 20, run.warmup: 0 s}}
replications: 2
"""


def test_a_torn_last_line_is_cut_and_the_next_row_is_not_lost(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(TINY_SWEEP)
    sweep = load_sweep(p)
    out = tmp_path / "out"

    def stop_after_two(done, total):
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep, out, workers=1, progress=stop_after_two)
    journal = out / JOURNAL
    lines = journal.read_bytes().splitlines(keepends=True)
    assert len(lines) == 2
    journal.write_bytes(lines[0] + lines[1][: len(lines[1]) // 2])  # torn mid-row
    assert len(read_journal(out)) == 1  # the torn tail is not a row
    df = run_sweep(sweep, out, workers=1)
    assert len(df) == 4 and df["run_id"].is_unique and (df["status"] == "ok").all()
    rows = [json.loads(x) for x in journal.read_text().splitlines()]  # every line parses
    assert len(rows) == 4 and len({r["run_id"] for r in rows}) == 4
    # a complete last row missing only its newline is kept, and the next row starts anew
    kept = journal.read_bytes().splitlines(keepends=True)[:3]
    journal.write_bytes(b"".join(kept).rstrip(b"\n"))
    assert len(read_journal(out)) == 3
    assert len(run_sweep(sweep, out, workers=1)) == 4
    rows = [json.loads(x) for x in journal.read_text().splitlines()]
    assert len(rows) == 4 and len({r["run_id"] for r in rows}) == 4


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"[1, 2]\n", "must be a JSON object"),
        (b'{"status": "ok"}\n', "run_id"),
        (b'{"run_id": 5, "status": "ok"}\n', "run_id"),
        (b'{"run_id": "x"}\n', "status"),
        (b"\xff\xfe{}\n", "UTF-8"),
        (b"not json\n", "not a JSON row"),
        (journal_line({"run_id": "x", "status": "ok"}).encode() + b"[" * 200_000 + b"\n", "JSON"),
    ],
)
def test_a_damaged_journal_is_refused_naming_file_and_line(tmp_path, capsys, content, fragment):
    p = tmp_path / "s.yaml"
    p.write_text(TINY_SWEEP)
    out = tmp_path / "out"
    out.mkdir()
    (out / JOURNAL).write_bytes(journal_line({"run_id": "a", "status": "ok"}).encode() + content)
    assert main(["sweep", str(p), "--out", str(out), "--quiet", "--workers", "1"]) == 2
    err = one_line_error(capsys)
    assert f"{JOURNAL}:2" in err or f"{JOURNAL}:3" in err
    assert fragment in err
    assert sorted(x.name for x in out.iterdir()) == [JOURNAL]  # nothing else written


def test_a_journal_that_is_a_folder(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text(TINY_SWEEP)
    out = tmp_path / "out"
    (out / JOURNAL).mkdir(parents=True)
    assert main(["sweep", str(p), "--out", str(out), "--quiet"]) == 2
    assert "folder" in one_line_error(capsys)


# ---- class 9 (sweeps): nothing half-written ---------------------------------------------


def test_a_failed_table_write_leaves_the_old_pair_and_no_temp_files(tmp_path, capsys, monkeypatch):
    p = tmp_path / "s.yaml"
    p.write_text(TINY_SWEEP)
    out = tmp_path / "out"
    assert main(["sweep", str(p), "--out", str(out), "--quiet", "--workers", "1"]) == 0
    before = {n: (out / n).read_bytes() for n in ("results.parquet", "results.csv")}
    # a stale temporary table of a dead process is cleaned by the next run
    (out / ".results.csv.tmp-999999999").write_text("junk")

    def full_disk(self, path, *a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", full_disk)
    assert main(["sweep", str(p), "--out", str(out), "--quiet", "--retry-failed"]) == 2
    assert "No space left" in one_line_error(capsys)
    assert {n: (out / n).read_bytes() for n in before} == before
    assert sorted(x.name for x in out.iterdir()) == sorted([JOURNAL, "results.csv", RESULTS])


def test_an_interrupt_before_any_run_leaves_no_folder(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(TINY_SWEEP)

    def stop_at_once(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(load_sweep(p), tmp_path / "out", workers=1, progress=stop_at_once)
    assert not (tmp_path / "out").exists()


# ---- class 14 (sweeps): scheduler addresses ---------------------------------------------


@pytest.mark.parametrize(
    ("address", "fragment"),
    [
        ("tcp://127.0.0.1:99999", "out of range"),
        ("tcp://127.0.0.1:0", "out of range"),
        ("tcp://127.0.0.1", "no port"),
        ("127.0.0.1", "no port"),
        ("tls://127.0.0.1:8786", "tls://"),
        ("inproc://10.0.0.1/1234/1", "inproc://"),
        ("ucx://host:1", "ucx://"),
        ("scheduler", "no port"),
        ("", "not an address"),
        ("tcp://:8786", "no host"),
        ("tcp://host:port", "bad port"),
        ("tcp://h:1/path", "not an address"),
        ("tcp://a b:1", "not an address"),
        ("tcp://\x1b[31mred:1", "not an address"),
    ],
)
def test_malformed_scheduler_addresses_are_refused_before_any_work(
    tmp_path, capsys, monkeypatch, address, fragment
):
    p = tmp_path / "s.yaml"
    p.write_text(TINY_SWEEP)
    monkeypatch.setattr(
        "kvsim.experiments.sweep.load_sweep",
        lambda *a: (_ for _ in ()).throw(AssertionError("loaded before the address check")),
    )
    out = tmp_path / "out"
    assert main(["sweep", str(p), "--out", str(out), "--quiet", "--scheduler", address]) == 2
    err = one_line_error(capsys)
    assert fragment in err and "--scheduler" in err and "\x1b" not in err
    assert not out.exists()


def test_well_formed_scheduler_addresses_parse():
    assert parse_scheduler("tcp://10.0.0.5:8786") == ("10.0.0.5", 8786)
    assert parse_scheduler("localhost:8786") == ("localhost", 8786)
    assert parse_scheduler("tcp://[::1]:8786") == ("::1", 8786)


def test_an_unreachable_scheduler_leaves_no_files(tmp_path, capsys):
    pytest.importorskip("dask.distributed")
    p = tmp_path / "s.yaml"
    p.write_text(TINY_SWEEP)
    out = tmp_path / "out"
    rc = main(["sweep", str(p), "--out", str(out), "--quiet", "--scheduler", "tcp://127.0.0.1:1"])
    assert rc == 2 and "Dask scheduler" in one_line_error(capsys)
    assert not out.exists()
    out.mkdir()  # an existing empty folder gains no empty journal or tables either
    assert main(["sweep", str(p), "--out", str(out), "--quiet", "--scheduler", "127.0.0.1:1"]) == 2
    assert list(out.iterdir()) == []


# ---- class 5: SIGTERM like Ctrl-C; workers die with their parent ------------------------

SLOW_SWEEP = f"""
base: {SCENARIOS / "quickstart.yaml"}
grid:
  cluster.engines: [1, 2, 3, 4]
set: {{workload.requests: 3000}}
replications: 3
"""


def _children(pid: int) -> set[int]:
    kids = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.add(int(d.name))
    return kids


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _start_sweep(tmp_path: Path) -> tuple[subprocess.Popen, set[int], Path]:
    """A sweep on two workers, its stderr in a file (an orphaned worker holding a pipe
    open would hang the test instead of failing it)."""
    spec = tmp_path / "sweep.yaml"
    spec.write_text(SLOW_SWEEP)
    out = tmp_path / "out"
    err = (tmp_path / "stderr.txt").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            *("-m", "kvsim.cli", "sweep", str(spec), "--out", str(out), "--workers", "2"),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=err,
        start_new_session=True,
    )
    err.close()
    workers: set[int] = set()
    for _ in range(3000):  # until both workers exist (bounded polls, no time asserted)
        if proc.poll() is not None:
            break
        workers = _children(proc.pid)
        if len(workers) >= 2:
            break
        time.sleep(0.02)
    return proc, workers, out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_workers_exit_when_the_sweep_is_killed(tmp_path):
    proc, workers, _ = _start_sweep(tmp_path)
    if proc.poll() is not None:
        pytest.skip("the sweep finished before it could be killed")
    assert len(workers) >= 2
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    for _ in range(200):  # the workers poll their parent every 0.2 s
        if not any(_running(w) for w in workers):
            break
        time.sleep(0.05)
    alive = [w for w in workers if _running(w)]
    for w in alive:  # do not leave them behind if the test fails
        os.kill(w, signal.SIGKILL)
    assert not alive, f"orphaned workers: {alive}"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_sigterm_stops_a_sweep_like_ctrl_c(tmp_path):
    proc, workers, out = _start_sweep(tmp_path)
    if proc.poll() is not None:
        pytest.skip("the sweep finished before it could be stopped")
    os.kill(proc.pid, signal.SIGTERM)  # the parent only, as a service manager does
    try:
        proc.wait(timeout=300)  # a guard against a hang, not a timing assertion
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    err = (tmp_path / "stderr.txt").read_text()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    for _ in range(200):
        if not any(_running(w) for w in workers):
            break
        time.sleep(0.05)
    assert not [w for w in workers if _running(w)]
    if (out / JOURNAL).exists():  # what finished is kept, as after Ctrl-C; no table of part
        assert not (out / RESULTS).exists() and "again to resume" in err


def test_check_baseline_doc_accepts_a_real_baseline(tiny):
    suite, base = tiny
    doc = read_baseline(base)
    check_baseline_doc(doc, "x")
    s = load_suite(suite)
    new = json.loads(json.dumps(doc))
    assert not compare(s, doc, new).failures


# ---- our own attack round after the fixes: new cases of the same classes ----------------


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("grid:\n  cluster: [{engines: 1}]\n  cluster.engines: [2]\n", "set twice"),
        ("grid: {cluster.engines: [1]}\nset: {cluster: {engines: 3}}\n", "set twice"),
        ("grid:\n  'cluster. engines': [2]\n", "spaces around a field name"),
        ("grid:\n  source: [a]\n", "not a scenario field"),
        ('grid:\n  "\\e[31mred": [1]\n', "not a scenario field"),
    ],
)
def test_attack_round_sweep_keys(tmp_path, capsys, body, fragment):
    out = tmp_path / "out"
    assert main(["sweep", str(_sweep(tmp_path, body)), "--out", str(out), "--quiet"]) == 2
    err = one_line_error(capsys)
    assert fragment in err and "\x1b" not in err
    assert not out.exists()


def test_attack_round_odd_grid_values_make_a_parquet_table(tmp_path, capsys):
    # a YAML date and an integer beyond 64 bits: each run fails cleanly and the table of
    # those rows still writes (one type per column)
    p = tmp_path / "s.yaml"
    p.write_text(
        f"base: {MICRO}\ngrid:\n  workload.requests: [2020-01-01, {10**30}]\n"
        "set: {run.warmup: 0 s}\n"
    )
    out = tmp_path / "out"
    # failed runs: exit 2, naming them (issue 14); the table is still written
    assert main(["sweep", str(p), "--out", str(out), "--quiet", "--workers", "1"]) == 2
    assert "2 of 2 runs failed (runs 0, 1)" in capsys.readouterr().err
    df = pd.read_parquet(out / RESULTS)
    assert df["status"].tolist() == ["error", "error"]
    assert df["workload.requests"].tolist() == ['"2020-01-01"', str(10**30)]


def test_attack_round_a_journal_with_a_bom_and_crlf_resumes(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(TINY_SWEEP)
    sweep = load_sweep(p)
    out = tmp_path / "out"
    run_sweep(sweep, out, workers=1)
    journal = out / JOURNAL
    journal.write_bytes(b"\xef\xbb\xbf" + journal.read_bytes().replace(b"\n", b"\r\n"))
    assert len(read_journal(out)) == 4  # an editor's BOM and line ends are not damage


def test_attack_round_a_read_only_journal_is_refused_before_any_run(tmp_path, capsys, monkeypatch):
    p = tmp_path / "s.yaml"
    p.write_text(TINY_SWEEP)
    out = tmp_path / "out"
    out.mkdir()
    (out / JOURNAL).write_text("")
    (out / JOURNAL).chmod(0o444)
    real_access = os.access
    monkeypatch.setattr(  # as for a user who is not root
        os, "access", lambda f, mode: False if str(f).endswith(JOURNAL) else real_access(f, mode)
    )
    monkeypatch.setattr("kvsim.experiments.sweep.executor.run_one", lambda s: pytest.fail("it ran"))
    assert main(["sweep", str(p), "--out", str(out), "--quiet", "--workers", "1"]) == 2
    assert "cannot write" in one_line_error(capsys)


def test_attack_round_a_suite_is_counted_before_its_scenarios_load(tmp_path, capsys):
    loads = ", ".join(str(1 + i / 1e6) for i in range(1001))
    seeds = ", ".join(str(i) for i in range(100))
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"seeds: [{seeds}]\nentries:\n  - scenario: {MICRO}\n    loads: [{loads}]\n")
    assert main(["baseline", str(suite), "--out", str(tmp_path / "o")]) == 2
    err = one_line_error(capsys)
    assert "100,100 runs" in err and "at most 100,000" in err


def test_attack_round_a_run_refused_at_a_tiny_load_names_the_suite(tmp_path, capsys):
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE.replace("loads: [1.0]", "loads: [1e-300]"))
    assert main(["baseline", str(suite), "--out", str(tmp_path / "o"), "--workers", "1"]) == 2
    err = one_line_error(capsys)
    assert "suite.yaml: entry 'micro' @ 1e-300x load" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_attack_round_sigterm_and_sighup_interrupt_like_ctrl_c(sig):
    from kvsim.cli.common import signals_as_interrupt

    if not hasattr(signal, sig):
        pytest.skip(f"no {sig} here")
    before = signal.getsignal(getattr(signal, sig))
    with pytest.raises(KeyboardInterrupt), signals_as_interrupt():
        os.kill(os.getpid(), getattr(signal, sig))
        for _ in range(1000):  # the handler runs at the next bytecode boundary
            time.sleep(0.001)
    assert signal.getsignal(getattr(signal, sig)) == before  # restored afterwards


def test_attack_round_a_seed_override_in_a_suite_is_refused_not_ignored(tiny, tmp_path, capsys):
    # the runs take the suite's seeds, so a seed override would be silently ignored
    suite, base = tiny
    assert main(["check", str(suite), "--baseline", str(base), "--set", "seed=5"]) == 2
    err = one_line_error(capsys)
    assert "--set seed=5" in err and "seeds" in err
    bad = tmp_path / "suite.yaml"
    bad.write_text(SUITE.replace("run.warmup: 0 s}", "run.warmup: 0 s, seed: 5}"))
    assert main(["baseline", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "entries[0]" in (err := one_line_error(capsys)) and "set.seed" in err


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_attack_round_a_killed_worker_is_one_line_and_keeps_what_finished(tmp_path):
    proc, workers, out = _start_sweep(tmp_path)
    if proc.poll() is not None or not workers:
        pytest.skip("the sweep finished before a worker could be killed")
    os.kill(min(workers), signal.SIGKILL)  # e.g. the kernel's out-of-memory killer
    try:
        proc.wait(timeout=300)  # a guard against a hang, not a timing assertion
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    err = (tmp_path / "stderr.txt").read_text().strip()
    assert proc.returncode == 2 and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith("kvsim: error: --workers 2: a worker process")
    for _ in range(200):
        if not any(_running(w) for w in workers):
            break
        time.sleep(0.05)
    assert not [w for w in workers if _running(w)]
    if (out / JOURNAL).exists():  # the journal keeps what finished; no table of a part
        assert not (out / RESULTS).exists()


# ---- round 2 (attacker): scheduler handshakes, relative paths, tamper-evident journals,
# ---- tables only when complete, guarded and locked folders, consistent baselines, keys


@contextlib.contextmanager
def _fake_scheduler(reply: bytes | None):
    """A loopback server that accepts connections and answers ``reply`` (or nothing)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            held.append(conn)
            if reply is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(reply)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield f"tcp://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        t.join(5)
        for c in held:
            c.close()
        srv.close()


@pytest.mark.parametrize(
    "reply", [None, b"HTTP/1.1 400 Bad Request\r\n\r\n"], ids=["silent", "http"]
)
def test_a_peer_that_is_not_a_dask_scheduler_is_one_line_and_no_folder(
    tmp_path, capsys, monkeypatch, reply
):
    pytest.importorskip("dask.distributed")
    from kvsim.experiments.sweep import cluster as sweep_mod

    monkeypatch.setattr(sweep_mod, "CONNECT_TIMEOUT", 0.5)  # the hang is bounded by this
    p = tmp_path / "s.yaml"
    p.write_text(TINY_SWEEP)
    out = tmp_path / "out"
    result: list[int] = []
    with _fake_scheduler(reply) as address:
        argv = ["sweep", str(p), "--out", str(out), "--quiet", "--scheduler", address]
        t = threading.Thread(target=lambda: result.append(main(argv)), daemon=True)
        t.start()
        t.join(120)  # a guard that turns a hang into a failure, not a timing assertion
    assert not t.is_alive(), "the sweep hangs on a peer that never answers"
    assert result == [2]
    err = one_line_error(capsys)
    assert "not a Dask scheduler" in err and "--scheduler" in err
    assert not out.exists()


def _trace_folder(d: Path, requests: int) -> Path:
    """A folder with a sweep's base scenario whose own trace is missing, and a trace."""
    d.mkdir(parents=True)
    lines = (ROOT / "traces" / "sample_chat.jsonl").read_text().splitlines()[:requests]
    (d / "t.jsonl").write_text("\n".join(lines) + "\n")
    text = (SCENARIOS / "mooncake-sample.yaml").read_text()
    (d / "base.yaml").write_text(text.replace("../traces/sample_chat.jsonl", "missing.jsonl"))
    (d / "sw.yaml").write_text(
        "base: base.yaml\nset: {workload.path: t.jsonl}\ngrid:\n  cluster.engines: [1, 2]\n"
    )
    return d


def test_relative_paths_in_a_sweep_follow_the_sweep_file_not_the_current_folder(
    tmp_path, monkeypatch
):
    a = _trace_folder(tmp_path / "a", 20)
    c = _trace_folder(tmp_path / "c", 30)  # the same sweep text, another trace
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    sa = load_sweep(a / "sw.yaml")  # the base's own trace is missing: the set replaces it
    assert dict(sa.runs[0].fixed)["workload.path"] == str((a / "t.jsonl").resolve())
    sc = load_sweep(c / "sw.yaml")
    assert {r.run_id for r in sa.runs}.isdisjoint(r.run_id for r in sc.runs)
    monkeypatch.chdir(a)
    assert [r.run_id for r in load_sweep("sw.yaml").runs] == [r.run_id for r in sa.runs]
    # grid and zip values too, and `workload: {path: ...}` written as a mapping
    (a / "g.yaml").write_text(
        f"base: {SCENARIOS / 'mooncake-sample.yaml'}\ngrid:\n  workload.path: [t.jsonl]\n"
        "zip:\n  timing.table: [x.csv]\n"
    )
    g = load_sweep(a / "g.yaml")
    assert dict(g.runs[0].params)["workload.path"] == str((a / "t.jsonl").resolve())
    assert dict(g.runs[0].params)["timing.table"] == str((a / "x.csv").resolve())
    (a / "g.yaml").write_text(
        "base: base.yaml\nset: {workload: {kind: mooncake, path: t.jsonl}}\n"
        "grid:\n  cluster.engines: [1, 2]\n"
    )
    g = load_sweep(a / "g.yaml")
    assert dict(g.runs[0].fixed)["workload"]["path"] == str((a / "t.jsonl").resolve())


def test_relative_paths_in_a_suite_entry_set_follow_the_suite_file(tmp_path, monkeypatch):
    a = _trace_folder(tmp_path / "a", 20)
    (a / "suite.yaml").write_text(
        "seeds: [0]\nentries:\n  - scenario: base.yaml\n    set: {workload.path: t.jsonl}\n"
    )
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    suite = load_suite(a / "suite.yaml")
    assert dict(suite.entries[0].overrides)["workload.path"] == str((a / "t.jsonl").resolve())
    monkeypatch.chdir(a)
    assert load_suite("suite.yaml").entries[0].digest == suite.entries[0].digest


@pytest.fixture
def finished_sweep(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(TINY_SWEEP)
    out = tmp_path / "out"
    assert main(["sweep", str(p), "--out", str(out), "--quiet", "--workers", "1"]) == 0
    return p, out


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda r: r.update(ttft_p99_s=123.0), "checksum does not match"),
        (lambda r: r.update(status="weird"), "checksum does not match"),
        (lambda r: r.pop("check"), "without its checksum"),
        (lambda r: (r.update(status="weird"), r.update(check=_check(r))), "neither ok nor"),
        (lambda r: (r.update(seed=r["seed"] + 7), r.update(check=_check(r))), "not the seed"),
        (
            lambda r: (r.update({"cluster.load_policy": "x"}), r.update(check=_check(r))),
            "cluster.load_policy",
        ),
    ],
)
def test_an_edited_journal_row_is_refused_naming_its_line(finished_sweep, capsys, edit, fragment):
    p, out = finished_sweep
    journal = out / JOURNAL
    lines = journal.read_text().splitlines(keepends=True)
    row = json.loads(lines[1])
    edit(row)
    lines[1] = json.dumps(row) + "\n"
    journal.write_text("".join(lines))
    before = journal.read_bytes()
    assert main(["sweep", str(p), "--out", str(out), "--quiet", "--workers", "1"]) == 2
    err = one_line_error(capsys)
    assert f"{JOURNAL}:2" in err and fragment in err and "delete this line" in err
    assert journal.read_bytes() == before
    # deleting the line re-runs that run, and the table is whole again
    journal.write_text("".join(lines[:1] + lines[2:]))
    assert main(["sweep", str(p), "--out", str(out), "--quiet", "--workers", "1"]) == 0
    df = pd.read_parquet(out / RESULTS)
    assert len(df) == 4 and set(df["status"]) == {"ok"} and "check" not in df.columns


def _check(row: dict) -> str:
    from kvsim.experiments.sweep.journal import _row_check

    return _row_check({k: v for k, v in row.items() if k != "check"})


def test_an_interrupted_sweep_leaves_no_table_that_looks_complete(finished_sweep):
    p, out = finished_sweep
    assert (out / RESULTS).exists() and (out / "results.csv").exists()
    p.write_text(TINY_SWEEP.replace("replications: 2", "replications: 3"))  # 2 more runs

    def stop_after_one_more(done, total):
        if done == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(load_sweep(p), out, workers=1, progress=stop_after_one_more)
    assert not (out / RESULTS).exists() and not (out / "results.csv").exists()
    assert (out / JOURNAL).read_text().count("\n") == 5
    assert len(run_sweep(load_sweep(p), out, workers=1)) == 6
    assert len(pd.read_csv(out / "results.csv")) == 6


def test_the_interrupt_message_says_a_rerun_resumes(finished_sweep, capsys, monkeypatch):
    from kvsim.experiments import sweep as sweep_mod

    p, out = finished_sweep

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_mod, "run_sweep", interrupted)
    assert main(["sweep", str(p), "--out", str(out), "--quiet"]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "again to resume" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "foreign", ["results.csv.bak", "notes.txt", "summary.json", "requests.parquet"]
)
def test_a_sweep_out_folder_holding_other_files_is_refused(tmp_path, capsys, foreign):
    p = tmp_path / "s.yaml"
    p.write_text(TINY_SWEEP)
    out = tmp_path / "out"
    out.mkdir()
    (out / foreign).write_text("mine")
    assert main(["sweep", str(p), "--out", str(out), "--quiet", "--workers", "1"]) == 2
    err = one_line_error(capsys)
    assert "--out" in err and foreign in err
    assert sorted(x.name for x in out.iterdir()) == [foreign]


def test_a_second_sweep_on_a_locked_folder_is_refused(finished_sweep, capsys):
    fcntl = pytest.importorskip("fcntl")
    from kvsim.experiments.sweep.journal import LOCK

    p, out = finished_sweep
    assert not (out / LOCK).exists()  # a finished sweep leaves no lock file
    before = (out / JOURNAL).read_bytes()
    with (out / LOCK).open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running sweep holds it
        assert main(["sweep", str(p), "--out", str(out), "--quiet", "--retry-failed"]) == 2
        assert "another kvsim sweep" in one_line_error(capsys)
    assert (out / JOURNAL).read_bytes() == before
    assert main(["sweep", str(p), "--out", str(out), "--quiet"]) == 0  # a stale lock file


def _baseline_doc(tiny) -> dict:
    return json.loads((tiny[1] / "baseline.json").read_text())


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda d: d["entries"].append(d["entries"][0]), "entries[1].id: entry 'micro' is listed"),
        (
            lambda d: d["entries"][0]["points"].append(d["entries"][0]["points"][0]),
            "entries[0].points[1].load: load point 1 is listed twice",
        ),
        (
            lambda d: d["entries"][0]["points"][0]["metrics"]["ttft_p99_s"]["values"].pop(),
            "metrics.ttft_p99_s.values: 1 values for 2 seeds",
        ),
        (
            lambda d: d["entries"][0]["points"][0]["metrics"]["ttft_p99_s"].update(
                mean=sum(d["entries"][0]["points"][0]["metrics"]["ttft_p99_s"]["values"]),
                hi=1e9,
            ),
            "metrics.ttft_p99_s.mean",
        ),
        (
            lambda d: d["entries"][0]["points"][0]["metrics"]["ttft_p99_s"].update(hi=1e301),
            "metrics.ttft_p99_s.hi: 1e+301 is out of range",
        ),
    ],
)
def test_an_inconsistent_baseline_is_refused_with_its_field(tiny, edit, fragment):
    doc = _baseline_doc(tiny)
    check_baseline_doc(doc, "b.json")  # the real one passes
    edit(doc)
    with pytest.raises(InputError, match=re.escape(fragment)):
        check_baseline_doc(doc, "b.json")


def test_a_baseline_of_another_suite_name_is_noted_and_refused_with_strict(tiny):
    suite = load_suite(tiny[0])
    doc = _baseline_doc(tiny)
    assert not any("suite" in n for n in check_baseline(suite, doc))
    doc["suite"] = "other"
    assert any("suite 'other'" in n for n in check_baseline(suite, doc))
    with pytest.raises(InputError, match="suite 'other'"):
        check_baseline(suite, doc, strict=True)


@pytest.mark.parametrize(
    ("key", "fragment"),
    [
        ("seed.x", "seed holds a single value"),
        ("name.y", "name holds a single value"),
        ("cluster.engines.z", "cluster.engines holds a single value"),
        ("cluster.engins", "cluster has no field 'engins'"),
    ],
)
def test_a_key_below_a_value_or_naming_no_field_is_refused_before_any_run(
    tmp_path, capsys, key, fragment
):
    out = tmp_path / "out"
    body = f"grid: {{{key}: [1, 2]}}\n"
    assert main(["sweep", str(_sweep(tmp_path, body)), "--out", str(out), "--quiet"]) == 2
    err = one_line_error(capsys)
    assert f"grid.{key}" in err and fragment in err
    assert not out.exists()


def test_a_signal_while_workers_fork_stops_the_command_after_the_fork():
    """A signal that lands while interrupts are held (worker processes forking: logging's
    at-fork hook would print the KeyboardInterrupt as "Exception ignored" and drop it) is
    counted at once and raised as the block ends, exactly once."""
    from kvsim.cli.common import signals_as_interrupt
    from kvsim.interrupts import held_interrupts, signals

    with signals_as_interrupt():
        before = signals()
        reached_end_of_block = False
        with pytest.raises(KeyboardInterrupt), held_interrupts():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)  # the handler runs here: counted, not raised
            assert signals() == before + 1
            reached_end_of_block = True
        assert reached_end_of_block
        with held_interrupts():  # nothing pending any more: a quiet block
            pass
