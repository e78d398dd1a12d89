"""One interval form for scripts (issue 39, point 16): every interval kvsim writes in a
JSON file or a table is two numbers ``X_lo`` and ``X_hi`` beside the value ``X`` (null or
empty without one); the text forms ("[lo, hi]", "± h", "exact") are only printed. Walked
through the CLI on tiny scenarios: ``run`` (summary.json), ``sweep`` (results.csv and
.parquet), ``capacity`` (--json, capacity.csv) and ``check`` (the JUnit report). Also: a
sweep's run ids leave out what changes no result (the scenario's ``description``)."""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kvsim import api
from kvsim.cli import main
from kvsim.experiments.explain import measured
from kvsim.results.metrics import INTERVALS, LEGACY_INTERVALS, NUMERIC
from kvsim.results.uncertainty import percentile_cis, ratio_ci
from kvsim.rng import stream

ROOT = Path(__file__).resolve().parents[1]
QS = ROOT / "scenarios" / "quickstart.yaml"
TINY = ["--set", "workload.requests=300", "--set", "run.warmup=0 s"]
# a key or column that names an interval in a text or list form
OLD_NAME = re.compile(r"(_ci|_ci_s|ci95\w*)$")


def _is_pair_text(v: Any) -> bool:
    """A cell or value holding an interval as text: "[lo, hi]" JSON, or "± h"."""
    if not isinstance(v, str):
        return False
    if "±" in v:
        return True
    try:
        got = json.loads(v)
    except ValueError:
        return False
    return isinstance(got, list) and len(got) == 2


def assert_no_text_intervals(doc: Any, where: str = "") -> None:
    """No key named like an old interval, no [lo, hi] list or text, anywhere in ``doc``;
    every ``*_lo``/``*_hi`` a number or null, paired."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            assert not OLD_NAME.search(str(k)), f"{where}.{k}: an old interval key"
            if str(k).endswith(("_lo", "_hi")):
                assert v is None or isinstance(v, (int, float)), f"{where}.{k}: {v!r}"
                twin = str(k)[:-3] + ("_hi" if str(k).endswith("_lo") else "_lo")
                assert twin in doc, f"{where}.{k} without {twin}"
            if k != "provenance":
                assert_no_text_intervals(v, f"{where}.{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            assert_no_text_intervals(v, f"{where}[{i}]")
    else:
        assert not _is_pair_text(doc), f"{where}: {doc!r} is an interval as text"


def assert_table_form(df: pd.DataFrame, what: str) -> None:
    """A table's intervals: numeric ``_lo``/``_hi`` columns, no text-interval column."""
    for c in df.columns:
        assert not OLD_NAME.search(c), f"{what}: column {c} is an old interval column"
        if c.endswith(("_lo", "_hi")):
            assert pd.api.types.is_numeric_dtype(df[c]), f"{what}: {c} is {df[c].dtype}"
        elif df[c].dtype == object:
            bad = [v for v in df[c] if _is_pair_text(v)]
            assert not bad, f"{what}: column {c} holds intervals as text: {bad[:2]}"


def test_the_walkers_catch_every_old_form():
    """The checks below can fail: each older form of an interval is caught."""
    for doc in (
        {"ttft_p99_ci_s": [1.0, 2.0]},  # a list under an interval's name
        {"delta_ci": "[-0.1, +0.2]"},  # JSON text
        {"x": {"swing": "0.3 ± 0.1"}},  # a half-width as text, nested
        {"ci95_rps": 0.4},  # a half-width column
        {"mean_lo": "1"},  # a bound that is no number
        {"mean_lo": 1.0},  # a bound without its twin
    ):
        with pytest.raises(AssertionError):
            assert_no_text_intervals(doc)
    with pytest.raises(AssertionError):
        assert_table_form(pd.DataFrame({"delta_m": [0.1], "delta_m_ci": ["[0, 1]"]}), "t")
    with pytest.raises(AssertionError):
        assert_table_form(pd.DataFrame({"m_lo": ["0.1"], "m_hi": ["0.2"]}), "t")


# ---- run: summary.json -----------------------------------------------------------------


