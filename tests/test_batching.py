"""The batched engine: chunked prefill under a token budget, the roofline step model,
schedulers, layer-wise overlap and honest asynchronous restores, on hand-computed cases.

Most cases use a linear toy roofline (no attention, no weights): a step of T tokens takes
``FIXED + T x PER_TOKEN``, so a step's time is arithmetic a reader can check.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvsim import api
from kvsim.config.loader import load_scenario, scenario_from_dict
from kvsim.physics.step import Roofline, dense_pairs, expert_coverage, sparse_pairs
from kvsim.profiles import derive
from kvsim.sim.simulation import Simulation

from conftest import examples, req, toy

FIXED = 0.01  # s per step
PER_TOKEN = 1e-4  # s per token (1e8 FLOP/token at 1e12 FLOP/s)
LINEAR = {
    "fixed": f"{FIXED * 1000:g} ms",
    "achievable_flops": 1e12,
    "linear_flops_per_token": 1e8,
    "pair_flops": 0.0,
    "dense_weight_bytes": "0 B",
}


def linear(sections=None, **engine):
    """The toy with the linear roofline and a chunked engine (``engine`` fields over it,
    other ``sections`` merged in)."""
    return toy(
        node={"hbm_bandwidth_per_gpu": "1 EB/s"},
        timing={"roofline": LINEAR},
        engine={"batching": "chunked", **engine},
        **(sections or {}),
    )


def rows(results):
    return {int(r.id): r for r in results.requests.itertuples()}


def prompt(rid, t, tokens, base):
    """A request of ``tokens`` tokens whose 100-token blocks are base, base + 1, ..."""
    return req(rid, t, tokens, [base + k for k in range(math.ceil(tokens / 100))])


def step_time(tokens):
    return FIXED + tokens * PER_TOKEN


# ---- the roofline formula ---------------------------------------------------------------


def test_a_batch_that_fits_the_budget_is_one_step_of_the_roofline_time():
    """Four cold 2,000-token prompts arriving together, budget 8,192: one step whose time is
    the default profile's roofline worked out here by hand."""
    sc = scenario_from_dict(
        {
            "name": "batch",
            "tiers": {
                "gpu": {"capacity": "0 B"},
                "host": {"enabled": False},
                "nvme": {"enabled": False},
            },
            "remote": {"enabled": False},
            "workload": {
                "kind": "synthetic",
                "requests": 1,
                "arrivals": {"process": "constant", "rate": "1/s"},
                "prompt_tokens": {"dist": "fixed", "value": 10},
            },
        }
    )
    reqs = [req(i, 0.0, 2000, [100 * i + k for k in range(4)]) for i in range(4)]
    res = api.run(sc, requests=reqs)
    r = sc.timing.roofline
    # FLOPs: per prompt 2,000 x 78 GFLOP + 2,000^2 / 2 pairs x 5 MFLOP
    flops = 4 * (2000 * 7.8e10 + 2000**2 / 2 * 5e6)
    # bytes: dense weights, every expert (8,000 tokens x top-8 of 256 touch them all),
    # and each prompt's KV read once
    cover = 1 - (1 - 8 / 256) ** 8000
    nbytes = 19e9 + 725e9 * cover + 4 * 2000 * 51_168
    want = 0.02 + max(flops / r.achievable_flops, nbytes / (8 * 8e12))
    assert flops / r.achievable_flops > nbytes / 64e12  # compute-bound at this size
    for row in rows(res).values():
        assert row.steps == 1
        assert row.ttft_s == pytest.approx(want, rel=1e-9)


def test_a_small_step_is_memory_bound():
    """Eight tokens touch ~23% of the experts; reading them and the dense weights takes
    longer than computing the tokens."""
    # the default profile's roofline (as derive.py records it), without the fixed part
    m = Roofline(**{**derive.B300_GLM5_ROOFLINE, "fixed": 0.0}, achievable_flops=7.218669e15)
    cover = 1 - (1 - 8 / 256) ** 8
    assert cover == pytest.approx(0.224, abs=1e-3)
    want = (19e9 + 725e9 * cover + 8 * 51_168) / 64e12
    assert m.step([(8, 0)]) == pytest.approx(want, rel=1e-12)
    assert m.flops_of([(8, 0)]) / 7.218669e15 < want


def test_attention_pairs():
    assert dense_pairs(4, 10) == 4 * 10 + 8
    # sparse: no query sees more than top_k keys
    assert sparse_pairs(4, 10, 100) == dense_pairs(4, 10)  # the cap never binds
    assert sparse_pairs(4, 200, 100) == 400  # it always binds
    assert sparse_pairs(10, 95, 100) == dense_pairs(5, 95) + 5 * 100  # binds half-way
    assert expert_coverage(0, 256, 8) == 0 and expert_coverage(5, 4, 8) == 1


