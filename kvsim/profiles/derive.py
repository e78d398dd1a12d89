"""Derive prefill timing tables from a FLOP model (how the shipped CSVs were made), and
calibrate the default profile's roofline step model and its remote store server.

Prefill of ``new`` tokens on top of ``cached`` tokens costs

    t = fixed + (new * linear_flops + attn_pairs * pair_flops) / flops_per_s,
    attn_pairs = new * cached + new**2 / 2            (causal attention, dense)

so it is linear in the MLP/projection work and super-linear (quadratic) in context. The
effective ``flops_per_s`` is calibrated to one measured point (for the default profile:
a cold 16,384-token prefill in 0.31 s, the seed study's figure). Run
``python -m kvsim.profiles.derive`` to rewrite the CSV tables next to this file and print
the default profile's calibrated ``timing.roofline.achievable_flops``: the FLOP/s that
makes a lone cold 16,384-token prompt take 0.31 s on the default engine (two 8,192-token
steps of the roofline model, kvsim/physics/step.py), the remote server's bandwidth and
per-operation time solved from the study's two GET rates (:func:`solve_remote`), and the
per-rank speed-up that published single-server rates alone would predict
(:func:`split_speedup`), the speed-up predicted from the client's and the server's
documented ranges with no study figure at all (:func:`predicted_speedup`), and GET rate
against server count, unsharded and per rank (:func:`server_sweep`).

What stays calibrated (C): the server's payload bandwidth and per-op time, two unknowns
fixed by the study's two GET rates. The client (``remote.client``, H/L) does not enter
that solution: with the default client the server binds at both study points (one
server: 7.13 ms of server per chunk against 2.62 ms of copy; per rank: 1.14 ms against a
0.39 ms window), which tests/test_data_path.py checks.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from itertools import product
from pathlib import Path
from typing import Any

from kvsim.physics.client import RANGES, Client, get_rate
from kvsim.physics.step import Roofline, lone_seconds

NEW_GRID = [
    1,
    256,
    512,
    1024,
    2048,
    3072,
    4096,
    6144,
    8192,
    12288,
    16384,
    24576,
    32768,
    49152,
    65536,
    98304,
    131072,
]
CACHED_GRID = [0, 1024, 2048, 4096, 8192, 12288, 16384, 24576, 32768, 49152, 65536, 98304, 131072]


def attention_pairs(new: float, cached: float) -> float:
    """Query-key pairs of a causal prefill of ``new`` tokens after ``cached`` tokens."""
    return new * cached + new * new / 2.0


def prefill_seconds(
    new: float,
    cached: float,
    *,
    linear_flops: float,
    pair_flops: float,
    flops_per_s: float,
    fixed_s: float,
) -> float:
    """Node prefill time from the FLOP model above."""
    work = new * linear_flops + attention_pairs(new, cached) * pair_flops
    return fixed_s + work / flops_per_s


def calibrate_flops_per_s(
    new: float, seconds: float, *, linear_flops: float, pair_flops: float, fixed_s: float
) -> float:
    """Effective FLOP/s that makes a cold prefill of ``new`` tokens take ``seconds``."""
    work = new * linear_flops + attention_pairs(new, 0) * pair_flops
    return work / (seconds - fixed_s)


def calibrate_roofline_flops(
    roofline: dict[str, Any], tokens: int, seconds: float, per_step: int
) -> float:
    """achievable_flops that makes a lone cold prompt of ``tokens`` take ``seconds`` on an
    engine computing at most ``per_step`` tokens a step (the other Roofline arguments in
    ``roofline``). The time falls as the rate grows, so bisection (on a log scale) finds
    it; raises ValueError when no rate can (the fixed parts alone take longer)."""

    def t(flops: float) -> float:
        return lone_seconds(Roofline(achievable_flops=flops, **roofline), tokens, 0, per_step)

    lo, hi = 1e6, 1e24
    if t(hi) > seconds or t(lo) < seconds:
        raise ValueError(f"no achievable_flops gives {seconds} s for {tokens} tokens")
    for _ in range(200):
        mid = (lo * hi) ** 0.5
        if t(mid) > seconds:
            lo = mid
        else:
            hi = mid
    return hi


# The default profile's roofline (b300-pcp8-glm5.yaml) without its calibrated rate
B300_GLM5_ROOFLINE: dict[str, Any] = {
    "fixed": 0.02,
    "hbm_bandwidth": 8 * 8e12,
    "linear_flops_per_token": 78e9,
    "pair_flops": 5e6,
    "kv_bytes_per_token": 51_168,
    "dense_weight_bytes": 19e9,
    "expert_weight_bytes": 725e9,
    "experts": 256,
    "experts_per_token": 8,
}


def solve_remote(
    nbytes: float, ops: int, one: float, split: float, parts: int
) -> tuple[float, float]:
    """A store server's payload bandwidth and per-operation time from two measured GET
    rates of the same ``nbytes`` in ``ops`` operations: ``one`` with the whole GET on one
    server, ``split`` with ``parts`` servers each moving 1/parts of the bytes in as many
    operations (per-rank sharding). Each server takes ``ops * op + bytes / bandwidth``,
    so the two times differ only in the bytes: two figures, two unknowns (C)."""
    t_one, t_split = nbytes / one, nbytes / split
    bandwidth = (1 - 1 / parts) * nbytes / (t_one - t_split)
    op = (t_one - nbytes / bandwidth) / ops
    if not (bandwidth > 0 and op >= 0):
        raise ValueError("no server bandwidth and per-op time fit these two rates")
    return bandwidth, op


def split_speedup(nbytes: float, ops: int, one: float, bandwidth: float, parts: int) -> float:
    """How much faster ``parts`` per-rank servers read a GET than one server, when the
    server's payload ``bandwidth`` is known from elsewhere and its per-op time is what
    makes the one-server GET run at ``one`` bytes/s: a prediction of the split rate."""
    t_one = nbytes / one
    op_total = t_one - nbytes / bandwidth
    if op_total < 0:
        raise ValueError("the server bandwidth is below the one-server GET rate")
    return t_one / (op_total + nbytes / parts / bandwidth)


# The seed study's GET rates for a 16,384-token GLM-5 prompt (51,168 B/token) in 64
# LMCache chunks of 256 tokens, read as GiB/s: one Valkey instance, and 8 per-rank ones.
STUDY_GET = {"nbytes": 16384 * 51_168, "ops": 64, "one": 1.71 * 2**30, "split": 10.76 * 2**30}
# Published single-instance Valkey GET rates for multi-MB values (HARDWARE.md, M)
VALKEY_PUBLISHED_BW = (1.7e9, 2.0e9)


def predicted_speedup(steps: int = 5) -> tuple[float, float]:
    """The study's per-rank speed-up (8 per-rank servers over one unsharded server, a 16k
    GET in 64 chunks) as predicted from independently sourced figures only: the lowest
    and highest ratio over the documented ranges of the client and of the server
    (kvsim.physics.client.RANGES; none of them from the study). Integers take every
    value in their range, the others ``steps`` points evenly on a log scale (the ratio
    is monotone in each between its kinks; the ends are among the points)."""

    def grid(name: str) -> list[float]:
        r = RANGES[name]
        if name in ("connections", "pipeline_depth"):
            return [float(v) for v in range(int(r.lo), int(r.hi) + 1)]
        return [r.lo * (r.hi / r.lo) ** (i / (steps - 1)) for i in range(steps)]

    g = STUDY_GET
    names = ("connections", "pipeline_depth", "round_trip", "copy_bandwidth")
    ratios = []
    for k, d, r, b, bw, op in product(*map(grid, (*names, "bandwidth", "op_overhead"))):
        cl = Client(int(k), r, int(d), b)
        one = get_rate(g["nbytes"], g["ops"], 1, 8, False, cl, bw, op)
        split = get_rate(g["nbytes"], g["ops"], 8, 8, True, cl, bw, op)
        ratios.append(split / one)
    return min(ratios), max(ratios)


def server_sweep(
    servers: Sequence[int] = (1, 2, 3, 4, 8, 16, 64),
) -> list[tuple[int, float, float]]:
    """(servers, unsharded GiB/s, per-rank GiB/s) of a lone 16k GET on the default profile
    (its calibrated server, its client): the docs' table of GET rate vs server count."""
    g = STUDY_GET
    cl = Client()  # the schema's default client is the default profile's
    bw, op = solve_remote(g["nbytes"], g["ops"], g["one"], g["split"], 8)
    return [
        (
            n,
            get_rate(g["nbytes"], g["ops"], n, 8, False, cl, bw, op) / 2**30,
            get_rate(g["nbytes"], g["ops"], n, 8, True, cl, bw, op) / 2**30,
        )
        for n in servers
    ]


