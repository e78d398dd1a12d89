"""Restores cost the GPU (node.copy_engine): copy kernels take SM time and lengthen the
step computing beside them; the copy engines (dma) take none. Times worked by hand on
the toy (tests/conftest.py): 1,000 B per token, a step of n new tokens takes 0.1 s fixed
+ (n - 1) ms of SM work, host link 1 MB/s for the node (0.125 MB/s x 8 GPUs)."""

from __future__ import annotations

import math

import pytest

from kvsim import api
from kvsim.physics.step import kernel_copy_seconds
from kvsim.sim.simulation import Simulation

from conftest import req, toy


def prompt(rid, t, tokens, base):
    return req(rid, t, tokens, [base + k for k in range(math.ceil(tokens / 100))])


def overlap(policy="async", **node):
    """A (t = 0) computes blocks 0-9 (1,000 tokens; the GPU tier holds nothing, so they
    fall to host). At t = 10, C restores them (1 MB over the 1 MB/s host link: 10 to 11,
    host T0 0) and D, cold, computes 200 tokens in the step that starts C's restore:
    0.1 s fixed, then 0.199 s of SM work from 10.1."""
    sc = toy(
        node={"h2d_per_gpu": "0.125 MB/s", **node},
        tiers={"host": {"enabled": True, "capacity": "1 GB", "t0": "0 s"}},
        cluster={"load_policy": policy},
    )
    reqs = [prompt(0, 0.0, 1000, 0), prompt(1, 10.0, 1001, 0), prompt(2, 10.0, 200, 500)]
    sim = Simulation(sc, requests=reqs)
    res = api.collect(sim.run(), sc)
    rows = {int(r.id): r for r in res.requests.itertuples()}
    assert rows[1].tokens_host == 1000
    return rows, sim.engines[0], res.summary


def test_the_kernel_copy_seconds():
    # 1 MB at 1 MB/s holding half the SMs: 0.5 SM seconds
    assert kernel_copy_seconds(1e6, 1e6, 0.5) == pytest.approx(0.5)
    assert kernel_copy_seconds(0.0, 1e6, 1.0) == 0.0


def test_dma_copies_leave_a_concurrent_step_alone():
    rows, engine, _ = overlap(copy_engine="dma")
    assert rows[2].ttft_s == pytest.approx(0.299)  # 0.1 + 0.199
    # SM work: A's 0.999 s, D's 0.199 s, C's one token 0 s; the copy none
    assert engine.busy == pytest.approx(0.999 + 0.199)


def test_a_kernel_copy_holding_half_the_sms_lengthens_a_concurrent_step():
    """The copy runs 10-11 at the link's full rate holding half the SMs, so D's SM work
    progresses at half speed from 10.1: its 0.199 s take 0.398 s (ending 10.498 < 11)."""
    rows, engine, _ = overlap(copy_engine="kernel", copy_kernel_sm_share=0.5)
    assert rows[2].ttft_s == pytest.approx(0.1 + 2 * 0.199)
    # the copy's SM work counts: 0.5 x 1 MB / 1 MB/s = 0.5 s
    assert engine.busy == pytest.approx(0.999 + 0.199 + 0.5)
    # the restore itself is not slowed: C's KV is in at 11, its one token after D
    assert rows[1].load_s == pytest.approx(1.0)


def test_a_kernel_copy_holding_every_sm_stops_the_step_until_it_is_done():
    """Share 1 (LMCache's grid fills every SM): D's SM work waits for the copy (10-11),
    then takes its 0.199 s: TTFT 11.199 - 10."""
    rows, engine, _ = overlap(copy_engine="kernel", copy_kernel_sm_share=1.0)
    assert rows[2].ttft_s == pytest.approx(1.0 + 0.199)
    assert engine.busy == pytest.approx(0.999 + 0.199 + 1.0)


def test_a_synchronous_kernel_copy_is_gpu_work_but_no_extra_wait():
    """Sync: the step waits for the restore anyway (the copy runs inside that wait): the
    requests' times are the same as with DMA, and the copy's SM work counts."""
    dma, e_dma, _ = overlap("sync", copy_engine="dma")
    ker, e_ker, s_ker = overlap("sync", copy_engine="kernel", copy_kernel_sm_share=1.0)
    for rid in (0, 1, 2):
        assert ker[rid].ttft_s == pytest.approx(dma[rid].ttft_s)
    assert e_ker.busy == pytest.approx(e_dma.busy + 1.0)
    assert s_ker["gpu_busy_frac"] > 0