def test_sparse_attention_grows_linearly_past_top_k():
    kw = dict(
        fixed=0.0,
        achievable_flops=1e15,
        hbm_bandwidth=1e30,
        linear_flops_per_token=0.0,
        pair_flops=1e6,
        kv_bytes_per_token=0.0,
        dense_weight_bytes=0.0,
    )
    dense, sparse = Roofline(**kw), Roofline(**kw, sparse_top_k=2048, indexer_pair_flops=1e5)
    a, b = sparse.step([(1, 100_000)]), sparse.step([(1, 200_000)])
    assert a == pytest.approx((2048 * 1e6 + 100_000.5 * 1e5) / 1e15)
    assert b - a == pytest.approx(100_000 * 1e5 / 1e15)  # only the indexer grows
    assert dense.step([(1, 200_000)]) > sparse.step([(1, 200_000)])


def test_long_contexts_grow_super_linearly_on_the_default_profile():
    from kvsim.physics.step import scenario_lone_seconds

    sc = load_scenario("scenarios/quickstart.yaml")
    t = scenario_lone_seconds(sc)
    assert t(16384) == pytest.approx(0.31, rel=1e-6)  # calibrated
    assert t(262144) / t(131072) > 3.0  # dense attention: close to 4x, not 2x


# ---- chunking and the budget ------------------------------------------------------------


def test_a_64k_prompt_with_an_8k_budget_takes_8_steps():
    res = api.run(linear(max_batched_tokens=8192), requests=[prompt(0, 0.0, 65536, 0)])
    r = rows(res)[0]
    assert r.steps == 8
    assert r.ttft_s == pytest.approx(8 * step_time(8192))


def test_a_short_prompt_behind_a_long_one():
    """A 1k prompt arriving just after a 64k one: under fcfs chunked it waits for the
    whole 64k (running requests go first), with sjf or a long-prefill threshold it
    finishes long before, and a serial engine serves it after the 64k."""
    reqs = [prompt(0, 0.0, 65536, 0), prompt(1, 0.001, 1024, 10_000)]

    def finish(sc):
        r = rows(api.run(sc, requests=reqs))
        return r[0].finish_s, r[1].finish_s

    long_, short = finish(linear(max_batched_tokens=8192, scheduler="sjf"))
    # step 1 (t = 0): the 64k alone; step 2: the 1k first, 7,168 tokens of the 64k; then
    # the 64k's last 50,176 tokens: six full steps and one of 1,024
    assert short == pytest.approx(2 * step_time(8192))
    assert long_ == pytest.approx(8 * step_time(8192) + step_time(1024))
    long_, short = finish(linear(max_batched_tokens=8192, long_prefill_token_threshold=4096))
    # step 1: 4,096 of the 64k; step 2: 4,096 of the 64k + the 1k
    assert short == pytest.approx(step_time(4096) + step_time(5120))
    assert short < long_ / 5
    long_, short = finish(linear(max_batched_tokens=8192))
    assert short > long_  # fcfs: the 64k holds the whole budget until it is done
    serial = toy(node={"hbm_bandwidth_per_gpu": "1 EB/s"}, timing={"roofline": LINEAR})
    long_, short = finish(serial)
    assert long_ == pytest.approx(step_time(65536))
    assert short == pytest.approx(long_ + step_time(1024))


def test_max_batch_requests_bounds_a_step():
    reqs = [prompt(i, 0.0, 100, i) for i in range(5)]
    r = rows(api.run(linear(max_batch_requests=2), requests=reqs))
    finishes = sorted(x.finish_s for x in r.values())
    s = step_time(200)
    assert finishes == pytest.approx([s, s, 2 * s, 2 * s, 2 * s + step_time(100)])


# ---- properties and an independent simulation ----------------------------------------------


class Recorder:
    """Wraps a step model and keeps every step's chunks."""

    def __init__(self, inner):
        self.inner = inner
        self.steps: list[list[tuple[int, int]]] = []

    @property
    def extrapolations(self):
        return self.inner.extrapolations

    @property
    def fixed_s(self):
        return self.inner.fixed_s

    def step(self, chunks):
        return self.fixed_s + self.compute_share(chunks)

    def compute_share(self, chunks):  # the engine asks this once per step
        self.steps.append(list(chunks))
        return self.inner.compute_share(chunks)

    def overhead(self, chunks, compute):
        return self.inner.overhead(chunks, compute)


