"""The frontend (engine.frontend; kvsim/physics/frontend.py, kvsim/sim/engine.py): the work
a request pays outside the GPU kernels, worked by hand on the toy scenario (t(new) = 0.1 s
+ (new - 1) ms; 100-token blocks): a lone request's frontend time at two prompt lengths,
its place in the TTFT breakdown, requests queueing for the API-server process, and two
simultaneous prompts served one after the other as vLLM serves them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvsim import api
from kvsim.physics.frontend import frontend_seconds

from conftest import req, toy

# 1 ms per request, 1 us per token (parsing) + 1 us per token (tokenizer), 10 us per
# 100-token block (hashing), 2 ms out
FRONTEND = {
    "per_request": "1 ms",
    "per_token": "1 us",
    "tokenize_per_request": "0 s",
    "tokenize_per_token": "1 us",
    "hash_per_block": "10 us",
    "block_tokens": 100,
    "output": "2 ms",
}


def run(requests, **engine):
    sc = toy(engine={"frontend": FRONTEND, **engine})
    return api.run(sc, requests=requests).requests.set_index("id")


def test_frontend_seconds_by_hand():
    fe = SimpleNamespace(
        per_request=1e-3,
        per_token=1e-6,
        tokenize_per_request=0.0,
        tokenize_per_token=1e-6,
        hash_per_block=10e-6,
        block_tokens=100,
    )
    # 1,000 tokens: 1 ms + 1000 x 2 us + 10 blocks x 10 us = 3.1 ms
    assert frontend_seconds(fe, 1000) == pytest.approx(3.1e-3)
    # 5,050 tokens: 1 ms + 10.1 ms + 50 full blocks x 10 us = 11.6 ms (a partial block is
    # not hashed)
    assert frontend_seconds(fe, 5050) == pytest.approx(11.6e-3)


@pytest.mark.parametrize(("tokens", "into"), [(1000, 3.1e-3), (5000, 11.5e-3)])
def test_a_lone_requests_frontend_time_at_two_prompt_lengths(tokens, into):
    """The request waits ``into`` in the frontend, computes alone (0.1 s + (tokens - 1)
    ms), and its first token takes 2 ms out: frontend_s = into + 2 ms, and the TTFT is
    the frontend plus the compute."""
    r = run([req(0, 0.0, tokens, list(range(tokens // 100)))]).loc[0]
    compute = 0.1 + (tokens - 1) * 1e-3
    assert r.frontend_s == pytest.approx(into + 2e-3)
    assert r.compute_s == pytest.approx(compute)
    assert r.queue_wait_s == 0.0
    assert r.ttft_s == pytest.approx(into + 2e-3 + compute)
    assert r.start_s == pytest.approx(into)  # it reached the engine after the frontend


def test_the_ttft_breakdown_adds_up_with_a_frontend():
    reqs = [req(i, 0.01 * i, 300 + 100 * i, list(range(10 * i, 10 * i + 3 + i))) for i in range(6)]
    df = run(reqs)
    parts = df.frontend_s + df.queue_wait_s + df.load_s + df.compute_s + df.store_s + df.lost_s
    assert (abs(df.ttft_s - parts) < 1e-9).all()
    assert (df.frontend_s > 0).all()


def test_requests_queue_for_the_api_server_process():
    """Three 1,000-token prompts at t = 0 and one process: each spends 3.1 ms in it, the
    second waits for the first, the third for both (3.1, 6.2, 9.3 ms to reach the engine);
    with three processes none waits."""
    reqs = [req(i, 0.0, 1000, list(range(100 * i, 100 * i + 10))) for i in range(3)]
    one = run(reqs)
    assert one.frontend_s.tolist() == pytest.approx([5.1e-3, 8.2e-3, 11.3e-3])
    three = run(reqs, frontend={**FRONTEND, "servers": 3})
    assert three.frontend_s.tolist() == pytest.approx([5.1e-3] * 3)


def test_two_simultaneous_prompts_are_served_one_after_the_other():
    """Two 4,000-token prompts arrive together on a chunked engine with an 8,192-token
    budget. Without a frontend both are in the queue when the engine forms its step: one
    step of both, each finishing at 0.1 + 2 x 3.999 = 8.098 s (2x one prompt's 4.099 s).
    With vLLM's serial frontend the second reaches the engine 9.04 ms after the first
    (4,000 x 2 us + 40 blocks x 10 us + 1 ms), when the first's step has begun: it waits,
    then steps alone. Mean TTFT about 1.5x one prompt's, the measured pattern."""
    reqs = [req(i, 0.0, 4000, list(range(100 * i, 100 * i + 40))) for i in range(2)]
    chunked = {"batching": "chunked", "max_batched_tokens": 8192}
    sc = toy(engine=chunked)
    together = api.run(sc, requests=reqs).requests.set_index("id")
    one = 0.1 + 3.999
    assert together.ttft_s.tolist() == pytest.approx([0.1 + 2 * 3.999] * 2)
    apart = run(reqs, **chunked)
    into = 1e-3 + 4000 * 2e-6 + 40 * 10e-6
    assert apart.loc[0].ttft_s == pytest.approx(into + one + 2e-3)
    assert apart.loc[1].ttft_s == pytest.approx(into + 2 * one + 2e-3)
    mean = apart.ttft_s.mean()
    assert mean / one == pytest.approx(1.5, rel=0.01)
    assert together.ttft_s.mean() / one == pytest.approx(1.976, rel=0.01)
