"""The per-operation roofline (kvsim/physics/ops.py), worked by hand on round numbers: a
step of one chunk is the sum of its operations' bounds; an expert GEMM with few tokens per
expert is bound by its weight reads; a small step in eager mode waits for its launches,
one with CUDA graphs does not; collectives pay their latency."""

from __future__ import annotations

import pytest

from kvsim.physics.ops import Curve, Launches, OpRoofline, efficiency, roof_seconds

# one GPU: 1 PFLOP/s in every dtype, 1 TB/s of HBM
PEAK = 1e15
HBM = 1e12


def launches(*, graphs: bool = True, cpu_step: float = 0.0, kernel_s: float = 0.0) -> Launches:
    return Launches(
        cpu_step=cpu_step,
        cpu_request=0.0,
        kernel_s=kernel_s,
        graphs=graphs,
        graph_s=0.0,
        graph_max_tokens=512,
    )


def model(**kw: object) -> OpRoofline:
    """1 GPU; dense 1 GFLOP per token over 1 GB of weights; 8 experts, top-2, 1 GFLOP per
    token over 8 GB of expert weights; attention 1 MFLOP per pair, 1 kB of KV a token.
    Curves: e_max 0.5, half 100 (dense), 10 (experts), 1,000 (attention); e_mem 0.5."""
    args: dict[str, object] = {
        "hbm": HBM,
        "gpus": 1,
        "pcp": 1,
        "dense_flops_per_token": 1e9,
        "dense_weight_bytes": 1e9,
        "dense": Curve(PEAK, 0.5, 100.0, 0.5),
        "expert_flops_per_token": 1e9,
        "expert_weight_bytes": 8e9,
        "experts": 8,
        "experts_per_token": 2,
        "expert": Curve(PEAK, 0.5, 10.0, 0.5),
        "pair_flops": 1e6,
        "kv_bytes_per_token": 1e3,
        "attention": Curve(PEAK, 0.5, 1000.0, 0.5),
        "launches": launches(),
    }
    args.update(kw)
    return OpRoofline(**args)  # type: ignore[arg-type]


def test_the_efficiency_curve():
    assert efficiency(100, 0.5, 100) == pytest.approx(0.25)  # half of e_max at `half`
    assert efficiency(900, 0.5, 100) == pytest.approx(0.45)
    assert efficiency(0, 0.5, 100) == 0.0
    # the roofline of one operation: the longer of its compute and its bytes
    assert roof_seconds(1e12, 1e9, PEAK, 0.5, HBM * 0.5) == pytest.approx(2e-3)
    assert roof_seconds(1e9, 1e9, PEAK, 0.5, HBM * 0.5) == pytest.approx(2e-3)  # bytes


def test_a_step_of_one_chunk_is_the_sum_of_its_operations_bounds():
    """A chunk of 1,000 new tokens after 1,000 cached, no communication, no host work:

    - dense: 1e12 FLOPs at 1 PFLOP/s x 0.5 x 1000 / 1100 = 2.2 ms; 1 GB at 0.5 TB/s = 2 ms:
      compute-bound, 2.2 ms;
    - experts: 1,000 tokens cover 8 x (1 - (1 - 2/8)^1000) = 8 experts, 250 tokens each:
      e = 0.5 x 250 / 260; 1e12 FLOPs -> 2.08 ms; 8 GB at 0.5 TB/s = 16 ms: bound by its
      weights, 16 ms;
    - attention: 1000 x 1000 + 1000^2 / 2 = 1.5e6 pairs, 1.5e12 FLOPs; a query sees 1,500
      keys on average: e = 0.5 x 1500 / 2500 = 0.3 -> 5 ms; 2,000 tokens of KV = 2 MB
      at 0.5 TB/s = 4 us: 5 ms.
    Total 2.2 + 16 + 5 = 23.2 ms."""
    m = model()
    chunks = [(1000, 1000)]
    dense = 1e12 / (PEAK * 0.5 * 1000 / 1100)
    experts = 8e9 / (HBM * 0.5)
    attention = 1.5e12 / (PEAK * 0.3)
    parts = m.parts(chunks)
    assert parts["dense"] == pytest.approx(dense)
    assert parts["experts"] == pytest.approx(experts)
    assert parts["attention"] == pytest.approx(attention)
    assert parts["comm"] == parts["launch_wait"] == parts["cpu"] == 0.0
    assert m.step(chunks) == pytest.approx(dense + experts + attention)
    assert m.compute_share(chunks) == pytest.approx(dense + experts + attention)


