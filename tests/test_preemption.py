"""Preemption (``engine.preemption``, kvsim.sim.preempt; docs/engine-model.md,
"Preemption"): ``hold`` reserves a request's whole prompt when it is admitted, ``recompute``
allocates KV chunk by chunk and preempts the last running request when a chunk does not
fit (vLLM V1).

The hand cases run the toy (1,000 B a token, 100-token blocks) on its timing table: a step
takes 0.1 s plus (n - 1) ms for each chunk of n tokens. The node's KV pool is 8 GPUs x
187.5 kB = 1,500 tokens, one and a half 1,000-token prompts; the budget is 400 tokens a
step and a prompt takes at most 200 of them (``long_prefill_token_threshold``), so two
prompts share every step: 0.498 s a step for two 200-token chunks, 0.299 s for one.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_batching import Recorder, prompt, rows

from kvsim import api, plugins
from kvsim.config.pools import pools
from kvsim.errors import InputError
from kvsim.sim.job import Job
from kvsim.sim.scheduler import Waiting
from kvsim.sim.simulation import Simulation

from conftest import examples, req, toy

TWO = 0.1 + 0.199 + 0.199  # a step of two 200-token chunks
ONE = 0.1 + 0.199  # a step of one
PARTS = ["lost_s", "frontend_s", "queue_wait_s", "load_s", "compute_s", "store_s"]


def scenario(preemption: str, gpu: str = "0 B", **engine):
    return toy(
        node={"kv_per_gpu": "187.5 kB"},
        tiers={"gpu": {"capacity": gpu}},
        engine={
            "batching": "chunked",
            "max_batched_tokens": 400,
            "long_prefill_token_threshold": 200,
            "preemption": preemption,
            **engine,
        },
    )


def two_prompts(preemption: str, gpu: str = "0 B"):
    """A (blocks 0-9) and B (blocks 100-109), 1,000 tokens each, arriving together."""
    sc = scenario(preemption, gpu)
    assert pools(sc).node_kv == 1_500_000  # one and a half prompts
    res = api.run(sc, requests=[prompt(0, 0.0, 1000, 0), prompt(1, 0.0, 1000, 100)])
    return res, rows(res)


def decomposes(df) -> None:
    gap = (df[PARTS].sum(axis=1) - df["ttft_s"]).abs()
    assert (gap < 1e-9).all()


def test_hold_is_the_default_and_reserves_the_whole_prompt():
    """A reserves its 1,000 tokens; B's 1,000 more do not fit the 1,500: B waits until A
    is done. A: five one-chunk steps (1.495 s); B: five more (2.990 s). kvsim's engine as
    it was before the field."""
    assert toy().engine.preemption == "hold"
    res, r = two_prompts("hold")
    assert r[0].finish_s == pytest.approx(5 * ONE, abs=1e-9)
    assert r[1].finish_s == pytest.approx(10 * ONE, abs=1e-9)
    assert r[1].queue_wait_s == pytest.approx(5 * ONE, abs=1e-9)
    assert (r[0].steps, r[1].steps) == (5, 5)
    assert res.summary["preemptions"] == res.summary["preempted_tokens"] == 0
    assert (res.requests["preemptions"] == 0).all()


def test_recompute_preempts_the_second_prompt_where_the_pool_fills():
    """Both are admitted at once (each prompt fits the free pool when it is picked: A's
    1,000 of 1,500, B's 1,000 beside A's first 200), 200 tokens each a step: 400, 800,
    1,200 held after steps 1-3. Step 4 (t = 1.494): A's chunk fits (1,400), B's does not
    (1,600): B, last in the running list, is preempted with 600 tokens computed and freed;
    the step is A's alone (no waiting request joins a step with a preemption): 1.793.
    Step 5: A's last chunk (1,000 held); B, first in the queue, waits: its whole prompt
    does not fit beside A's (vLLM's full-prompt check at admission): 2.092, A done. B
    alone for five steps: 3.587 s."""
    res, r = two_prompts("recompute")
    a, b = r[0], r[1]
    assert a.finish_s == pytest.approx(3 * TWO + 2 * ONE, abs=1e-9)  # 2.092
    assert b.finish_s == pytest.approx(3 * TWO + 7 * ONE, abs=1e-9)  # 3.587
    assert (a.preemptions, b.preemptions) == (0, 1)
    assert (a.preempted_tokens, b.preempted_tokens) == (0, 600)
    assert b.tokens_compute == 1000 and b.recomputed_tokens == 0  # no cache: nothing seen
    assert (a.steps, b.steps) == (5, 3 + 5)
    # B's parts: its wait back in the queue (steps 4 and 5) and both attempts' compute
    assert b.queue_wait_s == pytest.approx(2 * ONE, abs=1e-9)
    assert b.compute_s == pytest.approx(3 * TWO + 5 * ONE, abs=1e-9)
    decomposes(res.requests)
    assert res.summary["preemptions"] == 1 and res.summary["preempted_tokens"] == 600


def test_a_preempted_request_hits_its_own_blocks_the_gpu_cache_kept():
    """With a 1.5 MB prefix cache B's six full blocks (600 tokens) stay in HBM when it is
    preempted, in what A's 800 tokens leave. At step 5 A takes 200 more (1,000 held): the
    cache keeps 500 tokens, and evicts B's last block first (vLLM frees a request's blocks
    tail first). B's re-run hits its first five blocks (500 tokens), so its working KV
    (500) fits beside A's and it is admitted at once; it recomputes block 105 (recomputed:
    computed before) and the rest: 200 in step 5 (t = 2.291, A done), 200 in step 6
    (2.590), 100 in step 7 (0.199 s): 2.789 s."""
    res, r = two_prompts("recompute", gpu="1.5 MB")
    a, b = r[0], r[1]
    assert a.finish_s == pytest.approx(4 * TWO + ONE, abs=1e-9)
    assert (b.tokens_gpu, b.tokens_compute, b.recomputed_tokens) == (500, 500, 100)
    assert b.decision == "gpu" and b.preempted_tokens == 600
    assert b.finish_s == pytest.approx(4 * TWO + ONE + ONE + (0.1 + 0.099), abs=1e-9)
    decomposes(res.requests)


class Newest(plugins.SchedulingPolicy):
    """The newest request first."""

    def priority(self, request, engine):
        return -request.arrival


def test_a_preempted_request_goes_back_before_the_waiting_ones():
    """As above, with C (300 tokens) arriving at t = 1.0 and a scheduler that puts the
    newest first. Step 4 preempts B and takes no waiting request (C waits though it would
    fit). Step 5: B is at the front of the queue (vLLM's prepend), though the scheduler
    ranks C first; B does not fit, and C waits behind it: A alone, 2.092 (A done). Step
    6: B 200 and C 200 (2.590); step 7: B 200 and C's last 100 (0.398 s: C done at
    2.988); B's last three alone: 3.885."""
    reqs = [prompt(0, 0.0, 1000, 0), prompt(1, 0.0, 1000, 100), prompt(2, 1.0, 300, 200)]
    with plugins.registered("pre_newest", Newest):
        res = api.run(scenario("recompute", scheduler="pre_newest"), requests=reqs)
    r = rows(res)
    t5 = 3 * TWO + 2 * ONE  # 2.092
    c = t5 + TWO + (0.1 + 0.199 + 0.099)  # 2.988
    assert r[0].finish_s == pytest.approx(t5, abs=1e-9)
    assert r[2].finish_s == pytest.approx(c, abs=1e-9)
    assert r[1].finish_s == pytest.approx(c + 3 * ONE, abs=1e-9)
    assert r[2].queue_wait_s == pytest.approx(t5 - 1.0, abs=1e-9)
    assert r[1].preemptions == 1 and r[2].preemptions == 0
    decomposes(res.requests)


