"""The roofline's parallel terms (kvsim/physics/step.py, Parallel), computed by hand."""

import pytest

from kvsim.physics.step import Parallel, Roofline


def roof(parallel=None, **kw):
    args = dict(
        fixed=0.0,
        achievable_flops=1e15,
        hbm_bandwidth=8e12,  # node-level roof: 8 GPUs x 1 TB/s
        linear_flops_per_token=1e9,
        pair_flops=0.0,
        kv_bytes_per_token=1000.0,
        dense_weight_bytes=8e9,
        expert_weight_bytes=0.0,
    )
    args.update(kw)
    return Roofline(parallel=parallel, **args)


def par(**kw):
    args = dict(
        gpus=8,
        tp=8,
        pcp=1,
        ep=1,
        dense_shards=8,
        expert_shards=8,
        hbm_per_gpu=1e12,
        nvlink_per_gpu=100e9,
    )
    args.update(kw)
    return Parallel(**args)


def test_even_shards_equal_the_node_level_roof():
    # weights over all 8 GPUs and no communication: per GPU 8 GB / 8 = 1 GB at 1 TB/s is
    # the node's 8 GB at 8 TB/s (1 ms); one token's compute is 1e9 / 1e15 = 1 us
    chunks = [(1, 0)]
    node = roof().compute_share(chunks)
    per_gpu = roof(par()).compute_share(chunks)
    assert node == pytest.approx(1e-3 + 8 * 1000 / 8e12)
    assert per_gpu == pytest.approx(node)


def test_replicated_dense_weights_read_on_every_gpu():
    # PCP8 with tp 1: every GPU reads all 8 GB of dense weights: 8 ms, not 1 ms
    p = par(tp=1, pcp=8, dense_shards=1)
    assert roof(p).compute_share([(1, 0)]) == pytest.approx(8e-3 + 1000 / 8 / 1e12)


def test_tp_all_reduce_is_a_ring():
    # tp 4 of 4 GPUs, 1,000 tokens, 1 MB of all-reduce per token: each GPU sends
    # 2 x 3/4 x 1,000 x 1e6 = 1.5 GB at 100 GB/s = 15 ms
    p = par(gpus=4, tp=4, dense_shards=4, expert_shards=4, allreduce_bytes_per_token=1e6)
    assert p.comm_seconds([(1000, 0)]) == pytest.approx(1.5e9 / 100e9)
    # the TP group carries its PCP rank's tokens only: pcp 2 halves it
    p2 = par(gpus=8, tp=4, pcp=2, dense_shards=4, allreduce_bytes_per_token=1e6)
    assert p2.comm_seconds([(1000, 0)]) == pytest.approx(0.75e9 / 100e9)


def test_pcp_exchange_moves_the_other_ranks_kv():
    # pcp 8, a chunk of 1,000 tokens after 3,000: each rank receives 7/8 of the 4,000
    # tokens' KV, 1,000 B each: 3.5 MB at 100 GB/s = 35 us
    p = par(tp=1, pcp=8, dense_shards=1, exchange_bytes_per_token=1000.0)
    assert p.comm_seconds([(1000, 3000)]) == pytest.approx(3.5e6 / 100e9)


def test_ep_all_to_all_leaves_the_gpu():
    # ep 8 over 8 GPUs, 800 tokens: 100 per GPU, 7/8 of their 1 MB routed activations
    # leave it: 87.5 MB at 100 GB/s = 0.875 ms
    p = par(tp=1, pcp=8, ep=8, dense_shards=1, alltoall_bytes_per_token=1e6)
    assert p.comm_seconds([(800, 0)]) == pytest.approx(87.5e6 / 100e9)


def test_communication_adds_to_the_roof():
    # the step is max(compute, memory) + communication (not overlapped: an upper bound)
    p = par(gpus=4, tp=4, dense_shards=4, expert_shards=4, allreduce_bytes_per_token=1e6)
    r = roof(p)
    chunks = [(1000, 0)]
    compute = 1000 * 1e9 / 1e15  # 1 ms
    memory = (8e9 / 4 + 1000 * 1000 / 4) / 1e12  # 2 ms
    assert r.compute_share(chunks) == pytest.approx(max(compute, memory) + 15e-3)


def test_window_layers_cap_their_pairs():
    # sliding-window layers: a query sees at most `window` keys. 1,000 new tokens after
    # none with a window of 100: 100^2/2 + 900 x 100 = 95,000 pairs x 10 FLOPs
    r = roof(window=100, window_pair_flops=10.0, linear_flops_per_token=0.0)
    assert r.flops_of([(1000, 0)]) == pytest.approx(95_000 * 10)
