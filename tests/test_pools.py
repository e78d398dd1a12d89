"""HBM as pools (kvsim.config.pools, kvsim.physics.hbm; docs/engine-model.md "GPU memory"),
computed by hand.

Toy scenario (conftest): 1,000 B/token, 100-token blocks, t = 0.1 s + (new - 1) ms, a
serial engine. Here the host tier serves restores: T0 0.5 s, then the host-to-GPU link at
8 x 125 kB/s = 1 MB/s; the GPU prefix cache is 0 B, so every computed block is demoted to
host at once (D2H 1 EB/s).
"""

from __future__ import annotations

import pytest

from kvsim import api
from kvsim.config.pools import pools
from kvsim.errors import InputError
from kvsim.physics.hbm import pool_lines

from conftest import SCENARIOS, req, toy

HOST = {
    "node": {"h2d_per_gpu": "125 kB/s"},
    "tiers": {"host": {"enabled": True, "capacity": "1 GB", "t0": "500 ms"}},
    "cluster": {"load_policy": "async"},
}


def _toy(**over):
    sc = dict(HOST)
    for k, v in over.items():
        sc[k] = {**sc.get(k, {}), **v}
    return toy(**sc)


def by_id(results):
    return {int(r.id): r for r in results.requests.itertuples()}


def two_restores():
    # P (t = 0) and Q (t = 0) compute 300 tokens each (0.399 s, one after the other) and
    # are demoted to host. A (t = 10) re-reads P's blocks, B (t = 10) Q's: 299 tokens from
    # host each (the last token is always computed)
    return [
        req(0, 0.0, 300, [1, 2, 3]),
        req(1, 0.0, 300, [4, 5, 6]),
        req(2, 10.0, 300, [1, 2, 3]),
        req(3, 10.0, 300, [4, 5, 6]),
    ]


def test_pools_of_the_default_profile_by_hand():
    sc = toy()  # the default profile's node and weights
    p = pools(sc)
    # 288 GB x 0.9 = 259.2 GB usable; 744 GB / 8 = 93 GB weights; 15 GB reserve
    assert p.usable == pytest.approx(259.2e9)
    assert p.weights == pytest.approx(93e9)
    assert p.reserve == pytest.approx(15e9)
    assert p.kv == pytest.approx(259.2e9 - 93e9 - 15e9)  # 151.2 GB per GPU
    assert p.node_kv == pytest.approx(8 * 151.2e9)  # 1,209.6 GB per node
    lines = "\n".join(pool_lines(pools(sc)))
    assert "151.2 GB" in lines and "1,209.6 GB" in lines and "93.0 GB" in lines


def test_pools_from_the_roofline_and_the_override():
    # without model.weight_bytes, the roofline's dense + expert bytes: (19 + 725) / 8 GB
    base = api.load(SCENARIOS / "paper" / "base.yaml")
    sc = base.model_copy(update={"model": base.model.model_copy(update={"weight_bytes": None})})
    assert pools(sc).weights == pytest.approx(744e9 / 8)
    # a table timing without weights: refused, naming the field (or give node.kv_per_gpu)
    with pytest.raises(InputError, match=r"model\.weight_bytes"):
        toy(model={"weight_bytes": None})
    p = pools(toy(model={"weight_bytes": None}, node={"kv_per_gpu": "50 kB"}))
    assert p.given and p.kv == 50e3 and p.node_kv == 400e3  # 8 x 50 kB, as given
    p = pools(toy(node={"gpu_memory_utilization": 0.5, "activation_reserve": "1 GB"}))
    assert p.kv == pytest.approx(144e9 - 93e9 - 1e9)  # 288 x 0.5 - 93 - 1 = 50 GB


def test_zero_prefix_cache_with_async_restores_two_at_once():
    # Both restores start at t = 10 and share the 1 MB/s link after their T0: 598 kB in at
    # 10.5 + 0.598 = 11.098; A computes its token 11.098-11.198, B 11.198-11.298.
    # (Before pools, a 0 B prefix cache admitted one restore at a time: B's restore
    # would have waited for A to finish, to 11.199 + 0.5 + 0.299 + 0.1 = 12.098.)
    r = by_id(api.run(_toy(), requests=two_restores()))
    a, b = r[2], r[3]
    assert a.tokens_host == 299 and b.tokens_host == 299
    assert a.ttft_s == pytest.approx(1.198)
    assert b.ttft_s == pytest.approx(1.298)
    assert b.queue_wait_s == pytest.approx(0.1)  # behind A's step once its KV is in


