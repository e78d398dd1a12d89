"""Issue 27's measurements: cold and warm requests, the restore in parts, recomputed
tokens, the GPU time they cost, and per-tier, per-engine lookups and bytes.

Hand-computed cases use the toy scenario (tests/conftest.py: 1,000 B per token, 100-token
blocks, t(new) = 0.1 s + (new - 1) ms, no link latencies, 1 MB/s remote at T0 0.5 s);
invariants run on shipped scenarios, cut small.
"""

import numpy as np
import pytest

from kvsim import api
from kvsim.results.metrics import METRICS, NUMERIC
from kvsim.workload import open_workload
from kvsim.workload.request import Request

from conftest import req, toy

PARTS = ("restore_lookup_s", "restore_queue_s", "restore_read_s", "restore_h2d_s")
TIERS = ("gpu", "host", "nvme", "peer", "remote")
NEW_KEYS = (
    "requests_cold",
    "requests_warm",
    "ttft_cold_p50_s",
    "ttft_cold_p95_s",
    "ttft_warm_p50_s",
    "ttft_warm_p95_s",
    *(f"restore_{p}_{s}_s" for p in ("lookup", "queue", "read", "h2d") for s in ("mean", "p95")),
    "recomputed_tokens",
    "gpu_recompute_frac",
)


def rows(res):
    return {int(r.id): r for r in res.requests.itertuples()}


def parts(r):
    return [getattr(r, p) for p in PARTS]


# ---- cold and warm ------------------------------------------------------------------


def test_warm_and_cold_count_every_session_once():
    """Sessions: each session's first turn is cold (its id first seen), every later turn
    warm; so cold = distinct sessions, counted here from the workload itself."""
    sc = api.load("scenarios/quickstart.yaml", {"workload.requests": 400, "run.warmup": "0 s"})
    res = api.run(sc)
    s, df = res.summary, res.requests
    assert s["requests_cold"] + s["requests_warm"] == s["requests"] == len(df)
    sessions = {r.session for r in open_workload(sc.workload, sc.seed)}
    assert -1 not in sessions  # every request of this workload has a session
    assert s["requests_cold"] == len(sessions)
    first = df.sort_values("arrival_s", kind="stable").groupby("session")["warm"].first()
    assert not first.any()  # the first arrival of each session is the cold one
    cold, warm = df[~df["warm"]]["ttft_s"], df[df["warm"]]["ttft_s"]
    assert s["ttft_cold_p50_s"] == pytest.approx(np.percentile(cold, 50))
    assert s["ttft_warm_p95_s"] == pytest.approx(np.percentile(warm, 95))


def test_warm_and_cold_on_the_trace_sample_by_first_block():
    """The shipped Mooncake sample (800 chat requests, each in a session): cold = its
    distinct sessions (359), counted here from the trace itself."""
    sc = api.load("scenarios/mooncake-sample.yaml", {"run.warmup": "0 s"})
    s = api.run(sc).summary
    reqs = list(open_workload(sc.workload, sc.seed))
    assert s["requests"] == len(reqs) == 800
    assert s["requests_cold"] + s["requests_warm"] == s["requests"]
    assert s["requests_cold"] == len({r.session for r in reqs}) == 359


def test_without_sessions_cold_is_a_new_first_block():
    """The sample with its session ids dropped: a request is cold when its first block
    opens a prefix not seen before, so cold = the trace's distinct first blocks (42)."""
    sc = api.load("scenarios/mooncake-sample.yaml", {"run.warmup": "0 s"})
    reqs = [r._replace(session=-1) for r in open_workload(sc.workload, sc.seed)]
    s = api.run(sc, requests=reqs).summary
    assert s["requests_cold"] + s["requests_warm"] == s["requests"] == 800
    assert s["requests_cold"] == len({r.hash_ids[0] for r in reqs}) == 42


def test_cold_and_warm_by_hand():
    """A opens prefix [1, 2]; B shares it (warm); C opens [7] (cold); D is turn 1 of
    session 5 (cold) and E its second turn (warm) though its blocks are new."""
    reqs = [
        req(0, 0.0, 200, [1, 2]),
        req(1, 1.0, 300, [1, 2, 3]),
        req(2, 2.0, 100, [7]),
        Request(3, 3.0, 100, 1, (8,), session=5),
        Request(4, 4.0, 100, 1, (9,), session=5),
    ]
    r = rows(api.run(toy(), requests=reqs))
    assert [r[i].warm for i in range(5)] == [False, True, False, False, True]


