"""Planning at the scenario's load: --minimize, cost and --cheapest, sensitivity
(hand-computed cases on round numbers, and the bad inputs they refuse)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvsim import api
from kvsim.cli import main
from kvsim.experiments.planner import cheapest, layouts, minimize
from kvsim.experiments.sensitivity import sensitivity
from kvsim.experiments.slo import parse_slo

# The toy's round numbers (tests/conftest.py) as a scenario file: 1,000 B per token,
# 100-token blocks, t(new, cached) = 0.1 s + (new - 1) ms, one serial engine.
BASE = """\
name: plan-base
seed: 0
node: {h2d_latency: 0 s, nvme_latency: 0 s, network_latency: 0 s, d2h_per_gpu: 1 EB/s}
model: {name: toy, kv_bytes_per_token: 1000 B}
timing: {new_tokens: [1, 1001], cached_tokens: [0, 1000], seconds: [[0.1, 0.1], [1.1, 1.1]]}
tiers: {gpu: {capacity: 0 B}, host: {enabled: false}, nvme: {enabled: false}}
remote: {enabled: false}
cluster: {engines: 1, load_policy: sync, router: round_robin}
engine: {batching: serial}
run: {warmup: 0 s}
cost: {gpu_node_hour: 10, dram_gb_month: 7.3}
"""

# Cold prompts of 1,000 tokens (1.099 s each) every 0.6 s: one engine falls behind, two
# (round robin: one prompt each every 1.2 s) never queue, TTFT 1.099 s.
STREAM = """\
workload:
  kind: synthetic
  requests: 60
  block_tokens: 100
  arrivals: {process: constant, rate: 1.6666667/s}
  prompt_tokens: {dist: fixed, value: 1000}