def test_the_working_pool_bounds_restores_in_flight():
    # node.kv_per_gpu 50 kB: a KV pool of 8 x 50 kB = 400 kB = 400 tokens. A holds its
    # 300-token prompt (300 kB) from its restore's start (10) to its finish (10 + 0.5 +
    # 0.299 + 0.1 = 10.899); B's 300 kB do not fit beside it: B's restore starts at
    # 10.899, its KV is in at 11.698, its token computed at 11.798.
    sc = _toy(node={"h2d_per_gpu": "125 kB/s", "kv_per_gpu": "50 kB"})
    r = by_id(api.run(sc, requests=two_restores()))
    a, b = r[2], r[3]
    assert a.ttft_s == pytest.approx(0.899)
    assert b.ttft_s == pytest.approx(1.798)
    assert b.queue_wait_s == pytest.approx(0.899)


def test_the_working_pool_bounds_cold_prompts_too():
    # chunked batching (8,192-token budget): two cold 300-token prompts at t = 0 share one
    # step when they fit (fixed 0.1 s + 0.299 s for each chunk = 0.698 s each, as the
    # batching model sums chunks' shares); with a 400-token pool the second
    # waits for the first (0.399 s), then takes 0.399 s: TTFT 0.798.
    reqs = [req(0, 0.0, 300, [1, 2, 3]), req(1, 0.0, 300, [4, 5, 6])]
    wide = by_id(api.run(toy(engine={"batching": "chunked"}), requests=reqs))
    assert wide[1].ttft_s == pytest.approx(0.698)
    sc = toy(engine={"batching": "chunked"}, node={"kv_per_gpu": "50 kB"})
    tight = by_id(api.run(sc, requests=reqs))
    assert tight[0].ttft_s == pytest.approx(0.399)
    assert tight[1].ttft_s == pytest.approx(0.798)


def test_a_gpu_hit_shares_its_blocks():
    # the prefix cache holds P's 3 blocks (300 kB); pool 400 kB: C (t = 10, 400 tokens,
    # P's 3 blocks + one) needs only its 100 new tokens of working KV and runs at once;
    # its 100 tokens take 0.1 + 0.099 = 0.199 s (300 cached)
    sc = toy(node={"kv_per_gpu": "50 kB"}, tiers={"gpu": {"capacity": "300 kB"}})
    reqs = [req(0, 0.0, 300, [1, 2, 3]), req(1, 10.0, 400, [1, 2, 3, 4])]
    r = by_id(api.run(sc, requests=reqs))
    assert r[1].tokens_gpu == 300 and r[1].tokens_compute == 100
    assert r[1].ttft_s == pytest.approx(0.199)


def test_a_prompt_that_cannot_fit_is_refused_before_it_runs():
    # pool 400 tokens (400 kB); a 401-token prompt needs 401 kB
    sc = toy(node={"kv_per_gpu": "50 kB"})
    with pytest.raises(InputError, match=r"401 tokens needs 0\.000401 GB.*0\.0004 GB"):
        api.run(sc, requests=[req(0, 0.0, 401, [1, 2, 3, 4, 5])])
    # a synthetic workload whose bound cannot fit is refused when loaded, naming the field
    with pytest.raises(InputError, match=r"workload\.prompt_tokens\.value"):
        toy(
            node={"kv_per_gpu": "50 kB"},
            workload={"prompt_tokens": {"dist": "fixed", "value": 401}},
        )


def test_the_prefix_cache_cannot_exceed_the_pool():
    with pytest.raises(InputError, match="exceeds the node's KV pool"):
        toy(node={"kv_per_gpu": "50 kB"}, tiers={"gpu": {"capacity": "401 kB"}})


def test_a_reserve_above_hbm_is_refused():
    with pytest.raises(InputError, match="activation_reserve"):
        toy(node={"activation_reserve": "300 GB"})
    with pytest.raises(InputError, match="activation_reserve"):
        toy(node={"activation_reserve": "170 GB"})  # 259.2 - 93 - 170 < 0


def test_the_working_pool_is_empty_after_a_run():
    # every request gave back its working KV, and the prefix cache its reservation (a
    # 1 kB cache in a 400 kB pool: working KV beyond 399 kB evicts it)
    from kvsim.sim.simulation import Simulation

    sc = _toy(
        node={"h2d_per_gpu": "125 kB/s", "kv_per_gpu": "50 kB"},
        tiers={"gpu": {"capacity": "1 kB"}},
    )
    sim = Simulation(sc, requests=two_restores())
    sim.run()
    engine = sim.engines[0]
    assert engine.pool.used == 0.0 and engine.pool.inflight == 0
    assert engine.local.gpu.reserved == 0.0
