"""The peer tier (tiers.peer): KV in another engine's host DRAM, read over both NICs.

Hand-computed cases on the toy scenario (tests/conftest.py: 1,000 B per token, 100-token
blocks, prefill t(new) = 0.1 s + (new - 1) ms, no latencies, serial engine). Here: two or
three engines in turn (round_robin), an empty GPU tier (a computed prompt is demoted to
its engine's host tier at once), host writes readable as soon as queued (write_queue:
null), 8 GPUs a node with 1 MB/s of NIC and 2 MB/s of host-to-GPU link each: an engine's
NIC in and NIC out are 8 MB/s each, its host-to-GPU link 16 MB/s; peer T0 10 ms.
"""

from __future__ import annotations

import pytest

from kvsim import api
from kvsim.cache.local import PEER
from kvsim.config.loader import deep_merge
from kvsim.sim.simulation import Simulation
from kvsim.workload.request import Request

from conftest import req, toy

NIC = 8e6  # B/s: nic_per_gpu x 8 GPUs
T0 = 0.010  # s: tiers.peer.t0


def peer_scenario(engines: int = 2, peer: bool = True, **sections):
    base = {
        "node": {"gpus": 8, "nic_per_gpu": "1 MB/s", "h2d_per_gpu": "2 MB/s"},
        "cluster": {"engines": engines, "router": "round_robin", "load_policy": "sync"},
        "tiers": {
            "host": {"enabled": True, "capacity": "1 GB", "t0": "0 s", "write_queue": None},
            "peer": {"enabled": peer, "t0": "10 ms"},
        },
    }
    return toy(**deep_merge(base, sections))


def rows(sc, reqs):
    res = api.run(sc, requests=reqs)
    return list(res.requests.sort_values("id").itertuples()), res.summary


def test_a_peer_read_crosses_both_nics():
    """Request 0 (1,000 tokens, blocks 0-9) is computed on engine 0 and demoted to its
    host tier. Request 1, the same prompt at 10 s, goes to engine 1: nothing local, all
    10 blocks in engine 0's host: a peer read of 999 tokens (the last one is computed)
    = 999,000 B over (e0.nic_out 8 MB/s, e1.nic_in 8 MB/s, e1.h2d 16 MB/s), after T0:
    10 ms + 999,000 / 8e6 = 0.134875 s; then 1 token computed: 0.1 s.
    TTFT = 0.234875 s."""
    r0, r1 = rows(peer_scenario(), [req(0, 0.0, 1000, range(10)), req(1, 10.0, 1000, range(10))])[0]
    assert (r0.engine, r1.engine) == (0, 1)
    assert r0.ttft_s == pytest.approx(1.099)  # 0.1 + 999 ms, computed
    assert r1.tokens_peer == 999
    assert r1.tokens_compute == 1
    assert r1.bytes_peer == pytest.approx(999_000)
    assert r1.load_peer_s == pytest.approx(T0 + 999_000 / NIC)
    assert r1.ttft_s == pytest.approx(T0 + 999_000 / NIC + 0.1)
    assert r1.decision == "restore"


def test_the_reader_nic_binds_when_it_is_the_slowest_link():
    """The same read with the holder's NIC 4x faster (only NIC speed differs, per node
    alike): all NICs are 32 MB/s, so the host-to-GPU link (16 MB/s) binds:
    10 ms + 999,000 / 16e6 = 0.0724375 s, + 0.1 s of compute."""
    sc = peer_scenario(node={"nic_per_gpu": "4 MB/s"})
    r1 = rows(sc, [req(0, 0.0, 1000, range(10)), req(1, 10.0, 1000, range(10))])[0][1]
    assert r1.ttft_s == pytest.approx(T0 + 999_000 / 16e6 + 0.1)


