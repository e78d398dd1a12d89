"""Co-located serving (``engine.mode: colocated``, kvsim.sim.colocated; docs/engine-model.md,
"Co-located serving"): after its prefill a request decodes one token a step on the same
engine, decode tokens first in every step, its KV held in the pool.

The hand cases run the toy (1,000 B a token, 100-token blocks) on its timing table, where a
step costs 0.1 s plus (n - 1) ms for each chunk of n tokens: a decode token (n = 1) adds
nothing to the step's 0.1 s. One decode step's time on the roofline is worked from the
default profile's constants.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_batching import Recorder, rows

from kvsim import api
from kvsim.config.loader import scenario_from_dict
from kvsim.config.pools import pools
from kvsim.physics.step import Roofline
from kvsim.sim.simulation import Simulation
from kvsim.workload.request import Request

from conftest import examples, toy

PARTS = ["lost_s", "frontend_s", "queue_wait_s", "load_s", "compute_s", "store_s"]


def ask(rid: int, t: float, tokens: int, out: int, base: int) -> Request:
    """A request of ``tokens`` prompt tokens (100-token blocks base, base + 1, ...) and
    ``out`` output tokens."""
    return Request(rid, t, tokens, out, tuple(base + k for k in range(math.ceil(tokens / 100))))


def coloc(**engine) -> dict:
    return {
        "batching": "chunked",
        "mode": "colocated",
        "max_batched_tokens": 400,
        "max_batch_requests": 4,
        **engine,
    }


def run(sc, reqs):
    sim = Simulation(sc, requests=reqs)
    rec = sim.shared.run.steps = Recorder(sim.shared.run.steps)
    res = api.collect(sim.run(), sc)
    return res, rows(res), rec.steps


def decomposes(df) -> None:
    gap = (df[PARTS].sum(axis=1) - df["ttft_s"]).abs()
    assert (gap < 1e-9).all()


# ---- one decode step on the roofline -------------------------------------------------------


def test_one_decode_step_is_the_roofline_of_one_token_on_its_whole_context():
    """A 1,000-token prompt with 2 output tokens on the default 8xB300 GLM-5 profile: its
    second token is one decode step, the chunk (1, 1000) (its context: the prompt), so
    e2e - TTFT is, by hand,

        FLOPs = 78e9 + (1 x 1000 + 1/2) x 5e6                          = 83.0025 GFLOP
        bytes = 19e9 + 725e9 x (1 - (1 - 8/256)^1) + (1 + 1000) x 51,168 B = 41.707 GB
        t     = 20 ms + max(FLOPs / 7.218669e15, bytes / (8 x 8 TB/s))  = 20 ms + 0.6517 ms

    memory-bound: the weights it reads dwarf its 11.5 us of compute."""
    sc = scenario_from_dict(
        {
            "name": "one-decode",
            "profile": "b300-pcp8-glm5",
            "engine": coloc(max_batched_tokens=8192),
            "run": {"warmup": "0 s"},
            "workload": {
                "kind": "synthetic",
                "requests": 1,
                "block_tokens": 100,
                "arrivals": {"process": "constant", "rate": "1/s"},
                "prompt_tokens": {"dist": "fixed", "value": 1000},
            },
        }
    )
    steps = Simulation(sc).shared.run.steps
    assert isinstance(steps, Roofline) and steps.par is None  # the one roofline
    flops = 78e9 + (1000 + 0.5) * 5e6
    nbytes = 19e9 + 725e9 * (1 - (1 - 8 / 256)) + 1001 * 51168
    by_hand = 0.020 + max(flops / 7.218669e15, nbytes / (8 * 8e12))
    assert by_hand == pytest.approx(0.0206517, abs=1e-6)
    _, r, chunks = run(sc, [ask(0, 0.0, 1000, 2, 0)])
    assert chunks == [[(1000, 0)], [(1, 1000)]]  # the prompt, then one decode token
    assert r[0].e2e_s - r[0].ttft_s == pytest.approx(by_hand, rel=1e-12)
    assert r[0].tpot_s == pytest.approx(by_hand, rel=1e-12)
    assert r[0].output_tokens == 2
    # two decoding requests share a step: the weights once, each its own context's KV
    two = steps.compute_share([(1, 1000), (1, 1500)])
    cover = 1 - (1 - 8 / 256) ** 2
    assert two == pytest.approx((19e9 + 725e9 * cover + (1001 + 1501) * 51168) / 64e12)


# ---- steps: decode first, then prompt chunks --------------------------------------------


def test_a_prefill_chunk_waits_for_the_decode_budget():
    """A (100 tokens, 10 output tokens) arrives at 0, B (800 tokens, 1 output token) at
    0.1 s; budget 400. Step 1 is A's prompt (0.199 s, A's first token). From then every
    step gives A's decode token first, and B's chunks get what is left: 399, 399, then the
    last 2 tokens in a step of their own, 0.101 s. B's first token: 0.199 + 0.498 + 0.498 +
    0.101 = 1.296 s, a step later than without A's decoding (400 + 400 tokens: 1.197 s). A
    then decodes alone, 0.1 s a step: its tenth token at 1.296 + 6 x 0.1 = 1.896 s."""
    sc = toy(engine=coloc())
    res, r, chunks = run(sc, [ask(0, 0.0, 100, 10, 0), ask(1, 0.1, 800, 1, 100)])
    assert chunks[:4] == [
        [(100, 0)],
        [(1, 100), (399, 0)],
        [(1, 101), (399, 399)],
        [(1, 102), (2, 798)],
    ]
    assert all(c == [(1, 103 + k)] for k, c in enumerate(chunks[4:]))
    assert len(chunks) == 10
    assert r[1].finish_s == pytest.approx(1.296, abs=1e-9)
    assert r[1].e2e_s == r[1].ttft_s  # one output token: done at its first
    assert math.isnan(r[1].tpot_s) and math.isnan(r[1].itl_p99_s)
    assert r[0].ttft_s == pytest.approx(0.199, abs=1e-9)
    assert r[0].e2e_s == pytest.approx(1.896, abs=1e-9)
    assert r[0].tpot_s == pytest.approx((1.896 - 0.199) / 9, abs=1e-9)
    # its gaps: 0.498, 0.498, 0.101, then six of 0.1
    assert r[0].itl_p99_s == pytest.approx(0.498, abs=1e-9)
    s = res.summary
    assert s["output_tokens_per_s"] == pytest.approx(11 / 1.896, rel=1e-9)
    assert s["itl_p99_s"] == pytest.approx(0.498, abs=1e-9)
    decomposes(res.requests)
    # the same B without A's decoding: two 400-token chunks
    _, alone, _ = run(sc, [ask(0, 0.0, 100, 1, 0), ask(1, 0.1, 800, 1, 100)])
    assert alone[1].finish_s == pytest.approx(0.199 + 0.499 + 0.499, abs=1e-9)


def test_prefill_mode_has_no_decode_columns_or_keys():
    res, _, _ = run(toy(engine={"batching": "chunked"}), [ask(0, 0.0, 100, 10, 0)])
    for name in ("e2e_s", "tpot_s", "itl_p99_s", "swapped_bytes"):
        assert name not in res.requests.columns
    for key in ("tpot_p50_s", "e2e_p99_s", "itl_p99_s", "mean_resident_requests"):
        assert key not in res.summary


# ---- HBM: preemption when the pool fills ------------------------------------------------

# two requests of 600 prompt and 500 output tokens, budget 1,000, a 1,500-token pool
POOL = {"kv_per_gpu": "187.5 kB"}
PAIR = [ask(0, 0.0, 600, 500, 0), ask(1, 0.0, 600, 500, 100)]


def test_hold_reserves_prompt_and_output_so_the_second_waits():
    """Under hold each reserves 600 + 499 tokens (the last token's KV is never computed):
    B does not fit beside A and waits for A's last token; nothing is preempted. A: its
    prompt (0.699 s) and 499 decode steps (49.9 s): 50.599 s; B then the same."""
    sc = toy(node=POOL, engine=coloc(max_batched_tokens=1000))
    assert pools(sc).node_kv == 1_500_000
    res, r, _ = run(sc, PAIR)
    assert r[0].e2e_s == pytest.approx(0.699 + 49.9, abs=1e-6)
    assert r[1].ttft_s == pytest.approx(0.699 + 49.9 + 0.699, abs=1e-6)
    assert r[1].e2e_s == pytest.approx(2 * (0.699 + 49.9), abs=1e-6)
    assert res.summary["preemptions"] == 0


def test_recompute_preempts_when_the_pool_fills_and_counts_the_recomputed_tokens():
    """Under recompute both start at once: step 1 is A's 600 and B's first 400 tokens
    (1.098 s), step 2 A's first decode token and B's last 200 (0.299 s; B's first token
    at 1.397 s). Then both decode, two tokens more a step: 1,201 tokens held after step 2,
    1,499 before step 152, where A takes the 1,500th and B's token finds no room: B, the
    last running, is preempted, its 600 + 149 computed tokens lost (150 tokens out). A
    ends at its 500th step (1.397 + 498 x 0.1 = 51.197 s); B, needing 600 + 150 tokens,
    fits only then: one step recomputes its 750 tokens (0.849 s) and samples its 151st
    token, 349 decode steps more: 51.197 + 0.849 + 34.9 = 86.946 s. Its TTFT is its first
    token's, and still decomposes."""
    sc = toy(node=POOL, engine=coloc(max_batched_tokens=1000, preemption="recompute"))
    res, r, chunks = run(sc, PAIR)
    assert chunks[0] == [(600, 0), (400, 0)]
    assert chunks[1] == [(1, 600), (200, 400)]
    assert chunks[150] == [(1, 749), (1, 748)]  # step 151: both decode
    assert chunks[151] == [(1, 750)]  # step 152: B preempted itself, A alone
    assert r[0].e2e_s == pytest.approx(51.197, abs=1e-6)
    assert (r[0].preemptions, r[0].preempted_tokens) == (0, 0)
    assert (r[1].preemptions, r[1].preempted_tokens) == (1, 749)
    assert r[1].ttft_s == pytest.approx(1.397, abs=1e-9)
    assert chunks[500] == [(750, 0)]  # B's re-prefill: prompt and 150 output tokens
    assert r[1].e2e_s == pytest.approx(86.946, abs=1e-6)
    assert r[1].output_tokens == 500
    assert res.summary["preempted_tokens"] == 749
    # every step's tokens: the prompts, the decode tokens and the recomputed ones
    assert sum(n for c in chunks for n, _ in c) == 2 * (600 + 499) + 749
    decomposes(res.requests)


def test_swap_moves_the_preempted_kv_out_and_back_over_the_host_links():
    """Under swap, B's 749 tokens of KV (749 kB) go to host over the GPU-to-host link at
    step 152 instead of being dropped; it comes back once the pool has room for them and
    for the next step's tokens (after A's last token), over the host-to-GPU link, and
    decodes on from its 150th token: nothing is computed twice."""
    sc = toy(node=POOL, engine=coloc(max_batched_tokens=1000, preemption="swap"))
    res, r, chunks = run(sc, PAIR)
    h2d = sc.node.h2d_per_gpu * sc.node.gpus
    assert (r[1].preemptions, r[1].preempted_tokens) == (1, 0)
    assert r[1].swapped_bytes == 2 * 749_000
    assert r[1].e2e_s == pytest.approx(51.197 + 749_000 / h2d + 350 * 0.1, abs=1e-6)
    assert sum(n for c in chunks for n, _ in c) == 2 * (600 + 499)
    links = res.summary["link_utilisation"]
    assert links["d2h"]["bytes"] == 749_000  # (no other copy out of HBM in the toy)
    assert links["h2d"]["bytes"] == 749_000
    assert res.summary["swapped_bytes"] == 2 * 749_000
    decomposes(res.requests)


# ---- Little's law -------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_littles_law_holds_on_a_colocated_run(seed):
    """L = lambda W on a co-located run: the engine's time-average of requests on it
    (``mean_resident_requests``, integrated from its arrivals and last tokens) against the
    measured rate times the mean end-to-end latency from the records, within 2%, on each of
    three seeded replications (seeds 0-1-2; 400 Poisson requests at 1/s, lognormal prompts
    and outputs, a pool small enough to preempt, every request measured). Every request
    arrives and leaves inside the window, so the two agree up to float rounding; a record
    written before its request leaves, or an e2e from the wrong clock, breaks it."""
    sc = toy(
        seed=seed,
        node={"kv_per_gpu": "200 kB"},  # 1,600 tokens
        engine=coloc(max_batched_tokens=1000, max_batch_requests=32, preemption="recompute"),
        workload={
            "requests": 400,
            "arrivals": {"process": "poisson", "rate": "1/s"},
            "prompt_tokens": {"dist": "lognormal", "median": 200, "sigma": 0.6, "max": 800},
            "output_tokens": {"dist": "lognormal", "median": 20, "sigma": 0.8, "max": 200},
        },
    )
    s = api.run(sc).summary
    assert s["requests"] == 400 and s["requests_unfinished"] == 0
    assert s["preemptions"] > 0  # the pool did fill
    little = s["requests_per_s"] * s["e2e_mean_s"]
    assert s["mean_resident_requests"] == pytest.approx(little, rel=0.02)


# ---- invariants ---------------------------------------------------------------------------


@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    preemption=st.sampled_from(["hold", "recompute", "swap"]),
    kv=st.sampled_from(["150 kB", "250 kB", "1 MB"]),
    gpu=st.sampled_from(["0 B", "100 kB"]),
    budget=st.sampled_from([200, 1000]),
    seqs=st.sampled_from([2, 8, 32]),
    policy=st.sampled_from(["sync", "async"]),
    shapes=st.lists(
        st.tuples(st.integers(1, 900), st.integers(0, 60), st.integers(0, 3)),
        min_size=1,
        max_size=12,
    ),
)
def test_every_request_ends_and_its_records_hold(preemption, kv, gpu, budget, seqs, policy, shapes):
    """Any pool, budget, preemption rule and load policy: every request ends (none stuck),
    its tokens all out, e2e at or after TTFT, TTFT still its parts' sum, Little's law
    exact up to rounding; hold never preempts, swap loses no decode work."""
    reqs = []
    t = 0.0
    for i, (tokens, out, gap) in enumerate(shapes):
        t += gap * 0.1
        reqs.append(ask(i, t, tokens, out, 100 * (i % 3)))  # some share prefixes
    sc = toy(
        node={"kv_per_gpu": kv},
        tiers={"gpu": {"capacity": gpu}, "host": {"enabled": True, "capacity": "10 MB"}},
        cluster={"load_policy": policy},
        engine=coloc(max_batched_tokens=budget, max_batch_requests=seqs, preemption=preemption),
    )
    res, _, chunks = run(sc, reqs)
    df = res.requests
    s = res.summary
    assert len(df) == len(reqs) and s["requests_unfinished"] == 0
    assert (df["output_tokens"] == [max(q.output_tokens, 1) for q in reqs]).all()
    assert (df["e2e_s"] >= df["ttft_s"] - 1e-12).all()
    one = df["output_tokens"] == 1
    assert df.loc[one, "tpot_s"].isna().all() and df.loc[~one, "tpot_s"].notna().all()
    decomposes(df)
    # one-token chunks in the steps: every token after the first is a decode step's, but
    # the one a recomputed request's refill samples (at most one per preemption)
    decode = sum(1 for c in chunks for n, _ in c if n == 1)
    assert decode + s["preemptions"] >= int((df["output_tokens"] - 1).sum())
    assert s["mean_resident_requests"] == pytest.approx(
        s["requests_per_s"] * s["e2e_mean_s"], rel=1e-6
    )
    if preemption == "hold":
        assert s["preemptions"] == 0
    if preemption != "swap":
        assert s["swapped_bytes"] == 0
