"""A scenario's GPU memory as pools (docs/engine-model.md, "GPU memory"): its HBM split
(:func:`pools`, the arithmetic in :mod:`kvsim.physics.hbm`) and the rules that split must
keep (:func:`checks`, reported by :func:`kvsim.config.checks.cross_checks`).

``node.kv_per_gpu``, when given, is the KV pool per GPU as an explicit override (the
derivation is then skipped). The prefix cache is ``tiers.gpu.capacity``. Each GPU holds
``1 / gpus`` of a request's KV (PCP ranks hold their shares of the context; tensor-parallel
ranks their heads).
"""

from __future__ import annotations

from typing import Any

from kvsim.config.schema import (
    ChoiceDist,
    FixedDist,
    LogNormalDist,
    Scenario,
    SyntheticWorkload,
    UniformDist,
)
from kvsim.physics import hbm
from kvsim.physics.hbm import Pools, gb_text, kv_pool_per_gpu


def weight_bytes(sc: Scenario) -> float | None:
    """The model's weights on one node (all GPUs): ``model.weight_bytes``, else the
    roofline's dense + expert weight bytes, else None (unknown)."""
    if sc.model.weight_bytes is not None:
        return sc.model.weight_bytes
    roof = sc.timing.roofline
    if roof is not None:
        return roof.dense_weight_bytes + roof.expert_weight_bytes
    return None


def pools(sc: Scenario) -> Pools:
    """The scenario's HBM split per GPU and per node."""
    n = sc.node
    w = weight_bytes(sc)
    per_w = w / n.gpus if w is not None else None
    if n.kv_per_gpu is not None:
        kv, given = n.kv_per_gpu, True
    else:
        kv = kv_pool_per_gpu(
            n.hbm_per_gpu, n.gpu_memory_utilization, per_w or 0.0, n.activation_reserve
        )
        given = False
    return Pools(
        gpus=n.gpus,
        hbm=n.hbm_per_gpu,
        utilization=n.gpu_memory_utilization,
        weights=per_w,
        reserve=n.activation_reserve,
        kv=kv,
        given=given,
        cache=sc.tiers.gpu.capacity,
    )


def checks(sc: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """The pools' rules, as cross_checks reports them (field path, message)."""
    out: list[tuple[tuple[Any, ...], str]] = []
    n = sc.node
    if n.activation_reserve >= n.hbm_per_gpu:
        out.append(
            (
                ("node", "activation_reserve"),
                f"{gb_text(n.activation_reserve)} is not below hbm_per_gpu "
                f"({gb_text(n.hbm_per_gpu)})",
            )
        )
        return out
    if n.kv_per_gpu is not None:
        if n.kv_per_gpu > n.hbm_per_gpu:
            out.append((("node", "kv_per_gpu"), "is larger than hbm_per_gpu"))
            return out
    elif weight_bytes(sc) is None:
        out.append(
            (
                ("model", "weight_bytes"),
                "is needed to size the KV pool (timing has no roofline weights); "
                "or give node.kv_per_gpu",
            )
        )
        return out
    p = pools(sc)
    if p.kv <= 0:
        usable = f"{gb_text(p.hbm)} x {p.utilization:g} = {gb_text(p.usable)} usable HBM per GPU"
        w = p.weights or 0.0
        if w >= p.usable:
            where: tuple[Any, ...] = ("model", "weight_bytes")
            what = f"{gb_text(w)} of weights per GPU exceed {usable}"
        else:
            where = ("node", "activation_reserve")
            what = (
                f"{gb_text(p.reserve)} plus {gb_text(w)} of weights per GPU leave no KV in {usable}"
            )
        out.append((where, what))
        return out
    if p.cache > p.node_kv * (1 + 1e-9):
        out.append(
            (
                ("tiers", "gpu", "capacity"),
                f"exceeds the node's KV pool ({gb_text(p.node_kv)} = {p.gpus} x "
                f"({hbm.equation(p)}))",
            )
        )
    bound = prompt_bound(sc)
    if bound is not None:
        why = too_large(sc, bound[0])
        if why is not None:
            out.append((bound[1], why))
    return out


def prompt_bound(sc: Scenario) -> tuple[int, tuple[str, ...]] | None:
    """The largest prompt a synthetic workload of single turns can draw, and the field
    that bounds it; None when there is no bound (traces, sessions, geometric draws)."""
    w = sc.workload
    if not isinstance(w, SyntheticWorkload) or w.sessions is not None:
        return None
    d = w.prompt_tokens
    head = int(w.system_prompts.tokens) if w.system_prompts is not None else 0
    where = ("workload", "prompt_tokens")
    if isinstance(d, FixedDist):
        return head + d.value, (*where, "value")
    if isinstance(d, UniformDist):
        return head + d.high, (*where, "high")
    if isinstance(d, LogNormalDist):
        return head + d.max, (*where, "max")
    if isinstance(d, ChoiceDist):
        return head + max(d.values), (*where, "values")
    return None


def too_large(sc: Scenario, tokens: int) -> str | None:
    """Why a prompt of ``tokens`` cannot fit the scenario's working pool, or None when it
    fits."""
    return hbm.too_large(pools(sc), tokens, sc.model.kv_bytes)