def test_the_holders_nic_is_shared_by_its_readers():
    """Three engines. Request 0 is computed on engine 0; at 10 s the same prompt arrives
    twice, on engines 1 and 2. Both find the blocks in engine 0's host (engine 1 asks
    engine 2 first, then 0; engine 2 asks 0 first) and read them at once: the two reads
    share e0.nic_out (8 MB/s), 4 MB/s each (their own NICs and h2d links are idle):
    10 ms + 999,000 / 4e6 = 0.25975 s each, + 0.1 s compute. Alone it would be 0.134875 s
    of load: the holder's NIC is a shared link."""
    reqs = [req(0, 0.0, 1000, range(10)), req(1, 10.0, 1000, range(10))]
    reqs.append(req(2, 10.0, 1000, range(10)))
    r = rows(peer_scenario(engines=3), reqs)[0]
    assert [x.engine for x in r] == [0, 1, 2]
    for x in r[1:]:
        assert x.tokens_peer == 999
        assert x.load_s == pytest.approx(T0 + 999_000 / (NIC / 2))
        assert x.ttft_s == pytest.approx(T0 + 999_000 / (NIC / 2) + 0.1)


def test_the_holders_own_traffic_slows_a_peer_read():
    """The holder's NIC out also carries its own puts to the remote store: engine 0 has
    just computed request 2 (blocks 100-109) and its put (1 MB at 1e12 B/s server
    rates: the NIC binds) starts at 10.099 s, after its 1.099 s step. Request 1, on
    engine 1 at 10.099 s, reads request 0's blocks from engine 0 (a remote GET would come
    after the peer in the lookup order): over T0 (10 ms) the put moves 80,000 B alone;
    from 10.109 s the two share e0.nic_out at 4 MB/s each until the put's other
    920,000 B are out (0.23 s), then the read has 999,000 - 920,000 = 79,000 B left
    at 8 MB/s: load = 0.01 + 0.23 + 79,000 / 8e6 = 0.249875 s (0.134875 s alone)."""
    sc = peer_scenario(
        remote={
            "enabled": True,
            "bandwidth": "1 TB/s",
            "capacity": "1 GB",
            "t0": "0 s",
            "max_pending_puts": 8,
        }
    )
    # engine 0: request 0 at 0 s, request 2 at 9 s; engine 1: request 1 at 10.099 s
    reqs = [req(0, 0.0, 1000, range(10)), req(3, 5.0, 100, [900])]
    reqs += [req(2, 9.0, 1000, range(100, 110)), req(1, 10.099, 1000, range(10))]
    r = {x.id: x for x in rows(sc, reqs)[0]}
    assert (r[2].engine, r[1].engine) == (0, 1)
    assert r[1].tokens_peer == 999
    assert r[1].load_s == pytest.approx(0.01 + 0.23 + 79_000 / NIC, rel=1e-6)


def test_a_session_resuming_on_another_engine_reads_its_peer():
    """A session's first turn (1,000 tokens, blocks 0-9) runs on engine 0; its second
    (1,500 tokens, blocks 0-14) arrives at 30 s on engine 1. With the peer tier the
    first 1,000 tokens come from engine 0's host (10 ms + 1,000,000 / 8e6 = 0.135 s),
    500 are computed (0.1 + 499 ms); without it, with no remote store, all 1,500 are
    computed again (0.1 + 1,499 ms)."""
    t1 = Request(0, 0.0, 1000, 1, tuple(range(10)), session=7, last_turn=False)
    t2 = Request(1, 30.0, 1500, 1, tuple(range(15)), session=7)
    with_peer = rows(peer_scenario(), [t1, t2])[0][1]
    assert with_peer.engine == 1
    assert with_peer.tokens_peer == 1000
    assert with_peer.tokens_compute == 500
    assert with_peer.ttft_s == pytest.approx(T0 + 1_000_000 / NIC + 0.1 + 0.499)
    without = rows(peer_scenario(peer=False), [t1, t2])[0][1]
    assert without.engine == 1
    assert without.tokens_peer == 0
    assert without.tokens_compute == 1500
    assert without.ttft_s == pytest.approx(0.1 + 1.499)


