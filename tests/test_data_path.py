"""The data path: what each restore crosses on its way into HBM (hand-computed cases)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvsim import api
from kvsim.config.loader import scenario_from_dict
from kvsim.sim.simulation import Simulation
from kvsim.workload.request import Request

from conftest import examples, req, toy

GIB = 2**30


def get_bandwidth(sharding: str, servers: int, **remote) -> float:
    """GiB/s of a 16k-token GET on the default profile, alone: a first request stores the
    prompt, a second (100 s later, GPU tier empty) reads it back from the remote store."""
    sc = scenario_from_dict(
        {
            "name": "get",
            "cluster": {"load_policy": "sync"},
            "remote": {"sharding": sharding, "servers": servers, **remote},
            "tiers": {
                "gpu": {"capacity": "0 B"},
                "host": {"enabled": False},
                "nvme": {"enabled": False},
            },
            "workload": {
                "kind": "synthetic",
                "requests": 1,
                "arrivals": {"process": "constant", "rate": "1/s"},
                "prompt_tokens": {"dist": "fixed", "value": 16384},
            },
        }
    )
    ids = tuple(range(32))
    reqs = [Request(0, 0.0, 16384, 1, ids), Request(1, 100.0, 16384, 1, ids)]
    row = api.run(sc, requests=reqs).requests.iloc[1]
    assert row.tokens_remote == 16383
    return row.bytes_remote / row.remote_get_s / GIB


def test_the_studys_get_bandwidths_on_the_default_profile():
    """C: the server's bandwidth and per-op cost are calibrated to these two figures."""
    assert get_bandwidth("none", 1) == pytest.approx(1.71, rel=0.05)
    assert get_bandwidth("per_rank", 8) == pytest.approx(10.76, rel=0.05)


def test_an_unsharded_get_over_8_servers_is_no_faster_than_per_rank():
    """Unsharded, one rank's client connection carries the whole GET: spreading the keys
    over 8 servers cannot beat giving each rank its own server."""
    unsharded = get_bandwidth("none", 8)
    assert unsharded <= get_bandwidth("per_rank", 8)
    assert unsharded == pytest.approx(8.0, rel=1e-3)  # the profile's client_bandwidth
    # without the connection limit the rank's own NIC and PCIe would allow more
    assert get_bandwidth("none", 8, client_bandwidth=None) > 10.76


def nvme_hit(path: str):
    """A computes 1,000 tokens (1 MB), which fall to NVMe (no GPU or host tier); B reads
    them back: drives 2 MB/s in all, host-to-GPU 1 MB/s, T0 0 (the toy scenario)."""
    sc = toy(
        node={"nvme_read_per_drive": "0.25 MB/s", "h2d_per_gpu": "0.125 MB/s"},
        tiers={"nvme": {"enabled": True, "capacity": "1 GB", "t0": "0 s", "path": path}},
    )
    reqs = [req(0, 0.0, 1000, list(range(10))), req(1, 10.0, 1001, list(range(11)))]
    return {int(r.id): r for r in api.run(sc, requests=reqs).requests.itertuples()}[1]


def test_gds_reads_straight_into_hbm_and_bounce_crosses_the_host_link():
    gds, bounce = nvme_hit("gds"), nvme_hit("bounce")
    assert gds.tokens_nvme == bounce.tokens_nvme == 1000
    assert gds.load_nvme_s == pytest.approx(0.5)  # 1 MB at the drives' 2 MB/s
    assert bounce.load_nvme_s == pytest.approx(1.0)  # then the 1 MB/s host-to-GPU link


def test_second_hit_admits_on_the_second_sighting():
    """GPU tier second_hit: A's blocks are only remembered; B (the same prompt) computes
    it all again and now they are cached; C hits them. With admission all, B hits."""

    def run(admission):
        sc = toy(tiers={"gpu": {"capacity": "1 GB", "admission": admission}})
        reqs = [req(i, 10.0 * i, 1000, list(range(10))) for i in range(3)]
        return [r.tokens_gpu for r in api.run(sc, requests=reqs).requests.itertuples()]

    assert run("second_hit") == [0, 0, 999]
    assert run("all") == [0, 999, 999]


def test_second_hit_on_a_lower_tier_lets_refused_blocks_fall_through():
    """Host second_hit: blocks evicted from the GPU tier (capacity 0) the first time go
    on to NVMe; the second time host keeps them."""
    sc = toy(
        tiers={
            "host": {"enabled": True, "capacity": "1 GB", "t0": "0 s", "admission": "second_hit"},
            "nvme": {"enabled": True, "capacity": "1 GB", "t0": "0 s"},
        }
    )
    reqs = [req(0, 0.0, 1000, list(range(10))), req(1, 10.0, 1000, list(range(10, 20)))]
    sim = Simulation(sc, requests=reqs)
    sim.run()
    local = sim.engines[0].local
    assert len(local.host) == 0 and len(local.nvme) == 20  # every block was a first sighting
    assert local.admission[1].rejected == 20


def test_remote_second_hit_puts_only_blocks_offered_before():
    sc = toy(remote={"enabled": True, "admission": "second_hit"})
    reqs = [req(i, 10.0 * i, 1000, list(range(10))) for i in range(3)]
    sim = Simulation(sc, requests=reqs)
    res = api.collect(sim.run(), sc)
    r = [row.tokens_remote for row in res.requests.itertuples()]
    assert r == [0, 0, 999]  # the first put was skipped, the second stored them


def test_what_a_second_hit_gpu_tier_refuses_falls_to_host():
    sc = toy(
        tiers={
            "gpu": {"capacity": "1 GB", "admission": "second_hit"},
            "host": {"enabled": True, "capacity": "1 GB", "t0": "0 s"},
        },
        node={"h2d_per_gpu": "125 MB/s"},
    )
    reqs = [req(i, 10.0 * i, 1000, list(range(10))) for i in range(2)]
    b = list(api.run(sc, requests=reqs).requests.itertuples())[1]
    assert b.tokens_host == 999 and b.tokens_gpu == 0


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(1, 350), st.integers(0, 3)), min_size=1, max_size=20))
def test_bytes_written_to_a_tier_are_the_blocks_first_stored_there(spec):
    """Counter check against an independent count: with no GPU room, every block a prompt
    leaves falls to host; host's write bytes are each distinct block's bytes the first time
    it lands there (the prompt's last block is partial), refreshes adding nothing."""
    reqs = []
    for i, (tokens, family) in enumerate(spec):
        n = -(-tokens // 100)
        reqs.append(req(i, 5.0 * i, tokens, [family * 100 + k for k in range(n)]))
    sc = toy(tiers={"host": {"enabled": True, "capacity": "1 GB", "t0": "0 s"}})
    res = api.run(sc, requests=reqs)
    first: dict[int, float] = {}
    for r in reqs:
        for k, key in enumerate(r.hash_ids):
            size = min(100, r.input_tokens - 100 * k) * 1000.0
            first.setdefault(key, size)
    written = res.summary["tier_write_bytes"]
    assert written["gpu"] == 0.0  # a 0-byte GPU tier stores nothing
    assert written["host"] == pytest.approx(sum(first.values()))
