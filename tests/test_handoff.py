"""The P/D hand-off (cluster.handoff; kvsim/sim/handoff.py): each finished request's KV goes
to the decode pool over its engine's NIC out and the decode pool's receive link.

Hand-computed cases on the toy scenario (tests/conftest.py: 1,000 B per token, 100-token
blocks, prefill t(new) = 0.1 s + (new - 1) ms, no link latencies, serial engine), with 8
GPUs of 1 MB/s NIC each: an engine's NIC out is 8 MB/s. A 1,000-token prompt is 1 MB of
KV and computes in 1.099 s.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from kvsim import api
from kvsim.config.loader import deep_merge
from kvsim.report import summary_table
from kvsim.sim.rows import HANDOFF
from kvsim.sim.simulation import Simulation

from conftest import req, toy

NIC = 8e6  # B/s: an engine's NIC out (8 x 1 MB/s)
KV = 1_000_000  # B: a 1,000-token prompt's KV
PREFILL = 1.099  # s: a cold 1,000-token prompt
T0 = 0.010  # s: tiers.peer.t0 (the peer read below)


def handoff_scenario(bandwidth: str = "4 MB/s", latency: str = "50 ms", **sections):
    base = {
        "node": {"nic_per_gpu": "1 MB/s"},
        "cluster": {"handoff": {"enabled": True, "bandwidth": bandwidth, "latency": latency}},
    }
    return toy(**deep_merge(base, sections))


def rows(sc, reqs) -> tuple[dict[int, object], dict]:
    res = api.run(sc, requests=reqs)
    return {int(r.id): r for r in res.requests.itertuples()}, res.summary


def test_one_handoff_by_hand():
    """Alone: latency + bytes / min(decode pool, NIC out). At 4 MB/s the decode pool binds:
    0.05 + 1 MB / 4 MB/s = 0.3 s; at 16 MB/s the NIC does: 0.05 + 1 MB / 8 MB/s = 0.175 s.
    TTFT ends at the first token either way (1.099 s), as without a hand-off."""
    one = [req(0, 0.0, 1000, range(10))]
    r, s = rows(handoff_scenario("4 MB/s"), one)
    assert r[0].ttft_s == pytest.approx(PREFILL)
    assert r[0].handoff_s == pytest.approx(0.05 + KV / 4e6)
    assert r[0].handoff_bytes == KV
    assert s["handoff_mean_s"] == s["handoff_p99_s"] == pytest.approx(0.3)
    assert s["handoff_bytes"] == KV and s["handoff_incomplete"] == 0
    assert s["link_utilisation"]["decode"]["bytes"] == KV
    assert s["link_utilisation"]["nic_out"]["bytes"] == KV
    r, _ = rows(handoff_scenario("16 MB/s"), one)
    assert r[0].handoff_s == pytest.approx(0.05 + KV / NIC)
    assert r[0].ttft_s == pytest.approx(PREFILL)


def test_a_handoff_shares_the_nic_out_with_a_get_from_this_engine_by_max_min():
    """A GET from the remote store comes in over the engine's NIC in; a full-duplex NIC's
    out direction is another link. The GET that crosses a hand-off's NIC out is another
    engine's read of this engine's host (the peer tier, LMCache P2P). Two engines in turn:

    - A (t = 0, blocks 0-9) on e0: prefill to 1.099, hand-off (latency 0, decode pool
      1 GB/s: the NIC binds) to 1.224, then its blocks are admitted and, the GPU tier being
      empty, demoted to e0's host;
    - X (t = 5, blocks 50-59) on e1, out of the way;
    - B (t = 9, blocks 20-29) on e0: prefill 9 -> 10.099, then its hand-off H (1 MB);
    - C (t = 10, blocks 0-9) on e1: a peer GET P of 999 tokens (999,000 B) from e0's host
      over (e0.nic_out, e1.nic_in, e1.h2d), after T0: from 10.010.

    P alone on e0.nic_out from 10.010 to 10.099: 0.089 x 8 MB/s = 712,000 B, 287,000 left.
    From 10.099 P and H share it, 4 MB/s each: P ends at 10.099 + 287,000 / 4e6 = 10.17075;
    H, 287,000 B in by then, moves its last 713,000 B alone: 10.17075 + 0.089125 =
    10.259875. H took 0.160875 s (0.125 alone); C's restore 0.17075 s, then 1 token."""
    sc = handoff_scenario(
        "1 GB/s",
        "0 s",
        node={"gpus": 8, "pcp": 1, "h2d_per_gpu": "2 MB/s"},
        cluster={"engines": 2, "router": "round_robin"},
        tiers={
            "host": {"enabled": True, "capacity": "1 GB", "t0": "0 s", "write_queue": None},
            "peer": {"enabled": True, "t0": "10 ms"},
        },
    )
    a = req(0, 0.0, 1000, range(10))
    x = req(1, 5.0, 1000, range(50, 60))
    b = req(2, 9.0, 1000, range(20, 30))
    c = req(3, 10.0, 1000, range(10))
    r, _ = rows(sc, [a, x, b, c])
    assert [r[i].engine for i in range(4)] == [0, 1, 0, 1]
    assert r[0].handoff_s == pytest.approx(KV / NIC)
    assert r[2].finish_s == pytest.approx(9.0 + PREFILL)
    assert r[3].tokens_peer == 999
    assert r[3].load_peer_s == pytest.approx(10.17075 - 10.0)
    assert r[3].ttft_s == pytest.approx(10.17075 - 10.0 + 0.1)
    assert r[2].handoff_s == pytest.approx(10.259875 - 10.099)
    assert r[2].ttft_s == pytest.approx(PREFILL)  # the hand-off is after the first token


