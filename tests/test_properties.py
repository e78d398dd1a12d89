"""Property tests over random small scenarios: invariants every run must keep.

Scenarios draw engines, tiers, capacities, bandwidths, policies, routers, tenants and
fault schedules; workloads are random prefix families with private tails."""

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvsim import api
from kvsim.results.records import COLUMN_NAMES, collect
from kvsim.sim.simulation import Simulation
from kvsim.workload.request import Request
from kvsim.workload.stats import trace_stats

from conftest import examples, toy

COL_DECISION = COLUMN_NAMES.index("decision")
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
        tenant = draw(st.integers(0, 2))
        reqs.append(Request(i, t, tokens, 1, tuple(ids), -1, tenant, draw(st.integers(0, 2))))
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
    if draw(st.booleans()):
        sections["remote"]["timeout"] = f"{draw(st.integers(1, 500))} ms"
    sections["tenancy"] = {
        "isolation": draw(st.sampled_from(["tenant", "none"])),
        "shared_prefixes": draw(st.booleans()),
    }
    sections["faults"] = draw(st.lists(fault(sections), max_size=3))
    return sections, reqs


@st.composite
def fault(draw, sections):
    """One random fault that fits the drawn scenario."""
    at = draw(st.floats(0, 8))
    until = draw(st.one_of(st.none(), st.floats(at + 0.01, 12)))
    remote = sections["remote"]["enabled"]
    kinds = ["slow_link", "engine_down"] + (["server_down", "stall_burst"] if remote else [])
    kind = draw(st.sampled_from(kinds))
    f = {"kind": kind, "at": f"{at} s"}
    if until is not None or kind == "stall_burst":
        f["until"] = f"{until if until is not None else at + 1} s"
    if kind == "server_down":
        f["server"] = draw(st.integers(0, sections["remote"]["servers"] - 1))
    elif kind == "slow_link":
        f["target"] = "remote" if remote else "network"
        f["factor"] = draw(st.floats(0.05, 2))
    elif kind == "engine_down":
        f["engine"] = draw(st.integers(0, sections["cluster"]["engines"] - 1))
        f["requests"] = draw(st.sampled_from(["reroute", "drop"]))
    else:
        f["probability"] = draw(st.floats(0, 1))
        f["duration"] = f"{draw(st.integers(0, 1000))} ms"
    return f


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_invariants(case):
    sections, reqs = case
    sc = toy(**sections)
    sim = Simulation(sc, requests=reqs)
    res = collect_any(sim.run(), sc)
    if res is None:
        return  # every request was dropped (an engine down from the start): checked there
    df = res.requests
    # every request arrives once and is reported once: finished, or dropped with a reason
    assert sorted(df["id"]) == [r.id for r in reqs]
    dropped = df["decision"] == "dropped"
    assert (df.loc[dropped, "drop_reason"] != "").all()
    assert (df.loc[~dropped, "drop_reason"] == "").all()
    assert res.summary["requests_dropped"] == dropped.sum()
    df = df[~dropped]
    # tokens by source sum to the prompt; at least one token computed
    assert (df[SOURCES].sum(axis=1) == df["input_tokens"]).all()
    assert (df["tokens_compute"] >= 1).all()
    # no negative waits or durations; TTFT decomposes (time lost on failed engines too)
    for col in ("queue_wait_s", "load_s", "compute_s", "ttft_s", "remote_get_s", "lost_s"):
        assert (df[col].fillna(0) >= -1e-12).all(), col
    parts = df["lost_s"] + df["queue_wait_s"] + df["load_s"] + df["compute_s"] + df["store_s"]
    assert (parts - df["ttft_s"]).abs().max() < 1e-9
    assert (df["finish_s"] >= df["arrival_s"]).all()
    # no tier holds more than its capacity (peak included)
    for e in sim.engines:
        for store in e.local.tiers:
            if store is not None:
                assert store.peak <= store.capacity + 1e-6
    if sim.remote is not None:
        for _, store in sim.remote.all_stores():
            assert store.peak <= store.capacity + 1e-6
    # bytes read per tier: each request's bytes are its restored tokens (a GET abandoned
    # part-way reads fewer), and the tiers' own counters equal the sums over requests
    # (a fallback's reads past its first remote block are read but not used; a re-routed
    # request's bytes add up over its attempts)
    s = sc.model.kv_bytes
    whole = df[(df["decision"] != "fallback") & (df["retries"] == 0)]
    for tier in ("host", "nvme", "remote"):
        assert (whole[f"bytes_{tier}"] - whole[f"tokens_{tier}"] * s).abs().le(1e-6).all()
    everyone = res.requests  # warm-up and dropped rows included
    tiers = res.summary["tiers"]
    # bytes stored: never negative; the remote store keeps at most what puts carried
    assert all(v >= 0 for v in res.summary["tier_write_bytes"].values())
    if "remote" in tiers:
        assert tiers["remote"]["write_bytes"] <= tiers["remote"]["put_bytes"] * (1 + 1e-9)
    for tier in ("host", "nvme", "remote"):
        if tier in tiers:
            total = everyone[f"bytes_{tier}"].sum()
            assert tiers[tier]["read_bytes"] == pytest.approx(total, rel=1e-9, abs=1e-6)
    # ... and what the fabric moved: every restore crosses its engine's PCIe link once
    # (more when an engine failed mid-restore: those bytes moved for nothing)
    links = sim.fabric.links
    moved = sum(links[f"e{e.index}.h2d"].bytes for e in sim.engines)
    restored = everyone[["bytes_host", "bytes_nvme", "bytes_remote"]].to_numpy().sum()
    if any(f["kind"] == "engine_down" for f in sections["faults"]):
        assert moved >= restored * (1 - 1e-6) - 1e-3
    else:
        assert moved == pytest.approx(restored, rel=1e-6, abs=1e-3)


def collect_any(out, sc):
    """Results, or None when nothing finished (all dropped): then every request must be
    accounted for as dropped."""
    if not out.rows or all(r[COL_DECISION] == "dropped" for r in out.rows):
        assert out.dropped == out.arrived == len(out.rows)
        return None
    return collect(out, sc)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_unlimited_gpu_tier_hits_what_trace_stats_reuse_says(case):
    """One engine, a GPU tier that never evicts, nothing else: the hit ratio is exactly
    the unlimited-cache prefix reuse ratio of ``kvsim trace stats``."""
    _, reqs = case
    sc = toy(tiers={"gpu": {"capacity": "1 TB"}}, tenancy={"isolation": "none"})
    res = api.run(sc, requests=reqs)
    assert res.summary["hit_ratio"] == pytest.approx(
        trace_stats(reqs, 100)["prefix_reuse_ratio"], rel=1e-12, abs=1e-12
    )


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.randoms(use_true_random=False))
def test_results_do_not_depend_on_the_order_engines_are_built(case, rnd):
    sections, reqs = case
    sc = toy(**sections)
    order = list(range(sc.cluster.engines))
    rnd.shuffle(order)
    a = Simulation(sc, requests=reqs).run()
    b = Simulation(sc, requests=reqs, engine_order=order).run()
    if not a.rows:
        assert not b.rows
        return
    pd.testing.assert_frame_equal(
        pd.DataFrame(list(a.rows)), pd.DataFrame(list(b.rows)), check_exact=True
    )