# ---- the restore in parts --------------------------------------------------------------


def one_restore(tier_sections, node=None, prompt=1001, **more):
    """A computes 1,000 tokens (blocks 0-9; no GPU room, so they fall to the lower tiers);
    B (t = 10 s, alone) reads them back and computes its last token."""
    sc = toy(tiers=tier_sections, node=node or {}, **more)
    reqs = [req(0, 0.0, 1000, list(range(10))), req(1, 10.0, prompt, list(range(11)))]
    return rows(api.run(sc, requests=reqs))


def test_parts_of_a_host_restore_alone():
    """Host (T0 0.2 s) over a 1 MB/s host-to-GPU link (0.125 MB/s x 8 GPUs): 1 MB moves in
    1.0 s with the h2d link as its bottleneck: lookup 0.2, h2d 1.0, read 0, queue 0."""
    r = one_restore(
        {"host": {"enabled": True, "capacity": "1 GB", "t0": "200 ms"}},
        node={"h2d_per_gpu": "0.125 MB/s"},
    )[1]
    assert r.tokens_host == 1000
    assert r.load_s == pytest.approx(1.2)
    assert parts(r) == pytest.approx([0.2, 0.0, 0.0, 1.0])
    assert sum(parts(r)) == pytest.approx(r.load_s - r.load_prefetch_s)


def test_parts_of_a_host_restore_with_a_codec_count_its_decode_as_h2d():
    """Host codec ratio 0.5 decoding 10 MB/s on the CPU: 0.5 MB cross the 1 MB/s link in
    0.5 s, then 1 MB (raw) decodes in 0.1 s: lookup 0.2, h2d 0.5 + 0.1, queue 0."""
    codec = {"ratio": 0.5, "encode_bandwidth": "1 GB/s", "decode_bandwidth": "10 MB/s", "on": "cpu"}
    r = one_restore(
        {"host": {"enabled": True, "capacity": "1 GB", "t0": "200 ms", "codec": codec}},
        node={"h2d_per_gpu": "0.125 MB/s"},
    )[1]
    assert r.tokens_host == 1000 and r.bytes_host == pytest.approx(0.5e6)
    assert r.load_s == pytest.approx(0.8)
    assert parts(r) == pytest.approx([0.2, 0.0, 0.0, 0.6])


@pytest.mark.parametrize(
    ("path", "expect"),
    [
        # GPUDirect: the drives (2 MB/s) alone: 1 MB in 0.5 s, a read
        ("gds", [0.1, 0.0, 0.5, 0.0]),
        # bounce: drives 2 MB/s then host-to-GPU 1 MB/s: the h2d link binds, 1.0 s
        ("bounce", [0.1, 0.0, 0.0, 1.0]),
    ],
)
def test_parts_of_an_nvme_restore_alone(path, expect):
    r = one_restore(
        {"nvme": {"enabled": True, "capacity": "1 GB", "t0": "100 ms", "path": path}},
        node={"nvme_read_per_drive": "0.25 MB/s", "h2d_per_gpu": "0.125 MB/s"},
    )[1]
    assert r.tokens_nvme == 1000
    assert r.load_s == pytest.approx(0.1 + sum(expect[1:]))
    assert parts(r) == pytest.approx(expect)


def test_parts_of_a_remote_restore_alone():
    """Remote: T0 0.5 s, then 299 kB over the 1 MB/s server (the bottleneck, not the
    h2d link): lookup 0.5, read 0.299, queue 0 (tests/test_restore.py's stall case)."""
    reqs = [req(0, 0.0, 300, [1, 2, 3]), req(1, 10.0, 300, [1, 2, 3])]
    r = rows(api.run(toy(remote={"enabled": True}), requests=reqs))[1]
    assert r.tokens_remote == 299 and r.load_s == pytest.approx(0.799)
    assert parts(r) == pytest.approx([0.5, 0.0, 0.299, 0.0])


def test_a_stall_is_queue():
    """A GET that stalls 0.3 s (probability 1, fixed) before it starts: the stall is queue."""
    reqs = [req(0, 0.0, 300, [1, 2, 3]), req(1, 10.0, 300, [1, 2, 3])]
    stall = {"probability": 1.0, "duration": "300 ms", "distribution": "fixed"}
    sc = toy(remote={"enabled": True, "stall": stall})
    r = rows(api.run(sc, requests=reqs))[1]
    assert r.stalled and r.load_s == pytest.approx(1.099)
    assert parts(r) == pytest.approx([0.5, 0.3, 0.299, 0.0])