def test_the_peer_comes_before_the_remote_store_in_the_lookup_order():
    """The same session with a remote store holding the first turn (its put): without
    the peer tier the second turn reads it from the remote store, with it from engine
    0's host (gpu -> host -> nvme -> peer -> remote)."""
    t1 = Request(0, 0.0, 1000, 1, tuple(range(10)), session=7, last_turn=False)
    t2 = Request(1, 30.0, 1500, 1, tuple(range(15)), session=7)
    remote = {"enabled": True, "capacity": "1 GB", "max_pending_puts": 8}
    without = rows(peer_scenario(peer=False, remote=remote), [t1, t2])[0][1]
    assert (without.tokens_remote, without.tokens_peer) == (1000, 0)
    with_peer = rows(peer_scenario(remote=remote), [t1, t2])[0][1]
    assert (with_peer.tokens_remote, with_peer.tokens_peer) == (0, 1000)


def test_a_holder_lost_mid_read_falls_back_to_recompute():
    """Engine 0 goes down at 10.05 s, 40 ms into engine 1's read (which started moving
    at 10.01 s): the read is given up, its 0.04 s x 8 MB/s = 320,000 B moved are counted,
    and the whole prompt is computed from 10.05 s: 0.1 + 999 ms. TTFT = 0.05 + 1.099 s."""
    sc = peer_scenario(faults=[{"kind": "engine_down", "engine": 0, "at": "10.05 s"}])
    r1 = rows(sc, [req(0, 0.0, 1000, range(10)), req(1, 10.0, 1000, range(10))])[0][1]
    assert r1.engine == 1
    assert r1.decision == "fallback"
    assert r1.tokens_peer == 0
    assert r1.tokens_compute == 1000
    assert r1.bytes_peer == pytest.approx(0.04 * NIC)
    assert r1.ttft_s == pytest.approx(0.05 + 1.099)


def test_a_down_engine_is_no_peer_source():
    """Engine 0 is down from 5 s to 20 s (its host tier lost): at 10 s the only engine
    up, engine 1, computes the whole prompt."""
    sc = peer_scenario(faults=[{"kind": "engine_down", "engine": 0, "at": "5 s", "until": "20 s"}])
    r1 = rows(sc, [req(0, 0.0, 1000, range(10)), req(1, 10.0, 1000, range(10))])[0][1]
    assert r1.engine == 1
    assert r1.tokens_peer == 0
    assert r1.tokens_compute == 1000


def test_a_write_in_flight_on_the_holder_is_not_read():
    """The holder's host write lands only after its queue drains: with a 1 B/s GPU-to-host
    link and a write queue, engine 0's demoted blocks are not readable at 10 s (the
    cluster index lists landed blocks only): engine 1 computes the prompt."""
    sc = peer_scenario(
        node={"d2h_per_gpu": "1 B/s"},
        tiers={"host": {"write_queue": "1 GB", "on_backlog": "drop"}},
    )
    r1 = rows(sc, [req(0, 0.0, 1000, range(10)), req(1, 10.0, 1000, range(10))])[0][1]
    assert r1.tokens_peer == 0
    assert r1.tokens_compute == 1000


def test_a_peer_hit_refreshes_the_holders_lru():
    """Engine 0's host holds two prompts (2 MB): A (blocks 0-9) then B (10-19). A peer
    read of A by engine 1 makes A the most recent; engine 0 then computes C (20-29) and
    evicts B, not A."""
    sc = peer_scenario(tiers={"host": {"capacity": "2 MB"}})
    reqs = [
        req(0, 0.0, 1000, range(10)),  # A on e0
        req(1, 5.0, 100, [500]),  # e1
        req(2, 10.0, 1000, range(10, 20)),  # B on e0
        req(3, 15.0, 1000, range(10)),  # A on e1: a peer read of e0's A
        req(4, 20.0, 1000, range(20, 30)),  # C on e0: evicts the least recent
    ]
    sim = Simulation(sc, requests=reqs)
    sim.run()
    held = sim.engines[0].local.host.blocks
    keys = set(held)
    a = {k for k in keys if k in set(sim.tenancy.keys(reqs[0]))}
    b = {k for k in keys if k in set(sim.tenancy.keys(reqs[2]))}
    assert len(a) == 10 and not b


