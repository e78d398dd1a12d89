"""Tiers as objects (kvsim.sim.tiers): each tier's figures from its own class, the run's
tiers in their order, the summary built by a loop over them, a built-in kind replaced by a
subclass in its place, and a new kind added: docs/extending.md's worked example, a CXL
memory expander between host DRAM and NVMe, one class and its profile."""

from __future__ import annotations

import math

import pytest

from kvsim import api
from kvsim.cache.local import GPU, HOST, NVME, PEER, REMOTE
from kvsim.config.schema.tiers import LocalTier as TierConfig
from kvsim.kernel.pipe import Pipe
from kvsim.sim.constants import Constants
from kvsim.sim.simulation import Simulation
from kvsim.sim.tiers import (
    KINDS,
    GpuTier,
    HostTier,
    LocalTier,
    NvmeTier,
    PeerTier,
    RemoteTier,
    make_tiers,
)

from conftest import req, toy


class FastHost(HostTier):
    """Host DRAM with a 2 us T0 (a load/store path: no index lookup), summarised as
    ``dram``: a built-in kind replaced in its place by a subclass."""

    @classmethod
    def of(cls, sc):
        config = sc.tiers.host.model_copy(update={"t0": 2e-6, "t0_engine": 1e-6})
        return cls(HOST, "dram", config)


class CxlTier(LocalTier):
    """docs/extending.md's worked example: a CXL memory expander on each engine, looked up
    after host DRAM and before NVMe (blocks host evicts demote into it), 1 GB, read over
    its own 4 MB/s link then the host-to-GPU link, written from host memory over its own
    4 MB/s link, 2 us to the first byte, no codec."""

    order = 1.5  # between host (1) and NVMe (2)

    @classmethod
    def of(cls, sc):
        return cls(-1, "cxl", TierConfig(capacity="1 GB", t0="2 us", t0_engine="1 us"))

    def read_link(self, fabric, index, sc):
        return fabric.link(f"e{index}.cxl", 4e6)

    def write_pipe(self, index, sc):
        return Pipe(f"e{index}.cxl_write", 4e6)

    def route(self, links):
        return (links.own[self.code], links.h2d)


def rows(results):
    return {int(r.id): r for r in results.requests.itertuples()}


def prompt(rid, t, tokens, base):
    """A request of ``tokens`` tokens whose 100-token blocks are base, base + 1, ..."""
    return req(rid, t, tokens, [base + k for k in range(math.ceil(tokens / 100))])


def _host_scenario(t0: str = "100 ms"):
    return toy(
        node={"h2d_per_gpu": "0.125 MB/s"},
        tiers={
            "gpu": {"capacity": "2 MB"},
            "host": {"enabled": True, "capacity": "1 GB", "t0": t0},
        },
    )


def _requests():
    # A computes 1,000 tokens; E pushes it out of the GPU tier to host; C restores it
    return [prompt(0, 0.0, 1000, 0), prompt(4, 5.0, 2000, 200), prompt(2, 10.0, 1001, 0)]


def test_the_tiers_take_their_places_in_code_order():
    sc = _host_scenario()
    tiers = make_tiers(sc)
    assert [t.code for t in tiers] == [GPU, HOST, NVME, REMOTE, PEER]
    assert [t.name for t in tiers] == ["gpu", "host", "nvme", "remote", "peer"]
    assert [type(t) for t in tiers] == [GpuTier, HostTier, NvmeTier, RemoteTier, PeerTier]
    assert tiers[HOST].t0 == pytest.approx(0.1) and tiers[GPU].t0 == 0.0
    run = Constants(sc)
    assert run.t0 == [t.t0 for t in run.tiers]  # the hot loops' lists come from the objects


def test_a_kind_out_of_its_place_is_refused():
    with pytest.raises(ValueError, match="in place 1"):
        make_tiers(_host_scenario(), (GpuTier, NvmeTier, NvmeTier, RemoteTier, PeerTier))


