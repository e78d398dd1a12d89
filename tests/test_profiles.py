"""Shipped profiles: they load, their derived numbers are the documented ones."""

import pytest

from kvsim.config.loader import scenario_from_dict
from kvsim.config.pools import pools
from kvsim.physics.step import scenario_lone_seconds
from kvsim.profiles import derive, list_profiles

WORKLOAD = {
    "kind": "synthetic",
    "requests": 1,
    "arrivals": {"process": "constant", "rate": "1/s"},
    "prompt_tokens": {"dist": "fixed", "value": 10},
}


def scenario(profile):
    return scenario_from_dict({"name": "p", "profile": profile, "workload": WORKLOAD})


@pytest.mark.parametrize("name", [p["name"] for p in list_profiles()])
def test_every_profile_loads(name):
    sc = scenario(name)
    assert sc.model.kv_bytes > 0 and sc.node.gpus > 0


def test_default_profile_numbers():
    sc = scenario("b300-pcp8-glm5")
    assert sc.model.kv_bytes == 51_168  # 78 layers x 656 B (vLLM FP8 MLA format)
    assert sc.node.pcp == 8 and sc.node.gpus == 8
    assert sc.node.hbm_per_gpu == 288e9 and sc.node.host_dram == 2e12
    assert sc.node.nic_per_gpu == 100e9  # 800 Gb/s
    # HBM pools: 8 x (288 GB x 0.9 - 744 GB / 8 weights - 15 GB reserve) = 1,209.6 GB of
    # KV; the prefix cache (1.2 TB) fits in it
    assert pools(sc).node_kv == pytest.approx(1209.6e9)
    assert sc.tiers.gpu.capacity <= pools(sc).node_kv
    t = scenario_lone_seconds(sc)
    assert t(16384, 0) == pytest.approx(0.31, rel=1e-6)  # C: calibrated, not predicted
    assert 16384 / t(16384, 0) == pytest.approx(52_851, rel=1e-3)
    # super-linear at long contexts: doubling the prompt more than doubles the time
    assert t(131072, 0) > 2 * t(65536, 0) > 4 * t(32768, 0)


def test_default_roofline_rate_is_the_documented_calibration():
    sc = scenario("b300-pcp8-glm5")
    r = sc.timing.roofline
    assert r is not None and sc.timing.new_tokens is None
    want = derive.calibrate_roofline_flops(derive.B300_GLM5_ROOFLINE, 16384, 0.31, 8192)
    assert r.achievable_flops == pytest.approx(want, rel=1e-6)
    # the calibration's inputs are the profile's
    mine = derive.B300_GLM5_ROOFLINE
    assert r.fixed == mine["fixed"] and r.pair_flops == mine["pair_flops"]
    assert r.linear_flops_per_token == mine["linear_flops_per_token"]
    assert sc.node.hbm_bandwidth_per_gpu * sc.node.gpus == mine["hbm_bandwidth"]
    assert r.dense_weight_bytes == mine["dense_weight_bytes"]
    assert r.expert_weight_bytes == mine["expert_weight_bytes"]


def test_gqa_profile_bytes_from_architecture():
    sc = scenario("h100-tp8-llama2-70b")
    assert sc.model.kv_bytes == 327_680  # 80 x 2 x 8 x 128 x 2 B
    assert sc.node.pcp == 1
    assert sc.timing.seconds[0][0] == pytest.approx(0.0555)  # splitwise, 512 tokens


def test_h200_table_is_the_documented_flop_model():
    """The H200 table: the single-request FLOP model calibrated to 0.31 s at 16k on B300,
    its rate scaled by the FP8 peak ratio H200/B300 = 1.98/4.5 (an estimate)."""
    h200 = scenario("h200-tp8-glm5")
    rate = derive.calibrate_flops_per_s(16384, 0.31, **derive.GLM5) * 1.98 / 4.5
    t = h200.timing
    assert t.new_tokens is not None and t.cached_tokens is not None and t.seconds is not None
    for i, n in enumerate(t.new_tokens):
        for j, c in enumerate(t.cached_tokens):
            want = derive.prefill_seconds(n, c, flops_per_s=rate, **derive.GLM5)
            assert t.seconds[i][j] == pytest.approx(want, abs=1e-6)
