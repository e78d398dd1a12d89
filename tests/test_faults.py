"""Scheduled faults on hand-computed toy cases (1,000 B/token, 100-token blocks,
t = 0.1 s + (new - 1) ms, remote 1 MB/s per server with T0 = 0.5 s, no latencies).

Each test shows the fault's effect on TTFT against the same run without it, and that no
request is lost: every request is reported, finished or dropped with a reason."""

import pandas as pd
import pytest

from kvsim import api

from conftest import req, toy

REMOTE = {"enabled": True}
PER_RANK = {"enabled": True, "servers": 8, "sharding": "per_rank"}
# P computes blocks 1-3 and puts them; A restores them at t = 10: T0 0.5 s + 0.299 s
# transfer + 0.1 s compute of the last token = 0.899 s.
P_THEN_A = [req(0, 0.0, 300, [1, 2, 3]), req(1, 10.0, 300, [1, 2, 3])]


def rows(res) -> dict[int, pd.Series]:
    return {int(r["id"]): r for _, r in res.requests.iterrows()}


def accounted(res, n: int) -> None:
    """Every request reported once; finished ones have all their tokens accounted for."""
    df = res.requests
    assert sorted(df["id"]) == list(range(n))
    done = df[df["decision"] != "dropped"]
    parts = done[[c for c in df.columns if c.startswith("tokens_")]].sum(axis=1)
    assert (parts == done["input_tokens"]).all()
    dropped = df[df["decision"] == "dropped"]
    assert (dropped["drop_reason"] != "").all() and dropped["ttft_s"].isna().all()


def server_down(server: int, at: float, until: float | None = None) -> list[dict]:
    f = {"kind": "server_down", "server": server, "at": f"{at} s"}
    if until is not None:
        f["until"] = f"{until} s"
    return [f]


# ---- remote server loss and recovery --------------------------------------------------------


def test_without_faults_the_second_request_restores():
    r = rows(api.run(toy(remote=REMOTE), requests=P_THEN_A))
    assert r[1]["tokens_remote"] == 299 and r[1]["ttft_s"] == pytest.approx(0.899)


def test_a_lost_server_loses_its_blocks_and_comes_back_empty():
    res = api.run(toy(remote=REMOTE, faults=server_down(0, 5, 6)), requests=P_THEN_A)
    r = rows(res)
    # the blocks went with the server: A recomputes all 300 tokens (0.399 s), not 0.899 s
    assert r[1]["tokens_remote"] == 0 and r[1]["decision"] == "cold"
    assert r[1]["ttft_s"] == pytest.approx(0.399)
    assert [f["event"] for f in res.summary["faults"]] == ["start", "end"]
    accounted(res, 2)


def test_losing_a_server_mid_get_falls_back_to_recompute():
    # A's GET moves bytes from 10.5; the server dies at 10.6 after 100 kB: A recomputes
    # every token from then on (0.399 s), TTFT 0.6 + 0.399 s
    res = api.run(toy(remote=REMOTE, faults=server_down(0, 10.6)), requests=P_THEN_A)
    a = rows(res)[1]
    assert a["decision"] == "fallback" and not a["timed_out"]
    assert a["tokens_compute"] == 300 and a["bytes_remote"] == pytest.approx(100_000)
    assert a["ttft_s"] == pytest.approx(0.999)
    accounted(res, 2)


def test_per_rank_loss_of_one_rank_lowers_every_hit_to_the_minimum_over_ranks():
    # Eight servers, one per PCP rank; each block's KV is split over all eight. Server 3 is
    # down from 5 s to 6 s. Q (t = 5.5) computes blocks 4-6 while it is down: seven ranks
    # store their shards, rank 3 cannot. After recovery neither P's blocks (lost with
    # rank 3) nor Q's (never on rank 3) are usable: the minimum over ranks is zero.
    # A re-stores blocks 1-3, so Z (t = 20) restores them again.
    reqs = [
        req(0, 0.0, 300, [1, 2, 3]),
        req(1, 5.5, 300, [4, 5, 6]),
        req(2, 10.0, 300, [1, 2, 3]),
        req(3, 12.0, 300, [4, 5, 6]),
        req(4, 20.0, 300, [1, 2, 3]),
    ]
    base = rows(api.run(toy(remote=PER_RANK), requests=reqs))
    hurt = api.run(toy(remote=PER_RANK, faults=server_down(3, 5, 6)), requests=reqs)
    r = rows(hurt)
    restore = 0.5 + 299 * 1000 / 8 / 1e6 + 0.1  # each rank reads its eighth in parallel
    for i in (2, 3, 4):
        assert base[i]["tokens_remote"] == 299 and base[i]["ttft_s"] == pytest.approx(restore)
    for i in (2, 3):
        assert r[i]["tokens_remote"] == 0 and r[i]["ttft_s"] == pytest.approx(0.399)
    assert r[4]["tokens_remote"] == 299 and r[4]["ttft_s"] == pytest.approx(restore)
    accounted(hurt, 5)