prompts = st.lists(
    st.tuples(st.floats(0, 2.0), st.integers(1, 5000), st.integers(0, 3)), min_size=1, max_size=25
)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prompts,
    st.integers(100, 6000),
    st.integers(1, 6),
    st.integers(0, 3000),
    st.sampled_from(["fcfs", "lpm", "sjf"]),
    st.sampled_from(["sync", "async", "recompute"]),
    st.sampled_from([None, 1, 2]),
)
def test_budget_and_tokens_properties(spec, budget, max_reqs, threshold, sched, policy, inflight):
    """Whatever the mix: no step exceeds the token budget, the request cap or the
    long-prefill cap; every prompt token is computed or restored exactly once (the steps'
    tokens sum to the computed tokens); sources sum to the prompt; TTFT decomposes."""
    spec = sorted(spec)
    reqs = [
        req(i, t, n, [prefix * 1000 + k for k in range(math.ceil(n / 100))])
        for i, (t, n, prefix) in enumerate(spec)
    ]
    sc = toy(
        node={"hbm_bandwidth_per_gpu": "1 EB/s"},
        timing={"roofline": LINEAR},
        engine={
            "batching": "chunked",
            "max_batched_tokens": max(budget, 100),
            "max_batch_requests": max_reqs,
            "long_prefill_token_threshold": threshold,
            "scheduler": sched,
        },
        tiers={
            "gpu": {"capacity": "300 kB"},
            "host": {"enabled": True, "capacity": "2 MB", "t0": "5 ms"},
        },
        cluster={"load_policy": policy},
    )
    sim = Simulation(sc, requests=reqs)
    rec = sim.shared.run.steps = Recorder(sim.shared.run.steps)
    res = api.collect(sim.run(), sc)
    cap = threshold if threshold > 0 else budget
    for chunks in rec.steps:
        assert sum(n for n, _ in chunks) <= max(budget, 100)
        assert len(chunks) <= max_reqs
        assert all(0 < n <= cap for n, _ in chunks)
    df = res.requests
    assert len(df) == len(reqs) and res.summary["requests_unfinished"] == 0  # none stuck
    assert sum(n for chunks in rec.steps for n, _ in chunks) == df["tokens_compute"].sum()
    src = df[["tokens_gpu", "tokens_host", "tokens_nvme", "tokens_remote", "tokens_compute"]]
    assert (src.sum(axis=1) == df["input_tokens"]).all()
    parts = df["queue_wait_s"] + df["load_s"] + df["compute_s"] + df["store_s"] + df["lost_s"]
    assert (parts - df["ttft_s"]).abs().max() < 1e-9
    assert (df[["queue_wait_s", "load_s", "compute_s", "store_s"]] >= -1e-12).all().all()


def reference_fcfs(reqs, budget, threshold, max_reqs):
    """An independent chunked-prefill simulation (no caches): fcfs, running requests first,
    step time FIXED + tokens x PER_TOKEN. Returns {id: finish time}."""
    pending = sorted(reqs, key=lambda r: (r.arrival, r.id))
    running: list[list] = []  # [id, tokens left]
    t = 0.0
    done = {}
    per = min(budget, threshold) if threshold else budget
    while pending or running:
        if not running and pending and pending[0].arrival > t:
            t = pending[0].arrival
        while pending and pending[0].arrival <= t:
            r = pending.pop(0)
            running.append([r.id, r.input_tokens])
        left, slots, batch = budget, max_reqs, []
        for item in running:
            if left <= 0 or slots == 0:
                break
            n = min(item[1], per, left)
            batch.append((item, n))
            left -= n
            slots -= 1
        t += step_time(sum(n for _, n in batch))
        for item, n in batch:
            item[1] -= n
            if item[1] == 0:
                done[item[0]] = t
        running = [item for item in running if item[1] > 0]
    return done


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.floats(0, 3.0), st.integers(1, 20_000)), min_size=1, max_size=30),
    st.integers(512, 16384),
    st.integers(0, 8192),
    st.integers(1, 8),
)
def test_chunked_fcfs_matches_an_independent_simulation(spec, budget, threshold, max_reqs):
    spec = sorted(spec)
    reqs = [
        req(i, t, n, [10_000 * i + k for k in range(math.ceil(n / 100))])
        for i, (t, n) in enumerate(spec)
    ]
    sc = linear(
        max_batched_tokens=budget,
        long_prefill_token_threshold=threshold,
        max_batch_requests=max_reqs,
    )
    got = {int(r.id): r.finish_s for r in api.run(sc, requests=reqs).requests.itertuples()}
    want = reference_fcfs(reqs, budget, threshold, max_reqs)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-9)


# ---- layer-wise overlap --------------------------------------------------------------------

LAYERS = {
    "kind": "mla",
    "layers": 10,
    "latent_dim": 100,
    "rope_dim": 0,
    "latent_dtype_bytes": 1,
    "rope_dtype_bytes": 1,
}