def test_an_expert_gemm_with_few_tokens_per_expert_is_bound_by_its_weights():
    """4 tokens routed top-2 over 8 experts touch 8 x (1 - 0.75^4) = 5.47 experts, 1.46
    tokens each: 4 GFLOP at e = 0.5 x 1.46 / 11.46 take 63 us, their weights 5.47 GB at
    0.5 TB/s take 10.9 ms: memory-bound, by 170x. At 100,000 tokens (25,000 a touched
    expert) it is compute-bound: 1e14 FLOPs at 0.5 x 25000 / 25010 PFLOP/s = 200 ms."""
    m = model()
    cover = 1 - 0.75**4
    assert m.expert_seconds(4) == pytest.approx(8e9 * cover / (HBM * 0.5))
    per_expert = 4 * 2 / (8 * cover)
    compute = 4e9 / (PEAK * 0.5 * per_expert / (per_expert + 10))
    assert m.expert_seconds(4) > 100 * compute
    assert m.expert_seconds(100_000) == pytest.approx(1e14 / (PEAK * 0.5 * 25000 / 25010), rel=1e-6)


def test_a_small_step_in_eager_mode_waits_for_its_launches():
    """A 16-token step (the last block of a prompt all in HBM): its GPU work is the dense
    weight read, 1 GB at 0.5 TB/s = 2 ms (the experts' 8 GB: 16 ms). In eager mode 4,000
    kernels at 8 us take 32 ms to launch: the GPU waits 32 - 18.0 = 14 ms more. With CUDA
    graphs (a step of at most 512 tokens replays them) it does not wait. The CPU work
    (1 ms) comes on top either way."""
    eager = model(launches=launches(graphs=False, cpu_step=1e-3, kernel_s=4000 * 8e-6))
    graphs = model(launches=launches(graphs=True, cpu_step=1e-3, kernel_s=4000 * 8e-6))
    chunks = [(16, 1008)]
    gpu = eager.compute_share(chunks)
    assert gpu == pytest.approx(graphs.compute_share(chunks))
    assert gpu < 0.032
    assert eager.step(chunks) == pytest.approx(1e-3 + 0.032)
    assert graphs.step(chunks) == pytest.approx(1e-3 + gpu)
    assert eager.parts(chunks)["launch_wait"] == pytest.approx(0.032 - gpu)
    # a step over the graph capture size launches its kernels even with graphs on; here
    # its GPU work (1,000 tokens: 23.2 ms above) is shorter than the launches
    big = graphs.step([(1000, 1000)])
    assert big == pytest.approx(1e-3 + 0.032)


def test_eager_mode_launches_at_its_own_cost_and_compiled_code_at_its():
    """engine.cuda_graphs false runs the model's PyTorch code op by op (eager_s: 4,000
    kernels at 30 us = 120 ms); with graphs on, a step too large for them launches from
    compiled code (kernel_s: 4,000 at 8 us = 32 ms). Without eager_s, eager mode pays
    kernel_s."""
    both = dict(cpu_step=0.0, cpu_request=0.0, kernel_s=0.032, graph_s=0.0, graph_max_tokens=512)
    eager = Launches(graphs=False, eager_s=0.120, **both)
    graphs = Launches(graphs=True, eager_s=0.120, **both)
    assert eager.launch_seconds(16) == eager.launch_seconds(1000) == 0.120
    assert graphs.launch_seconds(16) == 0.0 and graphs.launch_seconds(1000) == 0.032
    assert Launches(graphs=False, **both).launch_seconds(16) == 0.032


def test_collectives_pay_their_latency_and_their_bytes():
    """160 collectives of 30 us, and 8 kB a new token over a 100 GB/s link: a 1,000-token
    step adds 4.8 ms + 80 us."""
    m = model(
        collectives=160,
        collective_latency=30e-6,
        comm_bytes_per_token=8e3,
        comm_bandwidth=100e9,
    )
    assert m.comm_seconds([(1000, 0)]) == pytest.approx(160 * 30e-6 + 1000 * 8e3 / 100e9)
    assert model().comm_seconds([(1000, 0)]) == 0.0


def test_the_scale_multiplies_every_part():
    m, half = (
        model(launches=launches(cpu_step=1e-3)),
        model(launches=launches(cpu_step=1e-3), scale=0.5),
    )
    chunks = [(1000, 1000)]
    assert half.step(chunks) == pytest.approx(0.5 * m.step(chunks))


def test_pipeline_hand_offs_pay_their_bytes_and_latency():
    """One pipeline hand-off (pp 2) of 28,672 B a token over 50 GB/s per GPU with 47 us of
    latency: a 1,000-token step adds 1000 x 28672 / 50e9 + 47 us = 620.44 us, with no
    collectives at all; pp 1 (no hand-off) adds nothing."""
    m = model(stage_bytes_per_token=28672.0, stage_bandwidth=50e9, stage_latency=47e-6)
    assert m.comm_seconds([(1000, 0)]) == pytest.approx(1000 * 28672 / 50e9 + 47e-6)
    assert m.step([(1000, 0)]) == pytest.approx(model().step([(1000, 0)]) + 620.44e-6)