def test_peer_reads_add_up_per_engine():
    """A synthetic run of shared prompts over 3 engines in turn: every request's tokens
    by source add up to its prompt, and the bytes the readers got from peers equal the
    bytes the holders served (per request: bytes_peer; per engine: served_bytes)."""
    sc = peer_scenario(
        engines=3,
        cluster={"load_policy": "async"},
        tiers={"host": {"capacity": "20 MB"}},
        workload={
            "requests": 300,
            "arrivals": {"process": "poisson", "rate": "4/s"},
            "system_prompts": {"count": 4, "tokens": 2000, "share": 0.9},
            "prompt_tokens": {"dist": "uniform", "low": 100, "high": 3000},
        },
    )
    sim = Simulation(sc)
    out = sim.run()
    df = api.collect(out, sc).requests
    parts = ["gpu", "host", "nvme", "remote", "peer", "compute"]
    assert (sum(df[f"tokens_{p}"] for p in parts) == df.input_tokens).all()
    assert df.tokens_peer.sum() > 0
    served = sum(e.served_bytes for e in sim.engines)
    read = sum(e.read_bytes[PEER] for e in sim.engines)
    assert read == pytest.approx(df.bytes_peer.sum())
    assert served == pytest.approx(read)


def test_with_no_shared_blocks_the_peer_tier_changes_nothing():
    """Regression property: prompts that share no block (every request its own ids) give
    the same results with the peer tier as without (the peer lookups find nothing)."""
    reqs = []
    for i in range(40):
        n = 300 + 37 * i
        reqs.append(req(i, 0.5 * i, n, range(100 * i, 100 * i + (n + 99) // 100)))
    with_peer = api.run(peer_scenario(engines=3), requests=reqs).requests
    without = api.run(peer_scenario(engines=3, peer=False), requests=reqs).requests
    assert with_peer.equals(without)


def test_peer_results_do_not_depend_on_the_engines_build_order():
    """Holders are chosen by engine index (index + 1, + 2, ...), never by the order the
    engines were built in."""
    reqs = [req(0, 0.0, 1000, range(10)), req(1, 10.0, 1000, range(10))]
    reqs += [req(2, 10.0, 1000, range(10)), req(3, 20.0, 1000, range(10))]
    sc = peer_scenario(engines=3)
    runs = []
    for order in ([0, 1, 2], [2, 0, 1]):
        out = Simulation(sc, requests=reqs, engine_order=order).run()
        runs.append(api.collect(out, sc).requests)
    assert runs[0].equals(runs[1])
    # requests 1 and 2 read engine 0's host from engines 1 and 2; request 3 is back on
    # engine 0, which holds the blocks itself
    assert list(runs[0].sort_values("id").tokens_peer) == [0, 999, 999, 0]


PLUGIN = """
from kvsim.plugins import LoadPolicy, register

SEEN = []

@register("peer_test_all")
class All(LoadPolicy):
    def restore_blocks(self, request, sources, estimate):
        SEEN.append(list(sources))
        return len(sources)
"""


def test_a_plugin_load_policy_sees_peer_blocks_by_name(tmp_path):
    """A plugin's ``restore_blocks`` is told each block's tier by name: ``peer`` too."""
    import sys

    from kvsim import plugins

    path = tmp_path / "peer_plugin.py"
    path.write_text(PLUGIN)
    sc = peer_scenario(plugins=[str(path)], cluster={"load_policy": "peer_test_all"})
    try:
        r1 = rows(sc, [req(0, 0.0, 1000, range(10)), req(1, 10.0, 1000, range(10))])[0][1]
        seen = [m for name, m in sys.modules.items() if "peer_plugin" in name]
        assert r1.tokens_peer == 999
        assert any(["peer"] * 10 in m.SEEN for m in seen)
    finally:
        plugins._REGISTRY["load_policy"].pop("peer_test_all", None)
