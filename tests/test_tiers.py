"""Tiers as objects (kvsim.sim.tiers): each tier's figures from its own class, the run's
tiers in their order, the summary built by a loop over them, and a tier class plugged in
(docs/extending.md's worked example: CXL memory in the host tier's place)."""

from __future__ import annotations

import math

import pytest

from kvsim import api
from kvsim.cache.local import GPU, HOST, NVME, PEER, REMOTE
from kvsim.sim.constants import Constants
from kvsim.sim.simulation import Simulation
from kvsim.sim.tiers import KINDS, GpuTier, HostTier, NvmeTier, PeerTier, RemoteTier, make_tiers

from conftest import req, toy


class CxlTier(HostTier):
    """CXL-attached memory in the host tier's place: a load/store path with ~2 us to the
    first byte (no index lookup, no connection), no codec; summarised as ``cxl``."""

    @classmethod
    def of(cls, sc):
        return cls(HOST, "cxl", t0=2e-6, t0_engine=1e-6)


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


def test_a_cxl_tier_plugged_in_serves_with_its_own_t0_and_name():
    sc = _host_scenario()
    base = Simulation(sc, requests=_requests())
    slow = rows(api.collect(base.run(), sc))[2]
    kinds = (KINDS[GPU], CxlTier, *KINDS[NVME:])
    sim = Simulation(sc, requests=_requests(), tier_kinds=kinds)
    out = sim.run()
    fast = rows(api.collect(out, sc))[2]
    assert slow.tokens_host == fast.tokens_host == 1000
    # the same 1 MB over the same 1 MB/s link, the tier's own T0 first
    assert slow.load_host_s == pytest.approx(0.1 + 1.0, rel=1e-3)
    assert fast.load_host_s == pytest.approx(2e-6 + 1.0, rel=1e-3)
    assert "cxl" in out.tiers and "host" not in out.tiers  # the summary loops the tiers
    assert out.tiers["cxl"]["hits"] > 0