def test_run_summary_holds_numeric_bounds_beside_each_value(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", str(QS), *TINY, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    s = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert_no_text_intervals(s, "summary.json")
    assert not set(LEGACY_INTERVALS) & set(s)
    for value, (lo_key, hi_key) in INTERVALS.items():
        lo, hi = s[lo_key], s[hi_key]
        assert isinstance(lo, float) and isinstance(hi, float), (value, lo, hi)
        assert lo <= s[value] <= hi, (value, lo, s[value], hi)
        # the bounds are not outcome metrics: no SLO or gate is on them
        assert lo_key not in NUMERIC and hi_key not in NUMERIC
    assert s["hit_ratio_hi"] <= 1.0
    # the text form stays in the printed table
    assert re.search(r"95% intervals\s+p50 \S+ ms \.\. \S+ ms\s+p99", printed)
    assert "(95% interval " in printed


def test_under_20_requests_both_bounds_are_null(tmp_path, capsys):
    out = tmp_path / "few"
    args = ["--set", "workload.requests=15", "--set", "run.warmup=0 s"]
    assert main(["run", str(QS), *args, "--out", str(out)]) == 0
    assert "n/a (under 20 requests)" in capsys.readouterr().out
    s = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    for lo_key, hi_key in INTERVALS.values():
        assert s[lo_key] is None and s[hi_key] is None


def test_the_bounds_are_the_same_draws_as_before():
    """Regression check: the new keys hold the very numbers the old ``[lo, hi]`` lists
    held: the same bootstrap on the same named streams ("ttft_ci", "hit_ratio_ci") of the
    measured requests in arrival order, recomputed here bit for bit."""
    res = api.run(QS, {"workload.requests": 300, "run.warmup": "0 s"})
    m = measured(res).sort_values("arrival_s", kind="stable")
    seed = res.scenario.seed
    cis = percentile_cis(m["ttft_s"].to_numpy(), (50, 99), stream(seed, "ttft_ci"))
    prompt = m["input_tokens"].to_numpy(dtype=float)
    hits = prompt - m["tokens_compute"].to_numpy(dtype=float)
    hit = ratio_ci(hits, prompt, stream(seed, "hit_ratio_ci"))
    s = res.summary
    assert (s["ttft_p50_s_lo"], s["ttft_p50_s_hi"]) == tuple(cis[50])
    assert (s["ttft_p99_s_lo"], s["ttft_p99_s_hi"]) == tuple(cis[99])
    assert (s["hit_ratio_lo"], s["hit_ratio_hi"]) == tuple(hit)


# ---- sweep: results tables and run ids -------------------------------------------------


def _sweep(tmp_path: Path, description: str, requests: int = 200) -> Path:
    base = tmp_path / "base.yaml"
    base.write_text(
        f"extends: {QS}\ndescription: {description}\n"
        f"workload: {{requests: {requests}}}\nrun: {{warmup: 0 s}}\n",
        encoding="utf-8",
    )
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        f"name: form\nbase: {base}\ngrid:\n  cluster.load_policy: [sync, async]\nseeds: [1, 2]\n",
        encoding="utf-8",
    )
    return sweep


def _reused(err_and_out: str) -> int:
    got = re.search(r"\((\d+) reused from", err_and_out)
    assert got, err_and_out
    return int(got.group(1))


def test_sweep_tables_hold_numbers_and_a_new_description_alone_resumes(tmp_path, capsys):
    sweep, out = _sweep(tmp_path, "first words"), tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1", "--quiet"]) == 0
    first = capsys.readouterr()
    assert _reused(first.out + first.err) == 0
    for df, what in (
        (pd.read_csv(out / "results.csv"), "results.csv"),
        (pd.read_parquet(out / "results.parquet"), "results.parquet"),
    ):
        assert_table_form(df, what)
        assert {"ttft_p50_s_lo", "hit_ratio_hi", "delta_ttft_p99_s_lo"} <= set(df.columns)
        assert (df["ttft_p99_s_lo"] <= df["ttft_p99_s"]).all()
        assert (df["ttft_p99_s"] <= df["ttft_p99_s_hi"]).all()
    ids = set(pd.read_csv(out / "results.csv")["run_id"])
    # words for humans change no result: every run is found done
    _sweep(tmp_path, "other words, same scenario")
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1", "--quiet"]) == 0
    again = capsys.readouterr()
    assert _reused(again.out + again.err) == 4
    assert set(pd.read_csv(out / "results.csv")["run_id"]) == ids
    # a changed request count is a changed scenario: every run is done again
    _sweep(tmp_path, "other words, same scenario", requests=220)
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1", "--quiet"]) == 0
    third = capsys.readouterr()
    assert _reused(third.out + third.err) == 0
    assert not set(pd.read_csv(out / "results.csv")["run_id"]) & ids


