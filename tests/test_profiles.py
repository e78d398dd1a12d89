"""Shipped profiles: they load, their derived numbers are the documented ones."""

import pytest

from kvsim.config.loader import scenario_from_dict
from kvsim.physics.timing import TimingTable
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
    assert sc.tiers.gpu.capacity == pytest.approx(8 * sc.node.kv_per_gpu)
    t = TimingTable(sc.timing.new_tokens, sc.timing.cached_tokens, sc.timing.seconds)
    assert t(16384, 0) == pytest.approx(0.31, abs=1e-6)
    assert t.throughput(16384) == pytest.approx(52_851, rel=1e-3)
    # super-linear at long contexts: doubling the prompt more than doubles the time
    assert t(131072, 0) > 2 * t(65536, 0) > 4 * t(32768, 0)


def test_default_table_is_the_documented_flop_model():
    sc = scenario("b300-pcp8-glm5")
    rate = derive.calibrate_flops_per_s(16384, 0.31, **derive.GLM5)
    for i, n in enumerate(sc.timing.new_tokens):
        for j, c in enumerate(sc.timing.cached_tokens):
            want = derive.prefill_seconds(n, c, flops_per_s=rate, **derive.GLM5)
            assert sc.timing.seconds[i][j] == pytest.approx(want, abs=1e-6)


def test_gqa_profile_bytes_from_architecture():
    sc = scenario("h100-tp8-llama2-70b")
    assert sc.model.kv_bytes == 327_680  # 80 x 2 x 8 x 128 x 2 B
    assert sc.node.pcp == 1
    assert sc.timing.seconds[0][0] == pytest.approx(0.0555)  # splitwise, 512 tokens


def test_h200_profile_is_slower_by_the_fp8_peak_ratio():
    b300, h200 = scenario("b300-pcp8-glm5"), scenario("h200-tp8-glm5")
    i = b300.timing.new_tokens.index(16384)
    fixed = derive.GLM5["fixed_s"]
    ratio = (h200.timing.seconds[i][0] - fixed) / (b300.timing.seconds[i][0] - fixed)
    assert ratio == pytest.approx(4.5 / 1.98, rel=1e-4)