def test_two_restores_sharing_the_h2d_link_wait_in_queue():
    """Async: B and C (t = 10 s) restore the same 1 MB from host at once over the 1 MB/s
    h2d link: each moves at 0.5 MB/s, in at 0.2 + 2.0 s. Alone it would take 1.0 s: the
    other 1.0 s is queue."""
    sc = toy(
        tiers={"host": {"enabled": True, "capacity": "1 GB", "t0": "200 ms"}},
        node={"h2d_per_gpu": "0.125 MB/s"},
        cluster={"load_policy": "async"},
    )
    reqs = [
        req(0, 0.0, 1000, list(range(10))),
        req(1, 10.0, 1001, list(range(11))),
        req(2, 10.0, 1001, [*range(10), 99]),
    ]
    r = rows(api.run(sc, requests=reqs))
    for i in (1, 2):
        assert r[i].tokens_host == 1000
        assert r[i].load_s == pytest.approx(2.2)
        assert parts(r[i]) == pytest.approx([0.2, 1.0, 0.0, 1.0])


def test_parts_are_bounded_by_the_restore_under_load():
    """A busy run (quickstart at 3x its rate, every tier serving): each part is >= 0 and
    <= the restore time, they sum to it, and sharing shows up as queue somewhere."""
    sc = api.load(
        "scenarios/quickstart.yaml",
        {"workload.requests": 600, "workload.arrivals.rate": "6/s", "run.warmup": "0 s"},
    )
    res = api.run(sc)
    df = res.requests
    done = df[df["decision"] != "dropped"]
    restore = (done["load_s"] - done["load_prefetch_s"]).to_numpy()
    p = done[list(PARTS)].to_numpy()
    assert (p >= 0).all()
    assert (p <= restore[:, None] + 1e-9).all()
    assert np.allclose(p.sum(axis=1), restore, rtol=1e-9, atol=1e-9)
    none = ~done["decision"].isin(["restore", "fallback"]).to_numpy()
    assert (p[none] == 0).all()  # no restore: every part 0
    assert (done["restore_queue_s"] > 0).any()
    s = res.summary
    restored = done[~none]
    for name in ("lookup", "queue", "read", "h2d"):
        col = restored[f"restore_{name}_s"]
        assert s[f"restore_{name}_mean_s"] == pytest.approx(col.mean())
        assert s[f"restore_{name}_p95_s"] == pytest.approx(np.percentile(col, 95))


# ---- recomputed tokens and their GPU time ---------------------------------------------


def test_a_prefix_evicted_from_every_tier_is_recomputed():
    """No GPU room and a host tier of one block (100 kB): A computes [1, 2, 3], which
    leave the GPU and mostly fall out of host; B = [1, 2, 3, 4] (350 tokens) finds no
    usable prefix (block 1 is gone) and computes it all: its 300 prefix tokens were
    computed before (recomputed), block 4's 50 are new. C = [9] is new: 0."""
    sc = toy(tiers={"host": {"enabled": True, "capacity": "100 kB", "t0": "0 s"}})
    reqs = [
        req(0, 0.0, 300, [1, 2, 3]),
        req(1, 10.0, 350, [1, 2, 3, 4]),
        req(2, 20.0, 100, [9]),
    ]
    res = api.run(sc, requests=reqs)
    r = rows(res)
    assert r[1].tokens_compute == 350 and r[1].recomputed_tokens == 300
    assert r[0].recomputed_tokens == 0 and r[2].recomputed_tokens == 0
    assert res.summary["recomputed_tokens"] == 300
    # GPU time: each request's step SM time (serial: one prompt a step) = t - 0.1 s
    assert [r[i].gpu_compute_s for i in range(3)] == pytest.approx([0.299, 0.349, 0.099])
    # frac = 0.349 x 300/350 / (0.299 + 0.349 + 0.099)
    assert res.summary["gpu_recompute_frac"] == pytest.approx(0.349 * 300 / 350 / 0.747)