def test_the_front_of_the_queue():
    """push_front: before every other entry, the last one put there first; requests
    already computing go before it (first() is the last place); a plain push after it
    stays behind."""
    for kind in ("fcfs", "sjf", "lpm"):
        w = Waiting(kind, 50_000.0, lambda job: 0)
        jobs = [Job(req(i, float(i), 100, [i]), False, (i,)) for i in range(4)]
        w.push(jobs[0])
        w.push_front(jobs[3])
        w.push_front(jobs[2])
        w.push(jobs[1])
        assert w.first() == (math.inf, math.inf)
        assert [j.req.id for j in w.jobs()] == [2, 3, 0, 1]
        assert [w.pop().req.id for _ in range(4)] == [2, 3, 0, 1]


def test_a_prompt_larger_than_the_pool_is_refused_under_both():
    """1,501 tokens cannot fit a 1,500-token pool: bad input, preemption or not (a lone
    request would otherwise preempt itself forever)."""
    for preemption in ("hold", "recompute"):
        with pytest.raises(InputError, match="KV pool"):
            api.run(scenario(preemption), requests=[prompt(0, 0.0, 1501, 0)])


def test_same_inputs_same_records():
    """Preemptions are decided by the clock and the queue alone: two runs of a loaded
    engine give the same records, bit for bit."""
    sc = scenario("recompute", gpu="1 MB", max_batched_tokens=600, long_prefill_token_threshold=100)
    reqs = [prompt(i, 0.05 * i, 300 + 97 * (i % 8), 100 * (i % 5)) for i in range(40)]
    first = api.run(sc, requests=reqs)
    second = api.run(sc, requests=reqs)
    assert first.summary["preemptions"] > 0
    pd.testing.assert_frame_equal(first.requests, second.requests)


