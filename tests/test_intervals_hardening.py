"""Intervals that cannot be wrong, duplicates that cannot silently win, and YAML keys shown
as written (issue 24, points 6, 8 and part of 14). Through the CLI where the user meets
them; tiny traces, so each run takes a moment."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from kvsim.cli import main
from kvsim.results import uncertainty
from kvsim.results.uncertainty import (
    IDENTICAL,
    ONE_REPLICATION,
    mean_interval,
    percentile_cis,
)

from conftest import ROOT
from test_planning import plans as _plans  # noqa: F401 (the fixture `plans`)

AZURE = ROOT / "scenarios" / "azure-sample.yaml"
T0 = datetime(2023, 11, 16, 18)


def azure_trace(path: Path, rows: list[tuple[float, int]]) -> Path:
    """An Azure CSV of (seconds after T0, prompt tokens) rows."""
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    lines += [f"{(T0 + timedelta(seconds=t)).isoformat(sep=' ')},{n},10" for t, n in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def scenario(tmp: Path, trace: Path) -> Path:
    p = tmp / "s.yaml"
    p.write_text(
        f"extends: {AZURE}\nname: t\nworkload:\n  kind: azure\n  path: {trace}\n"
        "  time_scale: 1\nrun:\n  warmup: 0 s\n"
    )
    return p


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["run", *argv, "--json", "--quiet"]) == 0
    return json.loads(capsys.readouterr().out)


# ---- intervals on one run's requests ---------------------------------------------------


def test_alternating_short_and_long_prompts_get_an_interval_with_width(tmp_path, capsys):
    """200 requests alternating 1k- and 16k-token prompts on an idle engine: two TTFTs
    only, half of each. The old circular bootstrap's block length (24) was a multiple of
    the period (2): every resample held exactly 100 of each, so the median came out the
    same every time, a zero-width interval at the midpoint. The true median is anywhere
    between the two values; runs of random length (stationary bootstrap) say so."""
    trace = azure_trace(
        tmp_path / "alt.csv", [(2 * i, 1000 if i % 2 else 16000) for i in range(200)]
    )
    s = run_json(capsys, str(scenario(tmp_path, trace)))
    lo, hi = s["ttft_p50_s_lo"], s["ttft_p50_s_hi"]
    assert hi > lo
    assert lo <= s["ttft_p50_s"] <= hi
    # p99 lies among the 100 identical long prompts: no spread there, zero width is right
    assert s["ttft_p99_s_lo"] == s["ttft_p99_s_hi"] == s["ttft_max_s"]


def test_a_large_run_interval_never_goes_below_zero(tmp_path, capsys, monkeypatch):
    """Past LARGE requests the interval was estimate +- 1.96 s.d. of 40 resamples: on a
    run that idles, then queues a burst (TTFTs 0.3 s, then climbing to 18 s), the median's
    interval went to -6.3 s and the p99's above the largest TTFT measured. LARGE is
    lowered so that 120 requests take that path."""
    monkeypatch.setattr(uncertainty, "LARGE", 50)
    rows = [(10.0 * i if i < 60 else 600.0, 16000) for i in range(120)]
    trace = azure_trace(tmp_path / "burst.csv", rows)
    s = run_json(capsys, str(scenario(tmp_path, trace)))
    for q in (50, 99):
        lo, hi = s[f"ttft_p{q}_s_lo"], s[f"ttft_p{q}_s_hi"]
        assert 0 < lo <= s[f"ttft_p{q}_s"] <= hi <= s["ttft_max_s"]


def test_percentile_interval_is_within_the_values_and_never_narrower_than_independence():
    rng = np.random.default_rng(5)
    # a period-2 series at many lengths: no zero-width median interval
    for n in (100, 200, 400, 1000, 5000):
        v = np.tile([0.03, 0.3], n // 2)
        lo, hi = percentile_cis(v, (50,), np.random.default_rng(n))[50]
        assert (lo, hi) == (0.03, 0.3)
    # independent values: the interval holds the order-statistic interval
    v = rng.exponential(1.0, 1000)
    s = np.sort(v)
    lo, hi = percentile_cis(v, (99,), rng)[99]
    os_lo, os_hi = uncertainty.order_statistic_ci(s, 99)
    assert lo <= os_lo and hi >= os_hi and hi <= s[-1]


# ---- intervals over replications: one mechanism -----------------------------------------


def test_mean_interval_one_replication_identical_and_clipped():
    one = mean_interval([2.5])
    assert not one.ok and one.note == ONE_REPLICATION and math.isnan(one.lo)
    assert one.text() == "(one replication: no interval)" and "± 0" not in one.text()
    same = mean_interval([3.0, 3.0, 3.0])
    assert same.note == IDENTICAL and (same.lo, same.hi) == (3.0, 3.0)
    two = mean_interval([0.1, 2.0])  # t = 12.7 with two seeds: half-width 12 > mean
    assert two.ok and two.lo == 0.0 and two.hi > 2.0
    assert two.text().startswith("(95% interval 0 ..")
    assert mean_interval([0.1, 2.0], nonnegative=False).lo < 0
    assert mean_interval([3.0, 3.2, 3.1]).text() == "± 0.248"  # three digits, no exponent
    assert mean_interval([0.8, 170.0]).text() == "(95% interval 0 .. 1,160)"


def test_a_baseline_never_stores_a_negative_bound(tmp_path, capsys):
    """Three seeds of a bursty trace, resampled per seed: the p99 and queue-wait
    bounds of Student t over three values went below 0; a TTFT cannot."""
    rows = [(10.0 * i if i < 40 else 400.0 + 0.05 * i, 16000) for i in range(80)]
    trace = azure_trace(tmp_path / "b.csv", rows)
    sc = scenario(tmp_path, trace)
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"seeds: [0, 1, 2]\nmetrics:\n  ttft_p50_s: {{rel: 0.1}}\n  ttft_p99_s: {{rel: 0.1}}\n"
        f"  queue_wait_p99_s: {{rel: 0.1}}\nentries:\n  - scenario: {sc}\n"
    )
    assert main(["baseline", str(suite), "--out", str(tmp_path / "base"), "--workers", "1"]) == 0
    doc = json.loads((tmp_path / "base" / "baseline.json").read_text())
    for entry in doc["entries"]:
        for point in entry["points"]:
            for m in point["metrics"].values():
                assert 0 <= m["lo"] <= m["mean"] <= m["hi"]


# ---- duplicates that silently won ------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        "TIMESTAMP,ContextTokens,GeneratedTokens,ContextTokens",
        "TIMESTAMP,ContextTokens,GeneratedTokens, contexttokens",
        "TIMESTAMP,timestamp,ContextTokens,GeneratedTokens",
        "TIMESTAMP,ContextTokens,GeneratedTokens,note,Note",
    ],
)
def test_an_azure_header_naming_a_column_twice_is_refused(tmp_path, capsys, header):
    """Round 3 refused it by accident (rows longer than the header); the columns were
    then picked by their first name, and a second ContextTokens column was read by no
    one. Any column named twice, up to case and spaces, is refused at line 1."""
    f = tmp_path / "dup.csv"
    f.write_text(f"{header}\n2023-11-16 18:00:00,10,1,99999,5\n")
    assert main(["run", str(AZURE), "--set", f"workload.path={f}", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"kvsim: error: {f}:1: header names column") and "twice" in err


def test_a_timing_table_giving_one_point_twice_is_refused(tmp_path, capsys):
    """The second row used to win silently. Comment lines no longer shift the line
    numbers given (they were counted out of the file's lines)."""
    (tmp_path / "t.csv").write_text(
        "# measured\nnew_tokens,cached_tokens,seconds\n# first\n1024,0,0.1\n2048,0,0.2\n"
        "01024,0,0.15\n"
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"extends: {ROOT / 'scenarios' / 'quickstart.yaml'}\ntiming:\n  table: t.csv\n")
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{tmp_path / 't.csv'}:6: a second row for new_tokens 1024" in err
    assert "first is line 4" in err


def test_a_set_given_twice_is_refused(capsys):
    qs = str(ROOT / "scenarios" / "quickstart.yaml")
    assert main(["validate", qs, "--set", "seed=1", "--set", " seed = 2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "seed is set twice (also by --set seed=1)" in err


# ---- YAML keys as written -------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "shown"),
    [
        ("true", "cluster.true"),
        ("1", "cluster.1"),
        ("null", "cluster.null"),
        ("~", "cluster.~"),
        ("1.50", "cluster.1.50"),
        ("2023-01-01", "cluster.2023-01-01"),
        ("yes", "cluster.yes"),
    ],
)
def test_a_non_text_key_is_shown_as_written_at_its_own_line(tmp_path, capsys, key, shown):
    """`true:` was reported as `cluster[1]` ("got True", Python's True being 1) at the
    line of `cluster:`; a key is now the text written, so its line is found."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        f"extends: {ROOT / 'scenarios' / 'quickstart.yaml'}\ncluster:\n  engines: 2\n\n  {key}: x\n"
    )
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"kvsim: error: {bad}:5: {shown}: unknown field"), err


def test_true_and_one_are_two_keys_not_one(tmp_path, capsys):
    """`1:` then `true:` made one Python key (1 == True): the second value silently
    replaced the first under the first's name."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        f"extends: {ROOT / 'scenarios' / 'quickstart.yaml'}\ncluster:\n  engines: 2\n"
        "  true: x\n  1: y\n"
    )
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{bad}:4: cluster.true: unknown field" in err


def test_one_replication_prints_no_interval_and_stores_none(_plans):  # noqa: F811
    """`--cheapest --reps 1` printed "ttft_p99_s 1.1 ± 0"; `--minimize --reps 1 --json`
    stored the mean twice as its interval."""
    from test_planning import kvsim

    r = kvsim(
        "capacity", "--sweep", "engines.yaml", "--slo", "ttft_p99<=1.2s", "--cheapest",
        "--reps", "1", cwd=_plans,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "± 0" not in r.stdout and "(one replication: no interval)" in r.stdout
    r = kvsim(
        "capacity", "hits.yaml", "--slo", "ttft_p50<=0.6s", "--minimize", "node.h2d_per_gpu",
        "--range", "1 MB/s..10 MB/s", "--reps", "1", "--json", cwd=_plans,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    js = json.loads(r.stdout)
    assert js["mean_lo"] is None and js["mean_hi"] is None
