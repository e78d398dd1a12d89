"""Examples are tests: every scenario in scenarios/ validates and runs with its seed."""

from pathlib import Path

import pytest

from kvsim import api
from kvsim.yamlfile import load_yaml

from conftest import SCENARIOS

ALL = sorted(p for p in SCENARIOS.rglob("*.yaml") if "sweeps" not in p.parts)
SWEEPS = sorted((SCENARIOS / "sweeps").glob("*.yaml"))


def needs_missing_file(path: Path) -> str | None:
    data, _ = load_yaml(path)
    wl = data.get("workload") or {}
    p = wl.get("path")
    if p and not (path.parent / p).exists():
        return f"{path.name} replays {p}, which is not present (see traces/README.md)"
    return None


@pytest.mark.parametrize("path", ALL, ids=[str(p.relative_to(SCENARIOS)) for p in ALL])
def test_scenario_runs(path):
    reason = needs_missing_file(path)
    if reason:
        pytest.skip(reason)
    res = api.run(path)
    s = res.summary
    assert s["requests"] > 0
    assert s["requests_unfinished"] == 0
    assert s["scenario"] == res.scenario.name
    fr = s["token_source_frac"]
    assert sum(fr.values()) == pytest.approx(1.0)
    assert 0 <= s["gpu_busy_frac"] <= 1
    assert s["ttft_p50_s"] <= s["ttft_p90_s"] <= s["ttft_p99_s"] <= s["ttft_max_s"]


def test_quickstart_uses_every_tier():
    s = api.run(SCENARIOS / "quickstart.yaml").summary
    for tier in ("gpu", "host", "nvme", "remote", "compute"):
        assert s["token_source_frac"][tier] > 0, tier


@pytest.mark.parametrize("path", SWEEPS, ids=[p.name for p in SWEEPS])
def test_example_sweeps_expand_and_their_first_run_runs(path):
    from kvsim.experiments.sweep import load_sweep, run_one

    sweep = load_sweep(path)
    assert sweep.runs and sweep.columns
    row = run_one(sweep.runs[0])
    assert row["status"] == "ok", row["error"]
