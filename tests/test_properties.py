"""Property tests over random small scenarios: invariants every run must keep."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvsim.results.records import collect
from kvsim.sim.simulation import Simulation

from conftest import req, toy

SOURCES = ["tokens_gpu", "tokens_host", "tokens_nvme", "tokens_remote", "tokens_compute"]


@st.composite
def cases(draw):
    n = draw(st.integers(1, 40))
    t = 0.0
    reqs = []
    for i in range(n):
        t += draw(st.floats(0, 0.5))
        prefix = draw(st.integers(0, 3))  # which shared prefix family
        blocks = draw(st.integers(1, 6))
        ids = [prefix * 100 + k for k in range(blocks)]
        if draw(st.booleans()):
            ids[-1] = 10_000 + i  # a private tail
        tokens = (blocks - 1) * 100 + draw(st.integers(1, 100))
        reqs.append(req(i, t, tokens, ids))
    sections = {
        "cluster": {
            "engines": draw(st.integers(1, 3)),
            "load_policy": draw(st.sampled_from(["sync", "async", "recompute", "auto"])),
            "router": draw(st.sampled_from(["round_robin", "least_loaded", "cache_affinity"])),
        },
        "tiers": {
            "gpu": {"capacity": f"{draw(st.integers(0, 800))} kB"},
            "host": {
                "enabled": draw(st.booleans()),
                "capacity": f"{draw(st.integers(0, 800))} kB",
                "t0": "10 ms",
            },
            "nvme": {
                "enabled": draw(st.booleans()),
                "capacity": f"{draw(st.integers(0, 2000))} kB",
                "t0": "20 ms",
            },
        },
        "remote": {
            "enabled": draw(st.booleans()),
            "servers": draw(st.integers(1, 3)),
            "sharding": draw(st.sampled_from(["none", "per_rank"])),
            "capacity": f"{draw(st.integers(0, 3000))} kB",
            "bandwidth": f"{draw(st.integers(1, 50))} MB/s",
            "max_pending_puts": draw(st.integers(0, 4)),
        },
        "node": {"pcp": draw(st.sampled_from([1, 2, 4, 8]))},
    }
    if sections["node"]["pcp"] == 1:
        sections["remote"]["sharding"] = "none"  # per_rank needs ranks
    return sections, reqs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_invariants(case):
    sections, reqs = case
    sc = toy(**sections)
    sim = Simulation(sc, requests=reqs)
    res = collect(sim.run(), sc)
    df = res.requests
    # every request arrives once and finishes once
    assert sorted(df["id"]) == [r.id for r in reqs]
    # tokens by source sum to the prompt; at least one token computed
    assert (df[SOURCES].sum(axis=1) == df["input_tokens"]).all()
    assert (df["tokens_compute"] >= 1).all()
    # no negative waits or durations; TTFT decomposes
    for col in ("queue_wait_s", "load_s", "compute_s", "ttft_s", "remote_get_s"):
        assert (df[col] >= -1e-12).all(), col
    parts = df["queue_wait_s"] + df["load_s"] + df["compute_s"] + df["store_s"]
    gap = (parts - df["ttft_s"]).abs()
    assert gap.max() < 1e-9
    assert (df["finish_s"] >= df["arrival_s"]).all()
    # no tier holds more than its capacity (peak included)
    for e in sim.engines:
        for store in e.local.tiers:
            if store is not None:
                assert store.peak <= store.capacity + 1e-6
    if sim.remote is not None:
        for store in sim.remote.stores:
            assert store.peak <= store.capacity + 1e-6
    # bytes read per tier equal tokens restored x bytes/token (no fallback here)
    s = sc.model.kv_bytes
    for tier in ("host", "nvme"):
        restored = df[f"tokens_{tier}"] * s
        assert (df[f"bytes_{tier}"] - restored).abs().max() < 1e-6
    assert (df["bytes_remote"] - df["tokens_remote"] * s).abs().max() < 1e-6