def test_a_prefix_the_load_policy_skips_is_recomputed():
    """Recompute policy: B's prefix sits in host, but the policy does not read lower tiers:
    computed again, so recomputed (the last block partial: 250 tokens of [1, 2, 3])."""
    sc = toy(
        tiers={"host": {"enabled": True, "capacity": "1 GB", "t0": "0 s"}},
        cluster={"load_policy": "recompute"},
    )
    reqs = [req(0, 0.0, 300, [1, 2, 3]), req(1, 10.0, 250, [1, 2, 3])]
    r = rows(api.run(sc, requests=reqs))
    assert r[1].tokens_compute == 250 and r[1].recomputed_tokens == 250


def test_a_restored_prefix_is_not_recomputed():
    """B's prefix is restored from host: only its last token is computed, and that is no
    recompute; with the GPU holding it too, nothing is recomputed either."""
    r = one_restore(
        {"host": {"enabled": True, "capacity": "1 GB", "t0": "0 s"}},
        node={"h2d_per_gpu": "1 GB/s"},
    )[1]
    assert r.tokens_compute == 1 and r.recomputed_tokens == 0


def test_prestored_blocks_count_as_seen():
    """A prestored remote prefix that the recompute policy will not read: computing it is
    a recompute of what was stored before."""
    sc = toy(
        remote={"enabled": True},
        cluster={"load_policy": "recompute"},
        workload={
            "requests": 5,
            "prompt_tokens": {"dist": "fixed", "value": 400},
            "system_prompts": {"count": 1, "tokens": 200, "share": 1.0},
            "prestored": True,
        },
    )
    df = api.run(sc).requests
    assert (df["recomputed_tokens"] >= 200).all()
    assert (df["recomputed_tokens"] <= df["tokens_compute"]).all()


def test_gpu_time_of_a_shared_step_is_split_by_tokens():
    """Chunked batching: A (300 tokens) and B (100) arrive together and share one step; its
    SM time (the table's t(new) - 0.1 s per chunk) is split 3:1 and sums to the engine's."""
    sc = toy(engine={"batching": "chunked", "max_batched_tokens": 2048})
    reqs = [req(0, 0.0, 300, [1, 2, 3]), req(1, 0.0, 100, [4])]
    res = api.run(sc, requests=reqs)
    r = rows(res)
    assert r[0].steps == r[1].steps == 1
    assert r[0].gpu_compute_s == pytest.approx(3 * r[1].gpu_compute_s)
    total = r[0].gpu_compute_s + r[1].gpu_compute_s
    assert total == pytest.approx(res.engines[0]["busy_s"])
    assert total == pytest.approx(0.299 + 0.099)  # t(300) - 0.1 + t(100) - 0.1


def test_recomputed_never_exceeds_computed_on_a_busy_run():
    sc = api.load(
        "scenarios/quickstart.yaml",
        {
            "workload.requests": 500,
            "run.warmup": "0 s",
            "tiers.gpu.capacity": "4 GB",
            "tiers.host.capacity": "8 GB",
            "tiers.nvme.capacity": "16 GB",
            "remote.capacity": "2 GB",
        },
    )
    res = api.run(sc)
    df = res.requests
    assert (df["recomputed_tokens"] >= 0).all()
    assert (df["recomputed_tokens"] <= df["tokens_compute"]).all()
    assert res.summary["recomputed_tokens"] > 0  # tiny tiers: evicted prefixes come back
    assert 0 < res.summary["gpu_recompute_frac"] < 1


# ---- per tier and per engine ----------------------------------------------------------


def test_hits_and_misses_by_hand():
    """No GPU room, host 1 GB. A = [1, 2, 3]: 3 blocks reach the GPU (3 misses), then host
    (3 misses). B = [1, 2, 3, 4]: GPU misses all 4; host holds 1-3 (3 hits) and misses 4.
    NVMe is off: never asked."""
    sc = toy(tiers={"host": {"enabled": True, "capacity": "1 GB", "t0": "0 s"}})
    reqs = [req(0, 0.0, 300, [1, 2, 3]), req(1, 10.0, 400, [1, 2, 3, 4])]
    tiers = api.run(sc, requests=reqs).summary["tiers"]
    assert (tiers["gpu"]["hits"], tiers["gpu"]["misses"]) == (0, 7)
    assert (tiers["host"]["hits"], tiers["host"]["misses"]) == (3, 4)
    assert "nvme" not in tiers and "peer" not in tiers


