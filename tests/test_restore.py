"""Restores (kvsim.sim.restore) on tiny hand-computed cases: sync holds the engine, async
lets it serve others, stalls, client timeouts, per-rank shards, local tiers in parallel
(toy scenario: 1,000 B/token, 100-token blocks, t = 0.1 s + (new - 1) ms, remote 1 MB/s
with T0 = 0.5 s, no latencies)."""

import pytest

from kvsim import api

from conftest import req, toy
from sim_cases import REMOTE_ON, by_id, one_remote_get


def test_sync_restore_holds_the_engine_idle():
    res = one_remote_get("sync")
    r = by_id(res)
    assert r[0].ttft_s == pytest.approx(0.399)
    a, b = r[1], r[2]
    assert a.tokens_remote == 299 and a.tokens_compute == 1
    assert a.load_s == pytest.approx(0.799) and a.remote_get_s == pytest.approx(0.299)
    assert a.ttft_s == pytest.approx(0.899)
    # B waits for A's whole restore + compute although the GPU computes nothing meanwhile
    assert b.start_s == pytest.approx(10.899)
    assert b.queue_wait_s == pytest.approx(0.799)
    assert b.ttft_s == pytest.approx(1.098)
    assert res.engines[0]["blocked_s"] == pytest.approx(0.799)
    # GPU (SM) work: each step's time less the table's fixed part t(1, 0) = 0.1 s
    assert res.engines[0]["busy_s"] == pytest.approx(0.299 + 0.0 + 0.199)


def test_async_restore_lets_the_engine_serve_others():
    r = by_id(one_remote_get("async"))
    a, b = r[1], r[2]
    assert b.start_s == pytest.approx(10.1) and b.ttft_s == pytest.approx(0.299)
    # B's put (200 kB from 10.399) shares the server with A's GET (from 10.5): 101 kB of the
    # put are done alone, the other 99 kB at 0.5 MB/s until 10.698 while A's GET moves
    # 99 kB; A's last 200 kB then take 0.2 s: KV in at 10.898, compute 0.1 s, no wait
    assert a.remote_get_s == pytest.approx(0.398)
    assert a.ttft_s == pytest.approx(0.998)
    assert a.queue_wait_s == pytest.approx(0.0)


def test_async_requeued_request_keeps_its_arrival_order():
    # C (cold, 1000 tokens = 1.099 s) arrives at 10.05 and runs until 11.149; A's KV is in
    # at 10.799 and B (10.1) waits; A arrived first so it goes before B.
    reqs = [
        req(0, 0.0, 300, [1, 2, 3]),
        req(1, 10.0, 300, [1, 2, 3]),
        req(3, 10.05, 1000, list(range(20, 30))),
        req(2, 10.1, 200, [7, 8]),
    ]
    r = by_id(api.run(toy(cluster={"load_policy": "async"}, **REMOTE_ON), requests=reqs))
    assert r[1].finish_s == pytest.approx(10.05 + 1.099 + 0.1)
    assert r[2].start_s == pytest.approx(r[1].finish_s)


def test_client_timeout_falls_back_to_recompute():
    # every GET stalls 5 s; the 1 s client timeout (after T0) abandons it
    sc = toy(
        remote={
            "enabled": True,
            "timeout": "1 s",
            "stall": {"probability": 1.0, "duration": "5 s", "distribution": "fixed"},
        }
    )
    reqs = [req(0, 0.0, 300, [1, 2, 3]), req(1, 10.0, 300, [1, 2, 3])]
    r = by_id(api.run(sc, requests=reqs))
    a = r[1]
    assert a.timed_out and a.stalled and a.decision == "fallback"
    assert a.tokens_remote == 0 and a.tokens_compute == 300
    assert a.load_s == pytest.approx(1.5)  # T0 + timeout
    assert a.ttft_s == pytest.approx(1.5 + 0.399)


def test_without_timeout_a_stall_holds_the_request_until_it_ends():
    sc = toy(
        remote={
            "enabled": True,
            "stall": {"probability": 1.0, "duration": "5 s", "distribution": "fixed"},
        }
    )
    reqs = [req(0, 0.0, 300, [1, 2, 3]), req(1, 10.0, 300, [1, 2, 3])]
    a = by_id(api.run(sc, requests=reqs))[1]
    assert a.stalled and not a.timed_out
    assert a.ttft_s == pytest.approx(0.5 + 5 + 0.299 + 0.1)


def test_under_sync_a_stalled_get_holds_the_engine_and_the_queue_behind_it():
    stalling = {
        "enabled": True,
        "stall": {"probability": 1.0, "duration": "5 s", "distribution": "fixed"},
    }
    reqs = [req(0, 0.0, 300, [1, 2, 3]), req(1, 10.0, 300, [1, 2, 3]), req(2, 10.1, 200, [7, 8])]
    r = by_id(api.run(toy(remote=stalling), requests=reqs))
    held = 0.5 + 5 + 0.299 + 0.1  # T0, the stall, the GET, the last token
    assert r[2].start_s == pytest.approx(10.0 + held)  # B waited for all of A
    r = by_id(api.run(toy(cluster={"load_policy": "async"}, remote=stalling), requests=reqs))
    assert r[2].start_s == pytest.approx(10.1)  # async: B runs while A's GET hangs


def test_per_rank_usable_hit_is_the_minimum_over_ranks():
    # pcp 2, one server per rank, no coordination: rank 0 holds blocks 1-3, rank 1 only 1-2
    from kvsim.results.records import COLUMN_NAMES
    from kvsim.sim.simulation import Simulation

    sc = toy(node={"pcp": 2}, remote={"enabled": True, "servers": 2, "sharding": "per_rank"})
    r = req(1, 10.0, 301, [1, 2, 3, 4])
    sim = Simulation(sc, requests=[r])
    keys = sim.tenancy.keys(r)  # cache keys: hash ids namespaced by tenant
    remote = sim.remote
    remote.unmirror()  # the ranks are to disagree
    for shard, blocks in ((0, keys[:3]), (1, keys[:2])):
        for b in blocks:
            server, key = remote.place(b, shard)
            assert server == shard
            remote.stores[server].insert(key, 50_000)
    assert remote.shard_prefixes(keys) == [3, 2]
    out = sim.run()
    a = dict(zip(COLUMN_NAMES, out.rows[0], strict=True))
    assert a["tokens_remote"] == 200  # min(3, 2) blocks of 100 tokens
    assert a["tokens_compute"] == 101
    # each rank reads its half (200 tokens x 1000 B / 2) from its own server in parallel
    assert a["remote_get_s"] == pytest.approx(0.1)


def test_local_tiers_restore_in_parallel_and_each_pays_its_t0():
    # GPU holds 1 block, host 1 block: a 3-block prompt finds block 2 in GPU... the hit
    # must be a prefix, so use LRU order: after P (blocks 1,2,3), GPU keeps block 3 only
    sc = toy(
        tiers={
            "gpu": {"capacity": "100 kB"},
            "host": {"enabled": True, "capacity": "200 kB", "t0": "20 ms"},
        }
    )
    reqs = [req(0, 0.0, 300, [1, 2, 3]), req(1, 10.0, 301, [1, 2, 3, 4])]
    r = by_id(api.run(sc, requests=reqs))[1]
    # blocks 1, 2 in host (demoted), block 3 in GPU: 200 host tokens over PCIe (400 GB/s)
    assert (r.tokens_host, r.tokens_gpu, r.tokens_compute) == (200, 100, 1)
    assert r.load_host_s == pytest.approx(0.02 + 200_000 / 400e9)