def host_hit(h2d_total_mb_s, layerwise):
    """A (t = 0) computes blocks 0-9 (they fall to host: the GPU tier holds nothing); B
    (t = 10) restores those 1,000 tokens from host (1 MB) and computes its last token:
    the toy's step t(1, 1000) = 0.1 s. Host T0 0, 10 layers."""
    sc = toy(
        model={"kv_layout": LAYERS},
        node={"h2d_per_gpu": f"{h2d_total_mb_s / 8} MB/s"},
        tiers={"host": {"enabled": True, "capacity": "1 GB", "t0": "0 s"}},
        engine={"layerwise": layerwise},
    )
    reqs = [prompt(0, 0.0, 1000, 0), prompt(1, 10.0, 1001, 0)]
    return rows(api.run(sc, requests=reqs))[1]


@pytest.mark.parametrize(
    ("mb_s", "overlapped", "plain"),
    [
        # load 0.05 s < compute 0.1 s: the first layer arrives at 0.005, compute ends 0.1
        # later; without overlap, load then compute
        (20, 0.005 + 0.1, 0.05 + 0.1),
        # load 0.5 s > compute 0.1 s: the last layer arrives at 0.5, its compute takes 0.01
        (2, 0.5 + 0.01, 0.5 + 0.1),
    ],
)
def test_layerwise_overlaps_a_restore_with_compute(mb_s, overlapped, plain):
    on, off = host_hit(mb_s, True), host_hit(mb_s, False)
    assert on.tokens_host == 1000 and on.tokens_compute == 1
    assert on.ttft_s == pytest.approx(overlapped)
    assert off.ttft_s == pytest.approx(plain)
    assert on.load_s == pytest.approx(off.load_s)  # the transfer itself is the same


def test_layerwise_overlaps_the_staging_copy():
    """Staging 100 kB at 1 MB/s (0.1 s) after a 0.199 s step: overlapped, the step holds
    0.199 + 0.1 / 10; without overlap 0.199 + 0.1."""
    for layerwise, want in ((True, 0.199 + 0.01), (False, 0.199 + 0.1)):
        sc = toy(
            model={"kv_layout": LAYERS},
            node={"d2h_per_gpu": "1 MB/s"},  # unsharded: one rank stages at 1 MB/s
            remote={"enabled": True, "streams": True},
            engine={"layerwise": layerwise},
        )
        r = rows(api.run(sc, requests=[prompt(0, 0.0, 100, 0)]))[0]
        assert r.ttft_s == pytest.approx(want), layerwise
        assert r.store_s == pytest.approx(want - 0.199)


# ---- honest asynchronous restores -------------------------------------------------------------


def two_host_hits(gpu="2 MB", node=None, **engine):
    """A and B (t = 0) compute their own 1,000 tokens; E (t = 5, 2,000 tokens) pushes them
    out of the GPU tier to host; C and D (t = 10) restore A's and B's 1 MB each over a
    1 MB/s host link, async. Together they share the link (2 s each); one at a time they
    take 1 s each."""
    sc = toy(
        node={"h2d_per_gpu": "0.125 MB/s", **(node or {})},
        tiers={
            "gpu": {"capacity": gpu},
            "host": {"enabled": True, "capacity": "1 GB", "t0": "0 s"},
        },
        cluster={"load_policy": "async"},
        engine=engine,
    )
    reqs = [
        prompt(0, 0.0, 1000, 0),
        prompt(1, 0.0, 1000, 100),
        prompt(4, 5.0, 2000, 200),
        prompt(2, 10.0, 1001, 0),
        prompt(3, 10.0, 1001, 100),
    ]
    r = rows(api.run(sc, requests=reqs))
    assert r[2].tokens_host == r[3].tokens_host == 1000
    return r[2], r[3]


def test_unbounded_async_restores_share_the_link():
    c, d = two_host_hits()
    assert c.load_s == pytest.approx(2.0) and d.load_s == pytest.approx(2.0)


def test_async_lookup_work_is_paid_by_the_engine():
    """t0_engine: the engine pays the lookup part of T0 in the step that starts the
    restore; a cold request in that step computes that much later."""
    sc = toy(
        tiers={"host": {"enabled": True, "capacity": "1 GB", "t0": "100 ms", "t0_engine": "30 ms"}},
        cluster={"load_policy": "async"},
        node={"h2d_per_gpu": "125 MB/s"},
    )
    reqs = [prompt(0, 0.0, 1000, 0), prompt(1, 10.0, 1001, 0), prompt(2, 10.0, 100, 500)]
    r = rows(api.run(sc, requests=reqs))
    assert r[2].ttft_s == pytest.approx(0.03 + 0.199)
    assert r[2].compute_s == pytest.approx(0.03 + 0.199)
    # the restore itself waits all of T0: 0.1 + 1 MB at 1 GB/s
    assert r[1].load_s == pytest.approx(0.1 + 0.001)
