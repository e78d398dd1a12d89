"""Answers that explain themselves (issue 28): the tail's parts, the compute floor, the
prompt range that scopes an SLO, and the three explanations through the CLI."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import yaml

from kvsim import api
from kvsim.cli import main
from kvsim.config.loader import deep_merge
from kvsim.config.schema import prompt_bounds
from kvsim.experiments.explain import (
    PARTS,
    compute_floor,
    explain,
    floor_range,
    lone_ttft,
    measured,
    tail_parts,
)
from kvsim.experiments.slo import parse_slo

from conftest import SCENARIOS, TOY, shared_trace, toy

# Toy requests (tests/conftest.py): t(new) = 0.1 s + (new - 1) ms, a serial engine, no
# cache (GPU tier 0 B, no other tier), one arrival every 10 s: never two at once.
# Prompts of 100, 500 or 1,000 tokens alone take 0.199, 0.599 and 1.099 s.
PROMPTS = {100: 0.199, 500: 0.599, 1000: 1.099}
ALONE = {
    "workload": {
        "requests": 60,
        "arrivals": {"process": "constant", "rate": "0.1/s"},
        "prompt_tokens": {"dist": "choice", "values": [100, 500, 1000]},
    }
}


def toy_file(tmp_path, name="toy.yaml", **sections) -> str:
    """The toy scenario (with ``sections`` merged over it) as a scenario file."""
    data = deep_merge(copy.deepcopy(TOY), copy.deepcopy(sections))
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def test_prompt_bounds_read_k_and_m_as_thousands_and_millions():
    assert prompt_bounds("0..32k") == (0, 32_000)
    assert prompt_bounds("32k..") == (32_000, None)
    assert prompt_bounds("..8k") == (0, 8_000)
    assert prompt_bounds(" 1.5k .. 2M ") == (1_500, 2_000_000)
    for bad in ("32k..8k", "-1..5", "..", "short", "1.5..3", "0..32G", ""):
        with pytest.raises(ValueError):
            prompt_bounds(bad)


def test_tail_parts_sum_to_the_tails_mean_ttft():
    """Every TTFT is queue + restore + compute + store + lost (the engine records it so),
    so the parts' means over the tail sum to the tail's mean TTFT (to rounding); the tail
    is every request at or above the percentile. The quickstart (400 requests) queues,
    restores and stages, so no part is trivially 0."""
    r = api.run(SCENARIOS / "quickstart.yaml", {"workload.requests": 400, "run.warmup": "0 s"})
    df = measured(r)
    for q in (50.0, 99.0):
        t = tail_parts(df, q)
        cut = np.percentile(df["ttft_s"], q)
        assert t.requests == int((df["ttft_s"] >= cut).sum()) >= 1
        assert sum(t.parts.values()) == pytest.approx(t.ttft_mean, rel=1e-9)
        assert 0.999 < sum(t.share(p) for p in PARTS) < 1.001
    mid = tail_parts(df, 50.0)
    assert mid.parts["queue"] > 0 and mid.parts["restore"] > 0 and mid.parts["compute"] > 0
    assert tail_parts(df, 99.0).ttft_mean >= tail_parts(df, 50.0).ttft_mean


def test_compute_floor_is_the_ttft_of_requests_that_never_meet():
    """One request at a time, nothing cached: each TTFT is its prompt alone on an idle
    engine, so the floor equals the TTFT request by request (hand values: 0.1 s + (n - 1)
    ms), and the floor of a metric is that metric."""
    r = api.run(toy(**ALONE))
    df = measured(r)
    lone = lone_ttft(r.scenario, df)
    hand = np.array([PROMPTS[n] for n in df["input_tokens"]])
    assert lone == pytest.approx(hand, abs=1e-12)
    assert df["ttft_s"].to_numpy() == pytest.approx(hand, abs=1e-9)
    for metric in ("ttft_p50_s", "ttft_p99_s", "ttft_mean_s", "ttft_max_s"):
        assert compute_floor(r, metric) == pytest.approx(r.summary[metric], abs=1e-9)
    assert math.isnan(compute_floor(r, "hit_ratio"))  # not a TTFT: no floor


def test_compute_floor_counts_restores_on_an_idle_fabric():
    """Requests that share a 500-token system prompt restore it from the host tier (the
    GPU keeps nothing); one at a time, the restore has no queueing, so TTFT = its restore
    (lookup + read + host-to-GPU) + the compute of the rest, and the floor matches it."""
    r = api.run(
        toy(
            tiers={"host": {"enabled": True, "capacity": "1 GB"}},
            workload={
                "requests": 30,
                "arrivals": {"process": "constant", "rate": "0.1/s"},
                "prompt_tokens": {"dist": "fixed", "value": 300},
                "system_prompts": {"count": 1, "tokens": 500, "share": 1.0},
            },
        )
    )
    df = measured(r)
    assert (df["tokens_host"] > 0).sum() >= 20  # (the first computes the prompt)
    assert (df["restore_queue_s"] == 0).all()
    lone = lone_ttft(r.scenario, df)
    assert lone == pytest.approx(df["ttft_s"].to_numpy(), rel=1e-6)
    assert (lone > 0.1 + (df["tokens_compute"] - 1) * 1e-3 - 1e-12).all()


def test_floor_range_names_the_longest_prompts_whose_floor_meets_the_slo():
    slo = parse_slo("ttft_p99<=0.7s")
    prompts = np.array([100, 500, 1000] * 20)
    lone = np.array([PROMPTS[n] for n in prompts])
    assert floor_range(slo, prompts, lone) == 500
    assert floor_range(parse_slo("ttft_p99<=0.1s"), prompts, lone) is None  # none does
    assert floor_range(parse_slo("ttft_p99<=2s"), prompts, lone) is None  # all do


def test_prompt_range_changes_the_measured_set():
    """60 requests, the prompts drawn from {100, 500, 1000}: 0..600 keeps the first two
    kinds; the counts add up and the outcomes cover only those prompts."""
    full = api.run(toy(**ALONE)).summary
    r = api.run(toy(**ALONE, run={"warmup": "0 s", "prompt_range": "0..600"}))
    s = r.summary
    kept = int((r.requests["input_tokens"] <= 600).sum())
    assert full["requests"] == 60 and full["requests_out_of_range"] == 0
    assert full["prompt_range"] is None and s["prompt_range"] == "0..600"
    assert s["requests"] == kept and s["requests_out_of_range"] == 60 - kept > 0
    assert s["ttft_max_s"] == pytest.approx(PROMPTS[500])
    assert full["ttft_max_s"] == pytest.approx(PROMPTS[1000])
    # throughput still counts every request the engine served
    assert s["requests_per_s"] == pytest.approx(full["requests_per_s"])
    top = api.run(toy(**ALONE, run={"warmup": "0 s", "prompt_range": "1k.."})).summary
    assert top["requests"] == 60 - kept and top["ttft_p50_s"] == pytest.approx(PROMPTS[1000])


def test_a_range_no_request_falls_in_is_refused_naming_the_field(tmp_path, capsys):
    p = toy_file(tmp_path, **ALONE)
    assert main(["run", p, "--set", "run.prompt_range=2k.."]) == 2
    err = capsys.readouterr().err
    assert "run.prompt_range" in err and "no measured request" in err
    assert "prompts of 100 to 1,000 tokens" in err


def _three_parts(out: str) -> None:
    assert "reached: ttft_p99_s = " in out
    assert "the slowest 1% (" in out and "compute dominates" in out
    assert "compute floor: ttft_p99_s = 1.1 s" in out
    assert "no tier size or load helps" in out
    assert "--prompt-range 0..HI, HI at most 500" in out


def test_infeasible_capacity_explains_and_a_prompt_range_makes_it_feasible(tmp_path, capsys):
    """p99 <= 0.7 s: a 1,000-token prompt alone takes 1.099 s, so no load meets it; the
    answer says so and names 0..500, where the floor (0.599 s) meets it; with that
    range the search finds a rate (exit 0)."""
    p = toy_file(tmp_path, **ALONE)
    argv = ["capacity", p, "--slo", "ttft_p99<=0.7s", "--reps", "1", "--tol", "0.2"]
    assert main(argv) == 2
    cap = capsys.readouterr()
    _three_parts(cap.out)
    assert "fails even at vanishing load" in cap.err and "compute dominates" in cap.err
    assert main([*argv, "--json"]) == 2
    js = json.loads(capsys.readouterr().out)
    assert js["feasible"] is False
    why = js["explanation"]
    assert why["compute_floor"] == pytest.approx(PROMPTS[1000])
    assert why["floor_meets_slo"] is False and why["floor_meets_prompts_up_to"] == 500
    assert why["tail"]["dominant"] == "compute"
    assert main([*argv, "--prompt-range", "0..500"]) == 0
    out = capsys.readouterr().out
    assert "capacity at ttft_p99_s <= 0.7 for prompts 0..500 tokens" in out


def test_infeasible_minimize_explains(tmp_path, capsys):
    p = toy_file(tmp_path, **ALONE)
    argv = ["capacity", p, "--slo", "ttft_p99<=0.7s", "--minimize", "cluster.engines"]
    assert main([*argv, "--range", "1..2", "--reps", "1"]) == 2
    cap = capsys.readouterr()
    assert "with cluster.engines = 2" in cap.out
    _three_parts(cap.out)
    assert "fails even with cluster.engines = 2" in cap.err


def test_infeasible_cheapest_explains_with_the_closest_layout(tmp_path, capsys):
    base = toy_file(tmp_path, **ALONE, cost={"gpu_node_hour": 10.0})
    sweep = tmp_path / "layouts.yaml"
    sweep.write_text(f"name: layouts\nbase: {base}\ngrid:\n  cluster.engines: [1, 2]\n")
    argv = ["capacity", "--sweep", str(sweep), "--slo", "ttft_p99<=0.7s", "--cheapest"]
    assert main([*argv, "--reps", "2"]) == 1
    out = capsys.readouterr().out
    assert "no configuration meets ttft_p99_s <= 0.7" in out
    assert "with the closest layout (cluster.engines=1); mean of 2 replications" in out
    _three_parts(out)
    assert main([*argv, "--reps", "2", "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert [("explanation" in r) for r in rows] == [True, False]
    assert rows[0]["explanation"]["replications"] == 2
    # scoped to the prompts whose floor meets it, the cheapest layout is found
    assert main([*argv, "--reps", "2", "--prompt-range", "0..500"]) == 0
    out = capsys.readouterr().out
    assert "ttft_p99_s <= 0.7 for prompts 0..500 tokens" in out and "<- cheapest" in out


def test_a_bad_prompt_range_flag_is_refused_naming_it(capsys):
    q = str(SCENARIOS / "quickstart.yaml")
    assert main(["capacity", q, "--slo", "ttft_p99<=2s", "--prompt-range", "8k..1k"]) == 2
    err = capsys.readouterr().err
    assert "--prompt-range 8k..1k" in err and "empty range" in err


def test_the_conversation_trace_tail_is_long_prompts_computing():
    """The issue's case: p99 <= 2 s on the Mooncake conversation trace. No tier size helps:
    the floor alone is above 2 s, and the slowest 1% are long prompts whose compute is
    most of their TTFT (one run, about 6 s)."""
    shared_trace("mooncake", "conversation_trace.jsonl")
    r = api.run(SCENARIOS / "mooncake-conversation.yaml")
    why = explain(parse_slo("ttft_p99<=2s"), "as given", [r])
    assert why.floor_fails and why.floor > 2.0
    tail = why.tail
    assert tail is not None and tail.dominant == "compute"
    assert tail.prompt_quantiles()[1] > 32_000
    hi = why.suggested_range()
    assert hi is not None and hi < int(r.requests["input_tokens"].max())
