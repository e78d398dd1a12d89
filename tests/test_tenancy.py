"""Tenant isolation: namespaced cache keys, the shared-prefix opt-in, quotas, deletion
(explicit, TTL, session end) and per-tenant metrics, on the toy scenario (1,000 B/token,
100-token blocks, t = 0.1 s + (new - 1) ms, remote 1 MB/s with T0 = 0.5 s)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kvsim import api
from kvsim.sim.simulation import Simulation
from kvsim.sim.tenancy import tenant_of
from kvsim.workload.request import Request

from conftest import examples, toy

ALL_TIERS = {
    "tiers": {
        "gpu": {"capacity": "1 MB"},
        "host": {"enabled": True, "capacity": "2 MB"},
        "nvme": {"enabled": True, "capacity": "4 MB"},
    },
    "remote": {"enabled": True, "capacity": "1 GB"},
}


def treq(
    rid: int,
    t: float,
    ids: list[int],
    tenant: int,
    shared: int = 0,
    session: int = -1,
    last: bool = True,
) -> Request:
    return Request(rid, t, 100 * len(ids), 1, tuple(ids), session, tenant, shared, last)


def simulate(sc, reqs) -> tuple[Simulation, object]:
    sim = Simulation(sc, requests=reqs)
    out = sim.run()
    from kvsim.results.records import collect

    return sim, collect(out, sc)


def hits(res) -> dict[int, int]:
    df = res.requests
    return dict(zip(df["id"], df["input_tokens"] - df["tokens_compute"], strict=True))


def keys_of(sim: Simulation, tenant: int) -> list[tuple[str, int]]:
    """(tier, key) of every block of ``tenant`` left anywhere (puts in flight included)."""
    left = [
        (name, k)
        for name, store, shards in sim.tenancy.stores()
        for k in store.blocks
        if tenant_of(k // shards) == tenant
    ]
    if sim.remote is not None:
        shards = sim.remote.shards
        left += [
            ("pending", k)
            for ks in sim.remote.pending
            for k in ks
            if tenant_of(k // shards) == tenant
        ]
    return left


# ---- namespaced keys -----------------------------------------------------------------------

SAME_PROMPT = [
    treq(0, 0.0, [1, 2, 3], tenant=0, shared=2),
    treq(1, 10.0, [1, 2, 3], tenant=1, shared=2),
]


def test_equal_hash_ids_of_two_tenants_never_meet():
    r = hits(api.run(toy(**ALL_TIERS), requests=SAME_PROMPT))
    assert r[1] == 0  # tenant 1 recomputes what tenant 0 cached


def test_one_shared_cache_without_isolation():
    r = hits(api.run(toy(**ALL_TIERS, tenancy={"isolation": "none"}), requests=SAME_PROMPT))
    assert r[1] == 299


def test_shared_prefixes_opt_in_shares_only_the_public_prefix():
    sc = toy(**ALL_TIERS, tenancy={"shared_prefixes": True})
    r = hits(api.run(sc, requests=SAME_PROMPT))
    assert r[1] == 200  # the two public blocks, not tenant 0's own third block


def test_the_same_tenant_still_hits_its_own_blocks():
    reqs = [treq(0, 0.0, [1, 2, 3], tenant=4), treq(1, 10.0, [1, 2, 3], tenant=4)]
    assert hits(api.run(toy(**ALL_TIERS), requests=reqs))[1] == 299


# A random multi-tenant workload: few hash ids, so equal prefixes across tenants are common.
prompts = st.lists(st.integers(0, 5), min_size=1, max_size=5)
workloads = st.lists(
    st.tuples(st.floats(0.0, 0.5), prompts, st.integers(0, 3)), min_size=2, max_size=25
)
layouts = st.sampled_from(
    [
        ALL_TIERS,
        {"tiers": {"gpu": {"capacity": "1 GB"}}},
        {"remote": {"enabled": True, "servers": 8, "sharding": "per_rank"}},
        {"remote": {"enabled": True, "servers": 3}, "cluster": {"engines": 2}},
    ]
)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads, layouts, st.sampled_from(["sync", "async"]))
@example(  # request 4 waits for HBM room, then finds request 2's second block in remote
    [(0.0, [0], 0), (0.0, [0], 0), (0.0, [0, 0], 0), (0.0, [0], 0), (0.0, [0, 0], 0)],
    {"remote": {"enabled": True, "servers": 8, "sharding": "per_rank"}},
    "async",
)
def test_no_request_ever_hits_another_tenants_blocks(work, layout, policy):
    """Property: with isolation on, a request's cached tokens never exceed the longest
    prefix of blocks that its own tenant's other requests computed before it finished
    (whatever tiers, engines and policy). Not "before its start": an asynchronous restore
    set aside until HBM has room looks its prefix up again later, and may find blocks its
    tenant computed meanwhile. Requests arriving together on two engines may finish in
    either order, so "before" is by the clock."""
    reqs, t = [], 0.0
    for i, (gap, ids, tenant) in enumerate(work):
        t += gap
        # a prefix chain: block j's id depends on blocks 0..j, like real hash ids
        chain = [hash(tuple(ids[: j + 1])) % 10_000 for j in range(len(ids))]
        reqs.append(treq(i, t, chain, tenant))
    cluster = {**layout.get("cluster", {}), "load_policy": policy}
    sc = toy(**{**layout, "cluster": cluster})
    res = api.run(sc, requests=reqs)
    got = hits(res)
    finish = dict(zip(res.requests["id"], res.requests["finish_s"], strict=True))
    for r in reqs:
        own = {
            h
            for o in reqs
            if o.tenant == r.tenant and o.id != r.id and finish[o.id] <= finish[r.id]
            for h in o.hash_ids
        }
        best = next((j for j, h in enumerate(r.hash_ids) if h not in own), len(r.hash_ids))
        assert got[r.id] <= min(best * 100, r.input_tokens - 1), r


# ---- quotas -------------------------------------------------------------------------------------


def test_quotas_hold_in_every_tier_and_leave_room_for_others():
    # tenant 0 floods the tiers with distinct prompts; tenant 1 sends one prompt twice
    quota = {"gpu": "300 kB", "host": "500 kB", "nvme": "1 MB", "remote": "2 MB"}
    flood = [treq(i, 0.5 * i, [100 * i + j for j in range(5)], tenant=0) for i in range(40)]
    reqs = [treq(100, 0.1, [7, 8, 9], tenant=1), *flood, treq(101, 30.0, [7, 8, 9], tenant=1)]
    reqs.sort(key=lambda r: r.arrival)
    small = {**ALL_TIERS, "remote": {"enabled": True, "capacity": "4 MB"}}
    sim, res = simulate(toy(**small, tenancy={"quota": quota}), reqs)
    limits = {"gpu": 300e3, "host": 500e3, "nvme": 1e6, "remote": 2e6}
    for name, store, shards in sim.tenancy.stores():
        for peak in store.rules.peak.values():
            assert peak <= limits[name] * (1 / shards if name == "remote" else 1) + 1e-6, name
        assert store.used <= store.capacity
    # under quota, tenant 0's flood cannot push out tenant 1's blocks
    assert hits(res)[101] == 299
    # ... which it does without quotas (the tiers hold 11 MB in all; the flood is 20 MB)
    _, free = simulate(toy(**small), reqs)
    assert hits(free)[101] < 299


def test_a_quota_smaller_than_a_block_stores_nothing_of_that_tenant():
    reqs = [treq(0, 0.0, [1, 2], tenant=0), treq(1, 10.0, [1, 2], tenant=0)]
    sc = toy(tiers={"gpu": {"capacity": "1 MB"}}, tenancy={"quota": {"gpu": "50 kB"}})
    assert hits(api.run(sc, requests=reqs))[1] == 0


# ---- deletion -----------------------------------------------------------------------------------


def test_deleting_a_tenant_removes_it_from_every_tier_and_from_puts_in_flight():
    # tenant 1's put (300 kB at 1 MB/s) is in flight from 0.399 s to 0.699 s when it is
    # deleted at 0.5 s: nothing may land; tenant 0 keeps its blocks
    reqs = [treq(0, 0.0, [1, 2, 3], tenant=1), treq(1, 0.0, [5, 6], tenant=0)]
    sc = toy(**ALL_TIERS, tenancy={"deletions": [{"tenant": 1, "at": "0.5 s"}]})
    sim, res = simulate(sc, reqs)
    assert keys_of(sim, 1) == []
    assert keys_of(sim, 0)  # the other tenant is untouched
    (record,) = sim.tenancy.deletions
    assert record["at"] == 0.5 and record["gone_after_s"] > 0  # waited for the put to settle
    assert res.summary["tenants"]["1"]["deletion_gone_after_max_s"] == record["gone_after_s"]


def test_a_request_running_when_its_tenant_is_deleted_keeps_nothing():
    reqs = [treq(0, 0.0, list(range(10)), tenant=2), treq(1, 20.0, list(range(10)), tenant=2)]
    sc = toy(**ALL_TIERS, tenancy={"deletions": [{"tenant": 2, "at": "0.5 s"}]})
    _, res = simulate(sc, reqs)
    assert hits(res)[1] == 0  # request 0 (0 - 1.099 s) stored nothing


def test_ttl_deletes_idle_blocks_from_every_tier():
    reqs = [treq(0, 0.0, [1, 2, 3], tenant=0), treq(1, 5.0, [1, 2, 3], tenant=0)]
    late = [*reqs, treq(2, 40.0, [1, 2, 3], tenant=0)]
    sc = toy(**ALL_TIERS, tenancy={"ttl": "10 s"})
    _, res = simulate(sc, late)
    r = hits(res)
    assert r[1] == 299  # used again within the TTL
    assert r[2] == 0  # idle for 35 s > 10 s: gone everywhere, recomputed
    # blocks are deleted within a quarter TTL of expiring
    assert 10.0 <= res.summary["tenants"]["0"]["ttl_idle_max_s"] <= 12.5 + 1e-9


def test_session_end_deletes_the_sessions_own_blocks_but_not_its_public_prefix():
    reqs = [
        treq(0, 0.0, [1, 2, 3], tenant=0, shared=1, session=7, last=False),
        treq(1, 5.0, [1, 2, 3, 4], tenant=0, shared=1, session=7, last=True),
        treq(2, 20.0, [1, 2, 3, 4], tenant=0, shared=1),
    ]
    sc = toy(**ALL_TIERS, tenancy={"delete_on_session_end": True, "shared_prefixes": True})
    sim, res = simulate(sc, reqs)
    r = hits(res)
    assert r[1] == 300  # the session's second turn still finds its first turn's blocks
    assert r[2] == 100  # after the session ended only the public block 1 is left
    assert [d["what"] for d in sim.tenancy.deletions] == ["session"]


# ---- per-tenant metrics ----------------------------------------------------------------


def test_per_tenant_metrics_add_up():
    sc = api.load(
        "scenarios/tenant-isolation.yaml", {"workload.requests": 600, "run.warmup": "0 s"}
    )
    res = api.run(sc)
    per = res.summary["tenants"]
    assert sum(v["requests"] for v in per.values()) == res.summary["requests"]
    assert set(per) == {str(t) for t in res.requests["tenant"].unique()}
    for t, v in per.items():
        g = res.requests[res.requests["tenant"] == int(t)]
        assert v["ttft_p99_s"] == pytest.approx(g["ttft_s"].quantile(0.99), rel=0.05)
        assert 0 <= v["hit_ratio"] <= 1
        assert all(b >= 0 for b in v["stored_bytes"].values())
    held = sum(sum(v["stored_bytes"].values()) for v in per.values())
    tiers = res.summary["tiers"]
    used = sum(tiers[k]["used_bytes"] for k in ("gpu", "host") if k in tiers)
    assert held >= used  # the local tiers' bytes are all someone's (remote counted too)


def test_isolation_costs_hits_on_the_shipped_scenario():
    base = {"workload.requests": 1500}
    iso = api.run("scenarios/tenant-isolation.yaml", base).summary["hit_ratio"]
    shared = api.run(
        "scenarios/tenant-isolation.yaml", {**base, "tenancy.isolation": "none"}
    ).summary["hit_ratio"]
    assert shared > iso