def test_a_kind_replaced_in_its_place_serves_with_its_own_t0_and_name():
    sc = _host_scenario()
    base = Simulation(sc, requests=_requests())
    slow = rows(api.collect(base.run(), sc))[2]
    kinds = (KINDS[GPU], FastHost, *KINDS[NVME:])
    sim = Simulation(sc, requests=_requests(), tier_kinds=kinds)
    out = sim.run()
    fast = api.collect(out, sc).requests.set_index("id").loc[2]
    assert slow.tokens_host == fast.tokens_dram == 1000
    # the same 1 MB over the same 1 MB/s link, the tier's own T0 first
    assert slow.load_host_s == pytest.approx(0.1 + 1.0, rel=1e-3)
    assert fast.load_dram_s == pytest.approx(2e-6 + 1.0, rel=1e-3)
    assert "dram" in out.tiers and "host" not in out.tiers  # the summary loops the tiers
    assert out.tiers["dram"]["hits"] > 0


def _cxl_scenario():
    """GPU 2 MB; host 1 MB (100 ms T0); no NVMe; the CXL tier below host."""
    return toy(
        node={"h2d_per_gpu": "0.125 MB/s"},
        tiers={
            "gpu": {"capacity": "2 MB"},
            "host": {"enabled": True, "capacity": "1 MB", "t0": "100 ms"},
        },
    )


def _cxl_requests():
    """A (1,000 tokens: ten 100 kB blocks) at 0; E (2,000) at 5 s pushes A out of the
    GPU into host; F (1,000) at 7 s pushes E's first MB into host, and host's A into the
    CXL tier (a 1 MB write from host memory at 4 MB/s: in by 7.25 s); C asks A's prompt
    again at 20 s."""
    return [
        prompt(0, 0.0, 1000, 0),
        prompt(4, 5.0, 2000, 200),
        prompt(5, 7.0, 1000, 500),
        prompt(2, 20.0, 1001, 0),
    ]


def test_a_new_tier_kind_takes_code_5_and_its_place_in_the_lookup():
    sc = _cxl_scenario()
    tiers = make_tiers(sc, (*KINDS, CxlTier))
    assert [t.name for t in tiers] == ["gpu", "host", "nvme", "remote", "peer", "cxl"]
    assert tiers[5].code == 5
    run = Constants(sc, (*KINDS, CxlTier))
    assert run.chain == [GPU, HOST, 5, NVME]  # the local tiers, in lookup order
    assert run.direct == [HOST, NVME, 5] and 5 not in run.fetched
    sim = Simulation(sc, requests=_cxl_requests(), tier_kinds=(*KINDS, CxlTier))
    engine = sim.engines[0]
    assert engine.local.chain == [GPU, HOST, 5]  # NVMe disabled
    assert engine.lookup.asked(True) == [GPU, HOST, 5]
    assert engine.routes[5] == (sim.fabric.links["e0.cxl"], engine.h2d)


def test_a_new_tier_kind_serves_restores_over_its_own_route():
    """C's ten blocks are in the CXL tier: a restore of its 1,000 cached tokens (1 MB)
    over the CXL link (4 MB/s) and the host-to-GPU link (1 MB/s): 2 us T0 + 1.0 s; the
    record has the tier's own columns, the summary its own entry."""
    sc = _cxl_scenario()
    res = api.run(sc, requests=_cxl_requests(), tier_kinds=(*KINDS, CxlTier))
    c = res.requests.set_index("id").loc[2]
    assert c.tokens_cxl == 1000 and c.tokens_host == 0 and c.tokens_compute == 1
    assert c.load_cxl_s == pytest.approx(2e-6 + 1.0, rel=1e-6)
    assert c.bytes_cxl == pytest.approx(1e6)
    assert res.summary["token_source_frac"]["cxl"] > 0
    cxl = res.summary["tiers"]["cxl"]
    assert cxl["hits"] == 10 and cxl["read_bytes"] == 1e6
    # host's evictions demote into it (A's ten blocks at 7 s, E's at C's admission), each
    # 100 kB written over its own link
    assert cxl["demotions_in"] == res.summary["tiers"]["host"]["evictions"] >= 10
    assert cxl["write_bytes"] == pytest.approx(1e5 * cxl["demotions_in"])
    assert res.summary["tiers"]["host"]["hits"] == 0  # A had left host for the CXL tier