def test_a_handoff_shares_the_nic_out_with_a_remote_put_by_max_min():
    """A (1,000 tokens) is put to the remote store (one server of 1 MB/s: the put's cap)
    as its hand-off starts (latency 0, decode pool 1 GB/s). On the 8 MB/s NIC out the put
    takes its 1 MB/s and the hand-off the rest: 1 MB / 7 MB/s = 0.142857 s (0.125 alone).
    The put lands at 1.099 + 1 s."""
    sc = handoff_scenario(
        "1 GB/s",
        "0 s",
        remote={"enabled": True, "servers": 1, "sharding": "none"},
    )
    r, s = rows(sc, [req(0, 0.0, 1000, range(10))])
    assert r[0].handoff_s == pytest.approx(KV / (NIC - 1e6))
    assert s["link_utilisation"]["remote"]["bytes"] == KV
    assert s["link_utilisation"]["nic_out"]["bytes"] == 2 * KV  # the put and the hand-off


def test_the_working_kv_is_held_until_the_handoff_ends():
    """A KV pool of 1.5 MB (8 x 187.5 kB) holds one 1 MB prompt. A (t = 0) computes to
    1.099 and hands off for 0.05 + 1 MB / 4 MB/s = 0.3 s, holding its 1 MB until 1.399.
    B (t = 0.5, 1 MB) is looked at when A's step ends (1.099), does not fit, and waits
    until exactly 1.399: it finishes at 1.399 + 1.099. Without the hand-off B starts at
    1.099."""
    node = {"kv_per_gpu": "187.5 kB"}
    a, b = req(0, 0.0, 1000, range(10)), req(1, 0.5, 1000, range(20, 30))
    r, _ = rows(handoff_scenario(node=node), [a, b])
    assert r[0].handoff_s == pytest.approx(0.3)
    held_until = r[0].finish_s + r[0].handoff_s
    assert held_until == pytest.approx(PREFILL + 0.3)
    assert r[1].start_s == pytest.approx(PREFILL)  # looked at, set aside
    assert r[1].finish_s == pytest.approx(held_until + PREFILL)
    assert r[1].queue_wait_s == pytest.approx(held_until - 0.5)
    plain = toy(node={"nic_per_gpu": "1 MB/s", **node})
    r, _ = rows(plain, [a, b])
    assert r[1].finish_s == pytest.approx(2 * PREFILL)


def test_a_handoff_through_a_transfer_engine():
    """cluster.handoff.transfer adds the transfer engine's costs (kvsim/physics/transfer.py):
    1,000 tokens over 8 ranks (the toy node's pcp) in 100-token blocks is 2 blocks a rank,
    one operation each. Setup 2 ms + one batch of 1 ms before the first byte; at 100 ms
    an operation on one thread the 2 operations take 0.2 s: the hand-off moves at most
    1 MB / 0.2 s = 5 MB/s, below the NIC's 8 (decode pool 16 MB/s). 0.05 + 0.003 + 0.2."""
    te = {
        "setup": "2 ms",
        "per_batch": "1 ms",
        "per_op": "100 ms",
        "threads": 1,
        "op_tokens": 100,
        "ops_per_block": 1,
    }
    sc = handoff_scenario("16 MB/s", cluster={"handoff": {"transfer": te}})
    r, _ = rows(sc, [req(0, 0.0, 1000, range(10))])
    assert r[0].handoff_s == pytest.approx(0.05 + 0.003 + 0.2)