def test_an_older_summarys_lists_still_read_as_bounds():
    """A summary (or journal row) an older kvsim wrote, with ``[lo, hi]`` lists, flattens
    to the same numeric columns as the new keys."""
    from kvsim.experiments.sweep.tables import flat_summary

    old = flat_summary(
        {"ttft_p99_s": 2.0, "ttft_p99_ci_s": [1.5, 2.5], "hit_ratio_ci": "[0.1, 0.3]"}
    )
    assert old == {"ttft_p99_s": 2.0, "ttft_p99_s_lo": 1.5, "ttft_p99_s_hi": 2.5,
                   "hit_ratio_lo": 0.1, "hit_ratio_hi": 0.3}  # fmt: skip
    new = flat_summary({"ttft_p50_s_lo": None, "ttft_p50_s_hi": None})
    assert all(math.isnan(v) for v in new.values()) and len(new) == 2


# ---- capacity: --json and capacity.csv --------------------------------------------------


def test_capacity_json_and_csv_hold_numbers(tmp_path, capsys):
    out = tmp_path / "cap"
    args = ["capacity", str(QS), "--set", "workload.requests=200", "--set", "run.warmup=0 s"]
    args += ["--slo", "ttft_p99<=0.5s", "--reps", "2", "--tol", "0.3", "--json", "--out", str(out)]
    assert main(args) == 0
    rows = json.loads(capsys.readouterr().out)
    assert_no_text_intervals(rows, "capacity --json")
    assert rows[0]["capacity_rps_lo"] <= rows[0]["capacity_rps"] <= rows[0]["capacity_rps_hi"]
    assert_table_form(pd.read_csv(out / "capacity.csv"), "capacity.csv")


def test_minimize_json_and_sensitivity_csv_hold_numbers(tmp_path, capsys):
    common = [str(QS), "--set", "workload.requests=200", "--set", "run.warmup=0 s"]
    args = ["capacity", *common, "--slo", "ttft_p99<=0.5s", "--reps", "2"]
    assert main([*args, "--minimize", "cluster.engines", "--range", "1..4", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert_no_text_intervals(doc, "--minimize --json")
    assert {"mean_lo", "mean_hi"} <= set(doc)
    out = tmp_path / "sens"
    args = ["sensitivity", *common, "--metric", "ttft_p99_s", "--vary", "cluster.engines"]
    assert main([*args, "--reps", "3", "--out", str(out)]) == 0
    capsys.readouterr()
    df = pd.read_csv(out / "sensitivity.csv")
    assert_table_form(df, "sensitivity.csv")
    assert {"swing_lo", "swing_hi"} <= set(df.columns)


# ---- check: the JUnit report ---------------------------------------------------------------


def test_check_report_gives_delta_bounds_as_numbers(tmp_path, capsys):
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"name: form\nseeds: [1, 2, 3]\nentries:\n  - scenario: {QS}\n    name: qs\n"
        "    set: {workload.requests: 200, run.warmup: 0 s}\n    loads: [1.0]\n",
        encoding="utf-8",
    )
    base, report = tmp_path / "base", tmp_path / "report"
    assert main(["baseline", str(suite), "--out", str(base), "--workers", "1"]) == 0
    rc = main(["check", str(suite), "--baseline", str(base), "--report", str(report),
               "--workers", "1", "--set", "workload.requests=220"])  # fmt: skip
    assert rc in (0, 1)  # (a verdict either way: the report is what is checked)
    capsys.readouterr()
    assert_no_text_intervals(json.loads((base / "baseline.json").read_text()), "baseline.json")
    cases = list(ET.parse(report / "kvsim-check.xml").getroot().iter("testcase"))
    assert cases
    bounded = 0
    for case in cases:
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert "delta_ci" not in props and not any(_is_pair_text(v) for v in props.values())
        lo, hi, delta = props["delta_lo"], props["delta_hi"], props["delta"]
        assert (lo == "") == (hi == ""), props
        if lo:
            bounded += 1
            assert float(lo) <= float(delta) <= float(hi), props
    assert bounded  # three paired seeds: intervals on every finite comparison
    # the markdown keeps the text form for people
    assert re.search(r"\| \[[-+]", (report / "kvsim-check.md").read_text())