def test_other_servers_keep_their_blocks_when_one_is_lost():
    # two unsharded servers: block b lives on server b % 2. Losing server 1 takes the odd
    # blocks; the prefix still usable is block 0 on server 0: 100 tokens, not 999
    reqs = [req(0, 0.0, 1000, range(10)), req(1, 10.0, 1000, range(10))]
    two = {"enabled": True, "servers": 2}
    base = rows(api.run(toy(remote=two), requests=reqs))[1]
    hurt = rows(api.run(toy(remote=two, faults=server_down(1, 5)), requests=reqs))[1]
    assert base["tokens_remote"] == 999
    assert hurt["tokens_remote"] == 100
    assert hurt["ttft_s"] == pytest.approx(0.5 + 0.1 + 0.1 + 899e-3)  # T0, GET, compute


# ---- a slow link ------------------------------------------------------------------------------


def test_a_slow_window_slows_transfers_inside_it_and_only_there():
    # remote at half speed from 9 s to 10.8 s: A's GET moves 150 kB by 10.8, then the
    # other 149 kB at full speed; KV in at 10.949, TTFT 1.049 s (0.899 s without)
    slow = [
        {"kind": "slow_link", "target": "remote", "factor": 0.5, "at": "9 s", "until": "10.8 s"}
    ]
    reqs = [*P_THEN_A, req(2, 20.0, 300, [1, 2, 3])]
    r = rows(api.run(toy(remote=REMOTE, faults=slow), requests=reqs))
    assert r[1]["ttft_s"] == pytest.approx(1.049)
    assert r[2]["ttft_s"] == pytest.approx(0.899)  # after the window: full speed again


def test_a_congested_host_link_slows_host_restores():
    # 1 MB/s PCIe host link so that the transfer dominates; a quarter of it for a while
    local = {"gpu": {"capacity": "0 B"}, "host": {"enabled": True, "capacity": "1 GB"}}
    node = {"h2d_per_gpu": "125 kB/s"}  # 8 GPUs: 1 MB/s in all
    slow = [{"kind": "slow_link", "target": "host", "factor": 0.25, "at": "5 s", "until": "30 s"}]
    fast = rows(api.run(toy(tiers=local, node=node), requests=P_THEN_A))[1]
    hurt = rows(api.run(toy(tiers=local, node=node, faults=slow), requests=P_THEN_A))[1]
    assert fast["tokens_host"] == 299 and hurt["tokens_host"] == 299
    assert hurt["load_host_s"] - fast["load_host_s"] == pytest.approx(3 * 0.299)


# ---- an engine failing --------------------------------------------------------------------------


TWO_ENGINES = {"engines": 2, "router": "round_robin"}
# R0 and R1 (1,000 tokens, 1.099 s) start on engines 0 and 1; engine 1 fails at 0.5 s
# and is back at 5 s. S (t = 1) arrives while it is down; T, U (t = 6, 6.1) after.
BUSY = [
    req(0, 0.0, 1000, range(10)),
    req(1, 0.0, 1000, range(20, 30)),
    req(2, 1.0, 200, [50, 51]),
    req(3, 6.0, 200, [60, 61]),
    req(4, 6.1, 200, [70, 71]),
]


def engine_down(mode: str) -> list[dict]:
    return [{"kind": "engine_down", "engine": 1, "at": "0.5 s", "until": "5 s", "requests": mode}]


def test_a_failed_engines_requests_are_rerouted():
    res = api.run(toy(cluster=TWO_ENGINES, faults=engine_down("reroute")), requests=BUSY)
    r = rows(res)
    # R1 lost 0.5 s of work and starts over on engine 0 after R0: TTFT 2.198 s (1.099 s)
    assert r[1]["engine"] == 0 and r[1]["retries"] == 1 and r[1]["lost_s"] == pytest.approx(0.5)
    assert r[1]["ttft_s"] == pytest.approx(2.198)
    assert r[2]["engine"] == 0  # routed around the failed engine
    assert r[4]["engine"] == 1  # which takes work again once it is back
    assert res.summary["requests_rerouted"] == 1 and res.summary["requests_dropped"] == 0
    accounted(res, 5)


def test_a_failed_engines_requests_can_be_reported_dropped():
    res = api.run(toy(cluster=TWO_ENGINES, faults=engine_down("drop")), requests=BUSY)
    r = rows(res)
    assert r[1]["decision"] == "dropped" and r[1]["drop_reason"] == "engine 1 failed"
    assert r[2]["ttft_s"] == pytest.approx(0.398)  # S no longer waits behind R1
    assert res.summary["requests_dropped"] == 1
    assert res.summary["requests"] == 4  # TTFT statistics are over finished requests
    accounted(res, 5)