def test_an_engine_failing_during_a_handoff_loses_it_and_keeps_the_request():
    """A's hand-off starts at 1.099; its bytes flow from 1.149 at 4 MB/s. The engine fails
    at 1.249: 400,000 B had moved. A keeps its first token (finished, TTFT 1.099) with
    handoff_s NaN; its working KV goes back with the engine."""
    sc = handoff_scenario(
        faults=[{"kind": "engine_down", "engine": 0, "at": "1.249 s", "until": "2 s"}]
    )
    sim = Simulation(sc, requests=[req(0, 0.0, 1000, range(10))])
    res = api.collect(sim.run(), sc)
    r = res.requests.set_index("id").loc[0]
    assert r.decision != "dropped" and r.ttft_s == pytest.approx(PREFILL)
    assert math.isnan(r.handoff_s)
    assert r.handoff_bytes == pytest.approx(400_000)
    assert res.summary["handoff_incomplete"] == 1
    assert math.isnan(res.summary["handoff_mean_s"])
    assert sim.engines[0].pool.used == 0.0 and sim.engines[0].handoff.in_flight == 0


def test_a_run_stopped_during_a_handoff_records_the_request():
    """run.max_time 1.2 s: A's hand-off (bytes from 1.149 at 4 MB/s) has moved 204,000 B.
    A is recorded (its first token came at 1.099), its hand-off incomplete."""
    sc = handoff_scenario(run={"max_time": "1.2 s"})
    r, s = rows(sc, [req(0, 0.0, 1000, range(10))])
    assert s["requests"] == 1 and s["requests_unfinished"] == 0
    assert math.isnan(r[0].handoff_s)
    assert r[0].handoff_bytes == pytest.approx(204_000)
    assert s["handoff_incomplete"] == 1


SMALL = {
    "cluster": {"engines": 2, "router": "round_robin"},
    "tiers": {
        "gpu": {"capacity": "2 MB"},
        "host": {"enabled": True, "capacity": "1 GB", "t0": "1 ms"},
    },
    "remote": {"enabled": True},
    "workload": {
        "requests": 200,
        "arrivals": {"process": "poisson", "rate": "3/s"},
        "prompt_tokens": {"dist": "uniform", "low": 100, "high": 1000},
        "system_prompts": {"count": 2, "tokens": 300, "share": 0.8},
    },
}


def test_a_disabled_handoff_changes_nothing_bit_for_bit():
    """enabled: false with every other field set gives the run without the section, column
    for column and key for key; the hand-off's columns and summary keys are not there."""
    plain = api.run(toy(**SMALL))
    off = deep_merge(SMALL, {"cluster": {"handoff": {"bandwidth": "1 MB/s", "latency": "1 s"}}})
    res = api.run(toy(**off))
    pd.testing.assert_frame_equal(plain.requests, res.requests, check_exact=True)
    assert _text(plain.summary) == _text(res.summary)
    for col in HANDOFF:
        assert col.name not in res.requests.columns
    assert "handoff_mean_s" not in res.summary
    assert "P/D hand-off" not in summary_table(res.summary)


def _text(summary: dict) -> str:
    """A summary as canonical text (NaN equal to NaN), provenance left out."""
    return json.dumps({k: v for k, v in summary.items() if k != "provenance"}, sort_keys=True)


def test_handoffs_are_deterministic_and_independent_of_the_engines_build_order():
    """The same scenario and seed twice, and with the engines built in reverse order:
    identical per-request tables (hand-offs under load share NIC outs and the decode link)."""
    on = deep_merge(SMALL, {"cluster": {"handoff": {"enabled": True, "bandwidth": "4 MB/s"}}})
    sc = toy(node={"nic_per_gpu": "1 MB/s"}, **on)
    first = api.collect(Simulation(sc).run(), sc)
    again = api.collect(Simulation(sc).run(), sc)
    reverse = api.collect(Simulation(sc, engine_order=[1, 0]).run(), sc)
    pd.testing.assert_frame_equal(first.requests, again.requests, check_exact=True)
    pd.testing.assert_frame_equal(first.requests, reverse.requests, check_exact=True)
    df = first.requests
    assert (df["handoff_s"] >= 0.02 + df["handoff_bytes"] / 4e6 - 1e-9).all()  # alone or slower
    assert (df["handoff_bytes"] == df["input_tokens"] * 1000.0).all()
    assert "P/D hand-off" in summary_table(first.summary)
