"""Miss-ratio curves: one pass, and exactly the simulator's own LRU tier."""

import json

import pytest

from kvsim import api
from kvsim.analysis.mrc import miss_ratio_curve
from kvsim.cli import main
from kvsim.config.loader import scenario_from_dict
from kvsim.workload.mooncake import read_mooncake
from kvsim.workload.request import Request
from kvsim.workload.stats import trace_stats

from conftest import ROOT, shared_trace

KV = 51168


def simulated_hit_ratio(path, capacity_tokens):
    """One serial engine in arrival order (each prompt admitted before the next is looked
    up, as the curve assumes), an LRU GPU tier of this capacity, nothing else."""
    sc = scenario_from_dict(
        {
            "name": "mrc-check",
            "cluster": {"engines": 1, "load_policy": "recompute"},
            "engine": {"batching": "serial"},
            "tiers": {
                "gpu": {"capacity": f"{capacity_tokens * KV} B"},
                "host": {"enabled": False},
                "nvme": {"enabled": False},
            },
            "remote": {"enabled": False},
            "run": {"warmup": "0 s"},  # the curve counts every request
            "workload": {"kind": "mooncake", "path": str(path)},
        }
    )
    return api.run(sc).summary["hit_ratio"]


@pytest.mark.parametrize("capacity", [512 * 40, 512 * 600, 512 * 3000])
def test_matches_the_simulator_on_the_shipped_sample(capacity):
    path = ROOT / "traces" / "sample_chat.jsonl"
    curve = miss_ratio_curve(read_mooncake(path), 512)
    assert curve.hit_ratio(capacity) == simulated_hit_ratio(path, capacity)


def test_matches_the_simulator_on_the_mooncake_conversation_trace():
    path = shared_trace("mooncake", "conversation_trace.jsonl")
    curve = miss_ratio_curve(read_mooncake(path), 512)
    for capacity in (512 * 50, 512 * 2000, 512 * 20000):
        assert curve.hit_ratio(capacity) == simulated_hit_ratio(path, capacity)


def test_hand_computed_curve():
    # blocks of 10 tokens; A=[1,2] 20 tok, B=[3] 10 tok, A again, then C=[1,2,4] 25 tok
    reqs = [
        Request(0, 0, 20, 1, (1, 2)),
        Request(1, 1, 10, 1, (3,)),
        Request(2, 2, 20, 1, (1, 2)),
        Request(3, 3, 25, 1, (1, 2, 4)),
    ]
    c = miss_ratio_curve(reqs, 10)
    # request 2 hits 19 tokens (whole prompt less one) when blocks 1,2 survive B: capacity
    # 30 (1, 2 and 3 fit); request 3 hits 20 tokens when 1, 2 are held: capacity >= 20
    assert c.hit_ratio(19) == 0.0
    assert c.hit_ratio(20) == pytest.approx(20 / 75)
    assert c.hit_ratio(30) == pytest.approx(39 / 75)
    assert c.unlimited == pytest.approx(39 / 75)
    assert c.working_set_tokens == 30


def test_unlimited_cache_equals_the_reuse_ratio():
    # both apply the last-token rule: exact up to float summation order
    path = ROOT / "traces" / "sample_chat.jsonl"
    st = trace_stats(read_mooncake(path), 512)
    curve = miss_ratio_curve(read_mooncake(path), 512)
    assert curve.unlimited == pytest.approx(st["prefix_reuse_ratio"], rel=1e-12)


def test_mrc_command(tmp_path, capsys):
    path = ROOT / "traces" / "sample_chat.jsonl"
    assert main(["trace", "mrc", str(path), "--json", "--points", "8"]) == 0
    points = json.loads(capsys.readouterr().out)
    assert set(points[0]) == {"capacity_tokens", "hit_ratio"}
    assert points[-1]["capacity_tokens"] is None
    ratios = [p["hit_ratio"] for p in points]
    assert ratios == sorted(ratios)
    plot = tmp_path / "mrc.png"
    assert main(["trace", "mrc", str(path), "--plot", str(plot)]) == 0
    assert "hit ratio" in capsys.readouterr().out
    assert plot.stat().st_size > 10_000