def write_table(path: Path, rows: Sequence[tuple[int, int, float]], header: str) -> None:
    with path.open("w", encoding="utf-8", newline="") as fh:
        for line in header.strip().splitlines():
            fh.write(f"# {line}\n")
        w = csv.writer(fh)
        w.writerow(["new_tokens", "cached_tokens", "seconds"])
        for n, c, s in rows:
            w.writerow([n, c, f"{s:.6f}"])


# GLM-5 class (HARDWARE.md): ~78 GFLOP/token in linear layers (40B active x 2, rounded as
# there); dense MLA attention ~5 MFLOP per query-key pair over all layers; 0.02 s fixed.
GLM5 = {"linear_flops": 78e9, "pair_flops": 5e6, "fixed_s": 0.02}
# Peak dense FP8: B300 ~4.5 PFLOP/s, H200 ~1.98 PFLOP/s per GPU (HARDWARE.md, M).
H200_OVER_B300 = 1.98 / 4.5


def glm5_rows(flops_per_s: float) -> list[tuple[int, int, float]]:
    return [
        (n, c, prefill_seconds(n, c, flops_per_s=flops_per_s, **GLM5))
        for n in NEW_GRID
        for c in CACHED_GRID
    ]


# Llama-2-70B on 8xH100-80GB, TP8, batch 1: mean prompt_time (s) per prompt size, from
# splitwise-sim data/perf_model.csv (Mutinifni/splitwise-sim 8f99e7d, MIT). The 128- and
# 256-token rows (0.055 s, 0.053 s) are left out: they are not monotone and sit below the grid.
LLAMA2_70B_H100_MEASURED = {
    512: 0.055500,
    1024: 0.078306,
    2048: 0.136576,
    4096: 0.378648,
    8192: 0.848382,
}
# Cached-context term: least-squares fit t = a + b*n + c*n^2/2 to those points gives
# c = 1.0875e-8 s per query-key pair; reused for the n*cached pairs (an estimate).
LLAMA2_PAIR_S = 1.0875e-8
LLAMA2_CACHED_GRID = [0, 1024, 2048, 4096, 8192]