def test_requests_with_no_engine_up_are_dropped_not_lost():
    f = [{"kind": "engine_down", "engine": 0, "at": "0.5 s", "until": "5 s"}]
    res = api.run(toy(faults=f), requests=BUSY)
    r = rows(res)
    assert r[0]["decision"] == r[1]["decision"] == r[2]["decision"] == "dropped"
    assert r[2]["drop_reason"] == "no engine is up"
    assert r[3]["decision"] == "cold"
    accounted(res, 5)


def test_a_failed_engine_comes_back_with_empty_tiers():
    tiers = {"gpu": {"capacity": "1 GB"}}
    reqs = [req(0, 0.0, 300, [1, 2, 3]), req(1, 10.0, 300, [1, 2, 3])]
    f = [{"kind": "engine_down", "engine": 0, "at": "2 s", "until": "3 s"}]
    assert rows(api.run(toy(tiers=tiers), requests=reqs))[1]["tokens_gpu"] == 299
    assert rows(api.run(toy(tiers=tiers, faults=f), requests=reqs))[1]["tokens_gpu"] == 0


# ---- stall bursts ------------------------------------------------------------------------------

BURST = [
    {
        "kind": "stall_burst",
        "probability": 1,
        "duration": "1 s",
        "distribution": "fixed",
        "at": "9 s",
        "until": "11 s",
    }
]
THREE = [*P_THEN_A, req(2, 12.0, 300, [1, 2, 3])]


def test_a_stall_burst_delays_gets_inside_it():
    r = rows(api.run(toy(remote=REMOTE, faults=BURST), requests=THREE))
    assert r[1]["stalled"] and r[1]["ttft_s"] == pytest.approx(1.899)  # 0.899 s + 1 s
    assert not r[2]["stalled"] and r[2]["ttft_s"] == pytest.approx(0.899)


def test_a_client_timeout_caps_a_stall_burst():
    # GET abandoned at T0 + 0.6 s = 1.1 s after arrival; then all 300 tokens recomputed
    r = rows(api.run(toy(remote={**REMOTE, "timeout": "0.6 s"}, faults=BURST), requests=THREE))
    assert r[1]["timed_out"] and r[1]["decision"] == "fallback"
    assert r[1]["ttft_s"] == pytest.approx(1.1 + 0.399)
    assert r[2]["ttft_s"] == pytest.approx(0.899)


# ---- reproducibility ---------------------------------------------------------------------------


def test_fault_schedules_are_reproducible_with_the_seed():
    sc = api.load(
        "scenarios/quickstart.yaml",
        {
            "workload.requests": 1500,
            "cluster.router": "round_robin",  # so that the failing engine holds work
            "faults": [
                {"kind": "server_down", "server": 2, "at": "100 s", "until": "200 s"},
                {"kind": "slow_link", "target": "network", "factor": 0.3, "at": "50 s"},
                {"kind": "engine_down", "engine": 1, "at": "150 s", "until": "250 s"},
                {
                    "kind": "stall_burst",
                    "probability": 0.5,
                    "duration": "1 s",
                    "at": "220 s",
                    "until": "300 s",
                },
            ],
        },
    )
    a, b = api.run(sc), api.run(sc)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    assert a.summary["faults"] == b.summary["faults"]
    df = a.requests
    assert not ((df["engine"] == 1) & df["start_s"].between(150, 250, inclusive="left")).any()
    assert df["stalled"].any()
    clean = api.run(sc.model_copy(update={"faults": []}))
    assert a.summary["ttft_p99_s"] > clean.summary["ttft_p99_s"]


def test_a_client_timeout_and_a_server_loss_at_the_same_instant_fall_back_once():
    # A's GET (T0 0.5 s, then at the 25 kB/s of the one rank's slowed PCIe link that an
    # unsharded GET crosses) is still moving at 10.8 s, when both its 0.3 s client timeout
    # and the loss of its server fall due.
    # It falls back once, recomputing all 300 tokens (0.399 s): TTFT 0.8 + 0.399 s.
    # (Found in review: this tie used to escape as an unhandled FlowAborted.)
    sc = toy(
        node={"h2d_per_gpu": "25 kB/s", "gpus": 8},
        remote={"enabled": True, "timeout": "0.3 s"},
        faults=server_down(0, 10.8),
    )
    res = api.run(sc, requests=P_THEN_A)
    a = rows(res)[1]
    assert a["decision"] == "fallback" and a["tokens_compute"] == 300
    assert a["load_s"] == pytest.approx(0.8) and a["ttft_s"] == pytest.approx(1.199)
    assert a["bytes_remote"] == pytest.approx(7_500)  # 0.3 s at 25 kB/s
    accounted(res, 2)
