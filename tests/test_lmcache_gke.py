"""The LMCache-on-GKE study (kvsim/reproduce/lmcache_gke.py; issue 41, point 5): its
figures are the page's, its scenarios the page's setup, its requests bench_serving's
generated-shared-prefix benchmark, and its tiers act by mechanism on a small run. The
whole study (55,020 requests, each run twice) runs in `kvsim reproduce lmcache-gke`, not
here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvsim import api
from kvsim.reproduce import lmcache_gke, validation
from kvsim.reproduce.studies import study
from kvsim.units import parse_size

ROOT = Path(__file__).resolve().parent.parent
GKE = ROOT / "scenarios" / "validation" / "lmcache-gke"

# the page's Test 2 and Test 3 tables, as printed: prompt -> (best setup, mean TTFT %,
# input throughput %, mean end-to-end latency %) against HBM only
PAGE = {
    "test2": {
        5000: ("cpu", -18, 16, -14),
        10000: ("cpu", -44, 50, -33),
        50000: ("ssd", -68, 179, -64),
        100000: ("ssd", -79, 264, -73),
    },
    "test3": {
        1000: ("cpu", 5, 1, -1),
        5000: ("cpu", -6, 27, -21),
        10000: ("ssd", 121, 23, -19),
        50000: ("ssd", 48, 69, -41),
        100000: ("ssd", -3, 130, -57),
    },
}


def test_the_study_is_known_and_in_reproduce_all():
    assert study("lmcache-gke") is lmcache_gke
    assert "lmcache-gke" in validation.STUDIES
    assert {f.kind for f in lmcache_gke.FIGURES} == {"predicted"}  # nothing fitted


def test_figures_are_the_pages_changes_as_ratios():
    got = {f.name: f.paper for f in lmcache_gke.FIGURES}
    want = {}
    for test, rows in PAGE.items():
        for prompt, (best, ttft, tput, e2e) in rows.items():
            key = f"{test}.{prompt // 1000}k"
            want |= {
                f"ttft_ratio.{key}": 1 + ttft / 100,
                f"throughput_ratio.{key}": 1 + tput / 100,
                f"e2e_ratio.{key}": 1 + e2e / 100,
            }
            case = next(c for c in lmcache_gke.CASES if (c.test, c.prompt) == (test, prompt))
            assert case.best == best
    assert got == pytest.approx(want)


def test_scenarios_are_the_pages_setup():
    hbm, cpu, ssd = (api.load(GKE / f"{n}.yaml") for n in ("base", "cpu", "ssd"))
    for sc in (hbm, cpu, ssd):
        assert sc.model.kv_bytes == 327_680  # Llama-70B: 80 layers x 8 KV heads x 128 x 2 x 2 B
        assert sc.node.gpus == 8
        assert sc.engine.mode == "colocated"
        assert sc.workload.concurrency == lmcache_gke.CONCURRENCY == 200
    assert not hbm.tiers.host.enabled and not hbm.tiers.nvme.enabled
    assert cpu.tiers.host.enabled and not cpu.tiers.nvme.enabled
    assert cpu.tiers.host.capacity == parse_size("1 TiB")
    assert ssd.tiers.host.capacity == parse_size("1 TiB")
    assert ssd.tiers.nvme.enabled and ssd.tiers.nvme.capacity == parse_size("5 TiB")


def test_groups_fill_each_tests_total():
    """A group holds its system prompt once and 20 x (256 + 512) tokens of questions and
    outputs: the page's example command (80 groups of a 1,000-token prompt) holds 1.31 M
    tokens, inside Test 1's 1.1-1.3 M as printed to two figures. Each test's workload lies
    within its stated range."""
    per = 20 * (256 + 512)
    assert 80 * (1000 + per) == 1_308_800
    for test, (lo, hi) in lmcache_gke.TOTALS.items():
        for prompt in (1000, 5000, 10000, 50000, 100000):
            n = lmcache_gke.groups(test, prompt)
            assert lo <= n * (prompt + per) <= hi, (test, prompt, n)


def test_requests_are_shared_prefix_groups_shuffled_at_800_per_second():
    sc = api.load(GKE / "base.yaml")
    bt = sc.workload.block_tokens
    reqs = lmcache_gke.shared_prefix(sc, 30, 10_000)
    assert len(reqs) == 600
    assert {r.input_tokens for r in reqs} == {10_256}
    assert {r.output_tokens for r in reqs} == {512}
    shared = 10_000 // bt
    heads = [r.hash_ids[:shared] for r in reqs]
    assert len(set(heads)) == 30  # one system prompt a group ...
    assert all(heads.count(h) == 20 for h in set(heads))  # ... of 20 requests
    own = [r.hash_ids[shared:] for r in reqs]
    assert len({k for ids in own for k in ids}) == sum(len(ids) for ids in own)  # unique
    assert not {k for ids in own for k in ids} & {k for h in heads for k in h}
    assert len(set(heads[:20])) > 1  # shuffled, not group after group
    t = np.array([r.arrival for r in reqs])
    assert (np.diff(t) >= 0).all()
    # exponential gaps at 800/s: the mean of 599 gaps within 4 standard errors (4 / sqrt(599))
    assert np.diff(t).mean() == pytest.approx(1 / 800, rel=4 / np.sqrt(599))
    again = lmcache_gke.shared_prefix(sc, 30, 10_000)
    assert [(r.arrival, r.hash_ids) for r in again] == [(r.arrival, r.hash_ids) for r in reqs]


def test_tiers_by_mechanism_on_a_small_pool():
    """Twelve groups of 20 requests with a 5,000-token system prompt (60,000 shared
    tokens) on an HBM pool shrunk to about 20,000 tokens: HBM alone keeps few prompts
    until their group comes back, the CPU tier keeps every one. With the CPU tier, later
    requests load their prompt instead of computing it: host tokens served, less
    computed, a shorter mean TTFT and end-to-end latency and a higher input throughput.
    The local SSD below it reads nothing here (1 TiB of CPU RAM holds it all), so its
    figures stay within 5% of CPU RAM alone's (its write queue may hold a step)."""
    sc = api.load(GKE / "base.yaml")
    reqs = lmcache_gke.shared_prefix(sc, 12, 5_000)
    # 8 x 1 GB / 40,960 B a token per GPU: ~24,400 tokens, all of it the prefix cache
    small = ["node.kv_per_gpu=1 GB", "tiers.gpu.capacity=8 GB"]
    hbm = lmcache_gke.measures(GKE / "base.yaml", reqs, small)
    cpu = lmcache_gke.measures(GKE / "cpu.yaml", reqs, small)
    ssd = lmcache_gke.measures(GKE / "ssd.yaml", reqs, small)
    assert cpu["ttft"] < hbm["ttft"]
    assert cpu["e2e"] < hbm["e2e"]
    assert cpu["throughput"] > hbm["throughput"]
    assert ssd == pytest.approx(cpu, rel=0.05)