def check_engines(summary):
    """Every tier's per-engine entries sum to its totals; its read bytes equal the
    requests' (warm-up 0, nothing dropped or unfinished)."""
    tiers = summary["tiers"]
    for name in TIERS:
        if name not in tiers:
            continue
        t = tiers[name]
        per = t["engines"]
        assert [e["engine"] for e in per] == list(range(summary["engines"]))
        keys = ["hits", "misses", "read_bytes"]
        keys += ["served_bytes"] if name == "peer" else ["write_bytes"]
        keys += ["evictions"] if name in ("gpu", "host", "nvme") else []
        for k in keys:
            assert sum(e[k] for e in per) == pytest.approx(t[k], rel=1e-9, abs=1e-6), (name, k)
        assert t["read_bytes"] == pytest.approx(
            summary["tier_read_bytes"][name], rel=1e-9, abs=1e-6
        ), name
        assert t["hits"] >= 0 and t["misses"] >= 0


def test_per_engine_counters_sum_to_the_tiers_and_the_requests():
    """Quickstart's four engines with small local tiers, so that every tier serves hits."""
    small = {"tiers.gpu.capacity": "4 GB", "tiers.host.capacity": "8 GB"}
    over = {"workload.requests": 500, "run.warmup": "0 s", "tiers.nvme.capacity": "16 GB"}
    s = api.run("scenarios/quickstart.yaml", {**over, **small}).summary
    assert s["requests_dropped"] == 0 and s["requests_unfinished"] == 0
    assert {"gpu", "host", "nvme", "remote"} <= set(s["tiers"])
    check_engines(s)
    assert all(s["tiers"][t]["hits"] > 0 for t in ("gpu", "host", "nvme", "remote"))
    # a block reaches a tier when no earlier one served it: the GPU sees every block
    gpu = s["tiers"]["gpu"]
    host = s["tiers"]["host"]
    assert host["hits"] + host["misses"] == gpu["misses"]


def test_new_summary_keys_are_metrics():
    for key in NEW_KEYS:
        assert key in METRICS and key in NUMERIC


def peer_case(engines: int = 3):
    """The peer tier (tests/test_peer_tier.py's setup): engines in turn (round_robin), no
    GPU room, 8 GPUs of 1 MB/s NIC and 2 MB/s host-to-GPU each (NICs 8 MB/s, h2d 16 MB/s),
    peer T0 10 ms. Request 0 is computed on engine 0; the same prompt then arrives on
    engine 1 (and 2) and reads it from engine 0's host."""
    sc = toy(
        node={"gpus": 8, "nic_per_gpu": "1 MB/s", "h2d_per_gpu": "2 MB/s"},
        cluster={"engines": engines, "router": "round_robin", "load_policy": "sync"},
        tiers={
            "host": {"enabled": True, "capacity": "1 GB", "t0": "0 s", "write_queue": None},
            "peer": {"enabled": True, "t0": "10 ms"},
        },
    )
    reqs = [req(i, 10.0 * i, 1000, range(10)) for i in range(engines)]
    return api.run(sc, requests=reqs)


def test_parts_of_a_peer_read_alone():
    """999,000 B over (e0.nic_out 8 MB/s, e1.nic_in 8 MB/s, e1.h2d 16 MB/s): the NIC
    binds, a read of 0.124875 s after T0 10 ms; queue 0."""
    res = peer_case(engines=2)
    r = rows(res)[1]
    assert r.engine == 1 and r.tokens_peer == 999
    assert parts(r) == pytest.approx([0.010, 0.0, 999_000 / 8e6, 0.0])
    # lookups: 0 walks gpu, host, peer: 10 misses each; 1 misses its GPU and host (10
    # each) and finds all 10 in peer
    tiers = res.summary["tiers"]
    assert (tiers["peer"]["hits"], tiers["peer"]["misses"]) == (10, 10)
    assert (tiers["host"]["hits"], tiers["host"]["misses"]) == (0, 20)


def test_peer_bytes_read_are_the_bytes_served():
    """Three engines: 1 and 2 read engine 0's blocks (999 kB each): engine 0 served both."""
    s = peer_case(engines=3).summary
    peer = s["tiers"]["peer"]
    check_engines(s)
    assert peer["read_bytes"] == pytest.approx(2 * 999_000)
    assert peer["served_bytes"] == pytest.approx(peer["read_bytes"])
    served = [e["served_bytes"] for e in peer["engines"]]
    assert served == pytest.approx([2 * 999_000, 0.0, 0.0])
    assert peer["engines"][0]["read_bytes"] == 0.0