def llama2_rows() -> list[tuple[int, int, float]]:
    return [
        (n, c, t + LLAMA2_PAIR_S * n * c)
        for n, t in LLAMA2_70B_H100_MEASURED.items()
        for c in LLAMA2_CACHED_GRID
    ]


def main() -> None:  # pragma: no cover - a maintenance script
    here = Path(__file__).parent
    flops = calibrate_roofline_flops(B300_GLM5_ROOFLINE, 16384, 0.31, 8192)
    print(f"b300-pcp8-glm5 timing.roofline.achievable_flops: {flops:.7g}")
    g = STUDY_GET
    bw, op = solve_remote(g["nbytes"], g["ops"], g["one"], g["split"], 8)
    print(
        f"b300-pcp8-glm5 remote.bandwidth: {bw / 2**30:.4g} GiB/s, op_overhead: {op * 1e3:.3g} ms"
    )
    lo, hi = (max(b, g["one"] * 1.0001) for b in VALKEY_PUBLISHED_BW)
    fast, slow = (split_speedup(g["nbytes"], g["ops"], g["one"], b, 8) for b in (lo, hi))
    print(
        f"8 per-rank servers over one, predicted from the published {VALKEY_PUBLISHED_BW[0] / 1e9}"
        f"-{VALKEY_PUBLISHED_BW[1] / 1e9} GB/s server rate: {slow:.2f}x to {fast:.2f}x "
        f"(the study: {g['split'] / g['one']:.2f}x)"
    )
    lo, hi = predicted_speedup()
    print(
        f"8 per-rank servers over one, predicted from the documented client and server "
        f"ranges alone (kvsim.physics.client.RANGES): {lo:.2f}x to {hi:.2f}x"
    )
    print("servers  unsharded GiB/s  per-rank GiB/s  (default profile, lone 16k GET)")
    for n, un, pr in server_sweep():
        print(f"{n:>7}  {un:>15.3f}  {pr:>14.3f}")
    # the H200 table scales the single-request FLOP model calibrated the same way
    b300 = calibrate_flops_per_s(16384, 0.31, **GLM5)
    h200 = b300 * H200_OVER_B300
    write_table(
        here / "h200-tp8-glm5.timing.csv",
        glm5_rows(h200),
        f"""
h200-tp8-glm5 prefill time of the whole node (8xH200, TP8), seconds.
Same FLOP model as b300-pcp8-glm5 with the effective rate scaled by the FP8 peak ratio
H200/B300 = 1.98/4.5 (an estimate: same kernel efficiency assumed): {h200:.4g} FLOP/s.""",
    )
    write_table(
        here / "h100-tp8-llama2-70b.timing.csv",
        llama2_rows(),
        f"""
h100-tp8-llama2-70b prefill time (8xH100-80GB, TP8, batch 1), seconds.
cached_tokens = 0: measured means from splitwise-sim data/perf_model.csv (MIT).
cached_tokens > 0: measured + {LLAMA2_PAIR_S:.4g} s * new * cached (attention term fitted to
the same data; an estimate).""",
    )


if __name__ == "__main__":  # pragma: no cover
    main()
