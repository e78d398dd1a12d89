"""The CI regression gate: unchanged passes, a real change fails, noise passes; reports.
(Power, paired differences and improvements: tests/test_gate_power.py.)"""

import json
import xml.etree.ElementTree as ET

import pytest

from kvsim.cli import main

from conftest import ROOT, SCENARIOS

SUITE = f"""
name: gate-test
seeds: [0, 1, 2]
entries:
  - scenario: {SCENARIOS / "paper" / "micro.yaml"}
    name: remote-heavy
    set: {{workload.requests: 120}}
    loads: [1.0]
  - scenario: {SCENARIOS / "paper" / "no-remote.yaml"}
    name: compute-bound
    set: {{workload.requests: 800, run.warmup: 0 s}}
    loads: [1.0, 2.0]
"""


@pytest.fixture(scope="module")
def gate(tmp_path_factory):
    d = tmp_path_factory.mktemp("gate")
    suite = d / "suite.yaml"
    suite.write_text(SUITE)
    assert main(["baseline", str(suite), "--out", str(d / "base"), "--workers", "2"]) == 0
    return suite, d / "base"


def check(gate, tmp_path, *extra):
    suite, base = gate
    return main(
        [
            "check",
            str(suite),
            "--baseline",
            str(base),
            "--report",
            str(tmp_path),
            "--workers",
            "2",
            *extra,
        ]
    )


def test_unchanged_rerun_passes(gate, tmp_path, capsys):
    assert check(gate, tmp_path) == 0
    out = capsys.readouterr().out
    assert "passed: 0 of 18" in out and "REGRESSION" not in out and "note:" not in out


def test_halving_remote_bandwidth_fails_with_readable_lines(gate, tmp_path, capsys):
    assert check(gate, tmp_path, "--set", "remote.bandwidth=0.8895 GiB/s") == 1
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if x.startswith("REGRESSION")]
    assert lines and all("remote-heavy @ 1x load" in x for x in lines)
    p50 = next(x for x in lines if "ttft_p50_s" in x)
    # scenario, metric, by how much, the baseline value and the paired interval, on one line
    assert "0.8" in p50 and "%" in p50 and "paired difference" in p50 and "95% CI" in p50
    assert "minimum detectable change" in p50 or "(exact)" in p50
    assert "note: entry 'remote-heavy'" in out  # the scenario changed: said, not hidden


def test_a_one_percent_change_on_a_compute_bound_scenario_is_noise(gate, tmp_path, capsys):
    suite, base = gate
    rc = main(["check", str(suite), "--baseline", str(base), "--set", "timing.scale=1.01"])
    assert rc == 0, capsys.readouterr().out


def test_reports_are_valid_junit_and_markdown(gate, tmp_path, capsys):
    assert check(gate, tmp_path, "--set", "remote.bandwidth=0.8895 GiB/s") == 1
    root = ET.parse(tmp_path / "kvsim-check.xml").getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert {s.get("name") for s in suites} == {"remote-heavy", "compute-bound"}
    cases = root.findall(".//testcase")
    assert len(cases) == int(root.get("tests")) == 18
    failures = root.findall(".//failure")
    assert len(failures) == int(root.get("failures")) > 0
    assert all(s.get("tests") == str(len(s.findall("testcase"))) for s in suites)
    md = (tmp_path / "kvsim-check.md").read_text()
    assert md.startswith("# kvsim check: gate-test FAILED") and "## Regressions" in md
    assert "| 95% interval | MDC | tolerance | verdict |" in md and "paired:" in md.lower()
    # every test case carries its figures; a failure's message its interval and MDC
    for case in cases:
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert {"delta", "delta_lo", "delta_hi", "mdc", "tolerance", "verdict"} <= props.keys()
        assert "delta_ci" not in props  # the interval as numbers; its text is the markdown's


def test_a_baseline_from_another_suite_is_bad_input(gate, tmp_path, capsys):
    suite, base = gate
    other = tmp_path / "other.yaml"
    other.write_text(SUITE.replace("name: compute-bound", "name: other-entry"))
    assert main(["check", str(other), "--baseline", str(base)]) == 2
    err = capsys.readouterr().err
    assert "other-entry" in err and "not in the baseline" in err
    seeds = tmp_path / "seeds.yaml"
    seeds.write_text(SUITE.replace("seeds: [0, 1, 2]", "seeds: [0, 1]"))
    assert main(["check", str(seeds), "--baseline", str(base)]) == 2
    assert "seeds" in capsys.readouterr().err
    assert main(["check", str(suite), "--baseline", str(tmp_path / "none")]) == 2
    assert "no baseline.json" in capsys.readouterr().err
    assert (
        main(
            ["check", str(suite), "--baseline", str(base), "--strict", "--set", "timing.scale=1.01"]
        )
        == 2
    )
    assert "differs from the baseline" in capsys.readouterr().err


def test_suite_file_mistakes(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    for body, fragment in [
        ("entries: []\n", "entries"),
        ("entries:\n  - {loads: [1]}\n", "scenario or sweep"),
        (
            "metrics: {latency: {rel: 0.1}}\n"
            f"entries:\n  - scenario: {SCENARIOS}/quickstart.yaml\n",
            "latency",
        ),
        (
            f"entries:\n  - scenario: {SCENARIOS}/quickstart.yaml\n    lods: [1]\n",
            "did you mean 'loads'",
        ),
    ]:
        bad.write_text(body)
        assert main(["baseline", str(bad), "--out", str(tmp_path / "b")]) == 2
        assert fragment in capsys.readouterr().err


def test_kvsims_own_suite_and_baseline_agree():
    """The committed baseline is the current model's: .ci/run's gate would pass."""
    suite = ROOT / ".ci" / "suite.yaml"
    doc = json.loads((ROOT / ".ci" / "baseline" / "baseline.json").read_text())
    from kvsim.experiments.regression import compare, load_suite, measure

    s = load_suite(suite)
    result = compare(s, doc, measure(s, workers=2))
    assert not result.failures, "\n".join(c.line() for c in result.failures)
    assert not result.notes, result.notes


def test_scenario_hashes_do_not_depend_on_where_the_checkout_is(tmp_path):
    # the committed baseline must match on any CI runner, whatever folder it clones into
    import shutil

    from kvsim.experiments.regression import load_suite

    for folder in ("scenarios", "traces", ".ci"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    here = {e.id: e.digest for e in load_suite(ROOT / ".ci" / "suite.yaml").entries}
    there = {e.id: e.digest for e in load_suite(tmp_path / ".ci" / "suite.yaml").entries}
    assert here == there