def test_an_unsharded_get_is_copied_by_one_rank():
    """An unsharded remote GET lands in one rank's HBM (then NVLink hands the others their
    parts): that rank's kernel copies all of it over its own 1 MB/s PCIe link, and the
    step waits for its slowest rank. C's 1 MB GET starts at 20 (remote T0 0) and moves at
    the server's 1 MB/s, so the issuing rank's kernel holds 0.5 x 1 MB/s / 1 MB/s = half
    its SMs: D's 0.199 s of SM work from 20.1 take 0.398 s, before the GET ends. (Spread
    over the node's 8 MB/s of PCIe, as for a host restore, it would be 1/16 of the SMs.)
    The node-average SM work of the copy: 0.5 x 1 MB / 8 MB/s = 0.0625 s."""
    sc = toy(
        node={"h2d_per_gpu": "1 MB/s", "copy_engine": "kernel", "copy_kernel_sm_share": 0.5},
        remote={"enabled": True, "t0": "0 s"},
        cluster={"load_policy": "async"},
    )
    reqs = [prompt(0, 0.0, 1000, 0), prompt(1, 20.0, 1001, 0), prompt(2, 20.0, 200, 500)]
    sim = Simulation(sc, requests=reqs)
    res = api.collect(sim.run(), sc)
    rows = {int(r.id): r for r in res.requests.itertuples()}
    assert rows[1].tokens_remote == 1000
    # the GET moves at the server's 1 MB/s while D computes (the client model's round
    # trips lengthen it, get_s >= 1 s, but not its rate then): half the issuing rank's SMs
    assert rows[1].remote_get_s >= 1.0 - 1e-9
    assert rows[2].ttft_s == pytest.approx(0.1 + 2 * 0.199)
    assert sim.engines[0].busy == pytest.approx(0.999 + 0.199 + 0.0625, abs=1e-6)


def stores(**node):
    """A (t = 0) computes 1,000 tokens (0.1 + 0.999 s); the GPU tier holds nothing, so at
    1.099 its 1 MB is stored into host over the GPU-to-host link (0.125 MB/s a GPU x 8:
    1 s, until 2.099). B, cold, 200 tokens, arrives at 1.2: its step (0.1 s fixed + 0.199 s
    of SM work) starts while the store still has 0.899 s to run."""
    sc = toy(
        node={"d2h_per_gpu": "0.125 MB/s", **node},
        tiers={"host": {"enabled": True, "capacity": "1 GB", "t0": "0 s"}},
        cluster={"load_policy": "async"},
    )
    reqs = [prompt(0, 0.0, 1000, 0), prompt(1, 1.2, 200, 500)]
    sim = Simulation(sc, requests=reqs)
    res = api.collect(sim.run(), sc)
    return {int(r.id): r for r in res.requests.itertuples()}, sim.engines[0]


def test_dma_stores_leave_the_next_step_alone():
    rows, engine = stores(copy_engine="dma")
    assert rows[1].ttft_s == pytest.approx(0.299)
    assert engine.busy == pytest.approx(0.999 + 0.199)
    assert engine.local.writes.sm_busy == 0.0


def test_a_kernel_store_running_into_a_step_takes_its_sms():
    """The store kernel holds half the SMs until 2.099, 0.799 s past the step's fixed part
    (1.2 + 0.1): the step's 0.199 s of SM work moves at half speed and takes 0.398 s (the
    vLLM blog's custom kernel stores every computed block this way). The stores' own SM
    work counts: 0.5 x (A's 1 MB + B's two blocks, 0.2 MB) / 1 MB/s."""
    rows, engine = stores(copy_engine="kernel", copy_kernel_sm_share=0.5)
    assert rows[1].ttft_s == pytest.approx(0.1 + 2 * 0.199)
    assert engine.local.writes.sm_busy == pytest.approx(0.5 * 1.2)


def test_a_store_kernel_holding_every_sm_stops_the_step_until_it_lands():
    # share 1: the step's SM work waits for the store (to 2.099), then takes 0.199 s
    rows, engine = stores(copy_engine="kernel", copy_kernel_sm_share=1.0)
    assert rows[1].ttft_s == pytest.approx(0.1 + 0.799 + 0.199)
    assert engine.local.writes.sm_busy == pytest.approx(1.2)


def test_a_finished_store_takes_nothing():
    # B arriving at 2.5, after the store landed at 2.099: nothing left to overlap
    sc = toy(
        node={"d2h_per_gpu": "0.125 MB/s", "copy_engine": "kernel", "copy_kernel_sm_share": 1.0},
        tiers={"host": {"enabled": True, "capacity": "1 GB", "t0": "0 s"}},
        cluster={"load_policy": "async"},
    )
    sim = Simulation(sc, requests=[prompt(0, 0.0, 1000, 0), prompt(1, 2.5, 200, 500)])
    res = api.collect(sim.run(), sc)
    rows = {int(r.id): r for r in res.requests.itertuples()}
    assert rows[1].ttft_s == pytest.approx(0.299)