def test_a_new_kind_must_be_a_local_tier_after_the_built_in_ones():
    sc = _cxl_scenario()
    with pytest.raises(ValueError, match="built-in kinds come first"):
        make_tiers(sc, (GpuTier, HostTier, CxlTier))
    with pytest.raises(ValueError, match="must be a LocalTier"):
        make_tiers(sc, (*KINDS, RemoteTier))


def _cxl_run(tmp_path, **kw):
    """quickstart's workload with two tenants on the CXL tier (realistic figures: 200 GB,
    64 GB/s) below a small host tier, a plugin load policy, the access log kept."""
    from kvsim.api import load

    class RealCxl(CxlTier):
        @classmethod
        def of(cls, sc):
            return cls(-1, "cxl", TierConfig(capacity="200 GB", t0="2 us", t0_engine="1 us"))

        def read_link(self, fabric, index, sc):
            return fabric.link(f"e{index}.cxl", 64e9)

        def write_pipe(self, index, sc):
            return Pipe(f"e{index}.cxl_write", 64e9)

    sc = load(
        "scenarios/quickstart.yaml",
        {
            "workload.requests": 300,
            "run.warmup": "0 s",
            "workload.tenants": {"count": 2},
            "tenancy.isolation": "none",  # (the access log keeps int64 keys)
            "tiers.host.capacity": "5 GB",
            "tiers.gpu.capacity": "5 GB",
            "cluster.load_policy": "skip_short",
            "plugins": ["examples/skip_short.py"],
            **kw,
        },
    )
    return api.run(sc, record_accesses=True, tier_kinds=(*KINDS, RealCxl))


def test_a_new_tier_kind_works_with_tenants_plugins_the_access_log_and_the_time_series(tmp_path):
    """Every part that names the tiers takes the run's: tenancy's stored bytes, a plugin
    policy's sources, the access log (written and read back), the time series, the
    provenance."""
    from kvsim.analysis.streams import accesses_streams, read_accesses
    from kvsim.results.accesses import check
    from kvsim.results.runfolder import write_results
    from kvsim.results.timeseries import timeseries

    res = _cxl_run(tmp_path)
    s = res.summary
    assert s["tiers"]["cxl"]["hits"] > 0 and s["token_source_frac"]["cxl"] > 0
    assert s["provenance"]["tier_kinds"]["cxl"].endswith("RealCxl")
    assert "cxl" in set(res.accesses["tier"].astype(str))
    check(res.accesses, "accesses")
    out = tmp_path / "run"
    write_results(res, out)
    back = read_accesses(out / "accesses.parquet")
    assert len(back) == len(res.accesses)
    assert accesses_streams(out / "accesses.parquet", tier="cxl")  # replayable by name
    assert s["tenants"]  # tenancy's per-tier report ran over every tier
    ts = timeseries(res.requests, [], window=10.0, engines=1)
    assert "tokens_cxl" in ts and ts["tokens_cxl"].sum() == res.requests["tokens_cxl"].sum()


def test_a_new_tier_kind_alone_counts_recomputed_tokens():
    """With only the new tier caching (no HBM prefix cache, no host, NVMe or remote), a
    block computed again after it left the cache counts as recomputed."""
    from kvsim.api import load

    sc = load(
        "scenarios/quickstart.yaml",
        {"workload.requests": 200, "tiers.gpu.capacity": "0 B", "tiers.host.enabled": False,
         "tiers.nvme.enabled": False, "remote.enabled": False},
    )  # fmt: skip
    kinds = (*KINDS, CxlTier)
    run = Constants(sc, kinds)
    assert run.track_seen  # the CXL tier can hold blocks: keys ever kept are tracked


def test_a_new_kind_out_of_the_local_order_is_refused():
    class Far(CxlTier):
        order = 3.5  # after the peers

    with pytest.raises(ValueError, match="not between GPU HBM's"):
        make_tiers(_cxl_scenario(), (*KINDS, Far))