class PoolWatch(Recorder):
    """Keeps every step's chunks, and checks at each step that no engine's working pool
    holds more than its size."""

    def __init__(self, inner, sim):
        super().__init__(inner)
        self.sim = sim

    def compute_share(self, chunks):
        for e in self.sim.engines:
            assert e.pool.used <= e.pool.size * (1 + 1e-12)
        return super().compute_share(chunks)


# prompts up to the pool's 1,500 tokens, most over half of it, arriving close together,
# in chunks of at most 250 tokens: requests admitted together outgrow the pool
tokens = st.one_of(st.integers(1, 1500), st.integers(700, 1500), st.integers(700, 1500))
workloads = st.lists(
    st.tuples(st.floats(0, 0.3), tokens, st.integers(0, 7)), min_size=2, max_size=20
)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workloads,
    st.integers(100, 1500),
    st.integers(2, 6),
    st.sampled_from([100, 250]),
    st.sampled_from(["fcfs", "lpm", "sjf"]),
    st.sampled_from(["sync", "async", "recompute", "auto"]),
    st.sampled_from(["0 B", "500 kB", "1.5 MB"]),
    st.sampled_from([None, 1, 2]),
    st.integers(1, 2),
    st.sampled_from([None, "reroute", "drop"]),
)
def test_recompute_never_sticks_and_accounts_for_every_token(
    spec, budget, max_reqs, threshold, sched, policy, gpu, inflight, engines, down
):
    """Whatever the mix, on a pool of one to one and a half prompts: every request
    finishes or is dropped (no deadlock), no pool ever holds more than its size, the
    steps' tokens are the computed tokens plus those preempted attempts computed (without
    a failed engine, whose work is lost), sources sum to the prompt, recomputed tokens
    are computed ones, and TTFT decomposes. ``down``: engine 0 fails from 0.3 s to 0.8 s
    (its requests re-routed or dropped)."""
    spec = sorted(spec)
    reqs = [
        req(i, t, n, [p * 1000 + k for k in range(math.ceil(n / 100))])
        for i, (t, n, p) in enumerate(spec)
    ]
    sc = toy(
        node={"kv_per_gpu": "187.5 kB"},
        tiers={
            "gpu": {"capacity": gpu},
            "host": {"enabled": True, "capacity": "2 MB", "t0": "5 ms"},
        },
        engine={
            "batching": "chunked",
            "max_batched_tokens": budget,
            "max_batch_requests": max_reqs,
            "long_prefill_token_threshold": threshold,
            "scheduler": sched,
            "max_inflight_restores": inflight,
            "preemption": "recompute",
        },
        cluster={"load_policy": policy, "engines": engines},
        faults=[]
        if down is None
        else [
            {"kind": "engine_down", "engine": 0, "at": "0.3 s", "until": "0.8 s", "requests": down}
        ],
    )
    sim = Simulation(sc, requests=reqs)
    watch = sim.shared.run.steps = PoolWatch(sim.shared.run.steps, sim)
    res = api.collect(sim.run(), sc)
    assert len(res.requests) == len(reqs) and res.summary["requests_unfinished"] == 0
    df = res.requests[res.requests["decision"] != "dropped"]
    if policy != "auto" and down is None:  # (auto's estimates price steps by the model)
        computed = sum(n for chunks in watch.steps for n, _ in chunks)
        assert computed == df["tokens_compute"].sum() + df["preempted_tokens"].sum()
    src = df[["tokens_gpu", "tokens_host", "tokens_nvme", "tokens_remote", "tokens_compute"]]
    assert (src.sum(axis=1) == df["input_tokens"]).all()
    assert (df["recomputed_tokens"] <= df["tokens_compute"]).all()
    assert ((df["preemptions"] > 0) | (df["preempted_tokens"] == 0)).all()
    assert res.summary["preemptions"] == df["preemptions"].sum()
    decomposes(df)
    assert (df[PARTS] >= -1e-12).all().all()