"""

# One prompt three times, 10 s apart: computed (1.099 s), then twice restored from host:
# 0.999 MB over the 8 GPUs' host links (8 x h2d_per_gpu) and the last token (0.1 s).
HITS = """\
tiers: {host: {enabled: true, capacity: 1 GB, t0: 0 s, t0_engine: 0 s}}
node: {h2d_per_gpu: 1 MB/s}
workload: {kind: mooncake, path: hits.jsonl, block_tokens: 100}
"""


@pytest.fixture
def plans(tmp_path: Path) -> Path:
    (tmp_path / "base.yaml").write_text(BASE)
    (tmp_path / "stream.yaml").write_text("extends: base.yaml\n" + STREAM)
    (tmp_path / "hits.yaml").write_text("extends: base.yaml\n" + HITS)
    line = {"input_length": 1000, "output_length": 1, "hash_ids": list(range(10))}
    (tmp_path / "hits.jsonl").write_text(
        "".join(json.dumps({"timestamp": 10_000 * i, **line}) + "\n" for i in range(3))
    )
    (tmp_path / "engines.yaml").write_text(
        "base: stream.yaml\ngrid:\n  cluster.engines: [1, 2, 3]\n"
    )
    return tmp_path


def test_the_hit_scenario_is_what_the_hand_computation_says(plans):
    s = api.run(plans / "hits.yaml").summary
    assert s["decisions"] == {"cold": 1, "restore": 2}
    assert s["ttft_p50_s"] == pytest.approx(0.1 + 0.999e6 / 8e6)


def test_minimize_finds_the_hand_computed_bandwidth(plans):
    """p50 = 0.1 + 0.999 MB / (8 h) <= 0.6 s holds from h = 249,750 B/s."""
    sc = api.load(plans / "hits.yaml")
    found = minimize(
        sc,
        parse_slo("ttft_p50<=0.6s"),
        "node.h2d_per_gpu",
        span="1 kB/s..10 MB/s",
        reps=1,
        tol=1e-3,
    )
    assert found.values[0] == pytest.approx(249_750, rel=2e-3)
    assert found.values[0] >= 249_750  # the answer meets the SLO


def test_minimize_counts_engines_to_one(plans):
    sc = api.load(plans / "stream.yaml")
    found = minimize(sc, parse_slo("ttft_p99<=1.2s"), "cluster.engines", span="1..8", reps=2)
    assert found.values == [2.0, 2.0]


def test_cost_summary_is_the_hand_computed_price(plans):
    """Two engines at $10/h, and 1 GB of host DRAM each at $7.30 per GB-month (730 h):
    $20.02/h. At 1.6667 prompts of 1,000 tokens a second (6 million tokens an hour)."""
    s = api.run(plans / "hits.yaml", {"cluster.engines": 2}).summary
    assert s["usd_per_hour"] == pytest.approx(20.02)
    per_m = s["usd_per_hour"] / (s["prompt_tokens_per_s"] * 3600 / 1e6)
    assert s["usd_per_million_prompt_tokens"] == pytest.approx(per_m)
    plain = api.run(plans / "hits.yaml", {"cost": None}).summary
    assert plain["usd_per_hour"] != plain["usd_per_hour"]  # NaN: no prices


def test_cheapest_picks_the_hand_computed_layout(plans):
    found = layouts(str(plans / "engines.yaml"), parse_slo("ttft_p99<=1.2s"), reps=1)
    assert [x.meets for x in found] == [False, True, True]
    assert [x.usd_per_hour for x in found] == [10.0, 20.0, 30.0]
    best = cheapest(found)
    assert best is not None and best.config == {"cluster.engines": 2}


def test_sensitivity_ranks_the_assumption_the_answer_rests_on_first(plans):
    """Every profile value marked L or M is moved by 25%; the hit scenario's median TTFT
    depends on the host-to-GPU link (M), with the hand-computed swing: 0.999 MB / 8 at
    0.75 and 1.25 MB/s. Its HBM prefix cache is 0 B: moved up by an absolute step (25% of
    1 GB), it holds the prompt and the restores become GPU hits (0.1 s: the last token),
    the largest swing, measured from the value as given (0 B and below are refused)."""
    res = sensitivity(api.load(plans / "hits.yaml"), "ttft_p50_s", by=0.25)
    top, second = res.swings[:2]
    assert top.path == "tiers.gpu.capacity" and top.mark == "M"
    assert top.step.startswith("at 0: moved by 250 MB") and set(top.refused) == {"low"}
    assert top.swing == pytest.approx(0.1 - (0.1 + 0.999e6 / 8e6))
    assert second.path == "node.h2d_per_gpu" and second.mark == "M"
    assert second.metric_low == pytest.approx(0.1 + 0.999e6 / 6e6)
    assert second.metric_high == pytest.approx(0.1 + 0.999e6 / 10e6)
    others = {s.path: s.swing for s in res.swings[2:]}
    # the T0s at 0 move by 0.25 ms (absolute); the rest change nothing in the median
    assert others.pop("node.h2d_latency") == pytest.approx(0.25e-3)
    assert others.pop("tiers.host.t0") == pytest.approx(0.25e-3)
    assert all(abs(v) < 1e-9 for v in others.values()), others
    assert "node.host_dram (M)" in res.no_effect  # a limit: the run never reads it
    assert len(res.swings) + len(res.no_effect) + len(res.skipped) >= 20  # the profile's


def test_sensitivity_command_writes_a_table_and_a_tornado(plans, tmp_path, capsys):
    out = tmp_path / "sens"
    code = main(
        [
            "sensitivity",
            str(plans / "hits.yaml"),
            "--metric",
            "ttft_p50_s",
            "--vary",
            "node.h2d_per_gpu",
            "--vary",
            "tiers.host.t0",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    assert (out / "tornado.png").stat().st_size > 5_000
    text = (out / "sensitivity.csv").read_text().splitlines()
    assert text[1].startswith("node.h2d_per_gpu")
    assert "swing" in capsys.readouterr().out


def kvsim(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kvsim", *args], capture_output=True, text=True, cwd=cwd
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--minimize", "cluster.router"], "--minimize cluster.router: not a numeric field"),
        (["--minimize", "cluster.nope"], "cluster has no field 'nope'"),
        (["--minimize", "node.h2d_per_gpu", "--range", "2 MB/s..1 MB/s"], "empty range"),
        (["--minimize", "node.h2d_per_gpu", "--range", "1 MB/s"], "expected LO..HI"),
        (["--range", "1..2"], "--range needs --minimize"),
    ],
)
def test_minimize_refuses_bad_input(plans, args, message):
    r = kvsim("capacity", "hits.yaml", "--slo", "ttft_p50<=0.6s", *args, cwd=plans)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr.strip().splitlines()[-1]


def test_bad_prices_and_by_are_refused(plans):
    r = kvsim("run", "hits.yaml", "--set", "cost.gpu_node_hour=-1", cwd=plans)
    assert r.returncode == 2 and "cost.gpu_node_hour" in r.stderr
    r = kvsim("sensitivity", "hits.yaml", "--metric", "ttft_p50_s", "--by", "0", cwd=plans)
    assert r.returncode == 2 and "--by" in r.stderr
    r = kvsim("sensitivity", "hits.yaml", "--metric", "nope", cwd=plans)
    assert r.returncode == 2 and "unknown metric" in r.stderr
    r = kvsim(
        "capacity", "--sweep", "engines.yaml", "--slo", "ttft_p99<=1.2s", "--cheapest", cwd=plans
    )
    assert r.returncode == 0, r.stderr
    assert "<- cheapest" in r.stdout
    (plans / "free.yaml").write_text(
        "base: stream.yaml\nset: {cost: null}\ngrid:\n  cluster.engines: [1, 2]\n"
    )
    r = kvsim(
        "capacity", "--sweep", "free.yaml", "--slo", "ttft_p99<=1.2s", "--cheapest", cwd=plans
    )
    assert r.returncode == 2 and "needs prices" in r.stderr


def test_sweep_capacity_and_cheapest_apply_set_and_refuse_bad_or_swept_sets(plans):
    """--set reaches every configuration of --sweep (it used to be ignored silently)."""
    r = kvsim(
        "capacity",
        "--sweep",
        "engines.yaml",
        "--slo",
        "ttft_p99<=1.2s",
        "--cheapest",
        "--reps",
        "1",
        "--set",
        "cost.gpu_node_hour=5",
        cwd=plans,
    )
    assert r.returncode == 0, r.stderr
    assert "$10.00/h" in r.stdout and "<- cheapest" in r.stdout  # 2 engines at $5/h
    for argv in (
        ["--cheapest", "--set", "remote.servers=abc"],
        ["--set", "remote.servers=abc"],
        ["--cheapest", "--set", "cluster.engines=4"],
    ):
        r = kvsim(
            "capacity", "--sweep", "engines.yaml", "--slo", "ttft_p99<=1.2s", *argv, cwd=plans
        )
        assert r.returncode == 2, (argv, r.stdout)
        assert "--set" in r.stderr.strip().splitlines()[-1]


def test_cheapest_refuses_all_zero_prices(plans):
    (plans / "zero.yaml").write_text(
        "base: stream.yaml\nset: {cost: {gpu_node_hour: 0, dram_gb_month: 0}}\n"
        "grid:\n  cluster.engines: [1, 2]\n"
    )
    r = kvsim(
        "capacity", "--sweep", "zero.yaml", "--slo", "ttft_p99<=1.2s", "--cheapest", cwd=plans
    )
    assert r.returncode == 2 and "at least one price above 0" in r.stderr


def test_minimize_says_when_the_answer_is_the_bottom_of_the_range(plans):
    r = kvsim(
        "capacity",
        "hits.yaml",
        "--slo",
        "ttft_p50<=0.6s",
        "--minimize",
        "node.h2d_per_gpu",
        "--range",
        "1 MB/s..10 MB/s",
        "--reps",
        "1",
        cwd=plans,
    )
    assert r.returncode == 0, r.stderr
    assert "1 MB/s or lower" in r.stdout and "widen --range" in r.stdout


def test_sensitivity_refuses_a_metric_without_a_value(plans):
    r = kvsim(
        "sensitivity", "hits.yaml", "--metric", "usd_per_hour", "--set", "cost=null", cwd=plans
    )
    assert r.returncode == 2 and "no value" in r.stderr
