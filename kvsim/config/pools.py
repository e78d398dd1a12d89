"""GPU memory as pools (docs/engine-model.md, "GPU memory").

Per GPU, HBM holds the weights, an activation reserve and the KV pool::

    usable    = hbm_per_gpu x gpu_memory_utilization      (vLLM's default 0.9, H)
    kv pool   = usable - weights / gpus - activation_reserve
    node pool = gpus x kv pool

``node.kv_per_gpu``, when given, is the KV pool per GPU as an explicit override (the
derivation is then skipped). The node's KV pool is one block pool, as vLLM's: the blocks of
running requests and of restores in flight (the working KV) are pinned; the prefix cache
(``tiers.gpu.capacity``, evictable) holds at most its capacity and at most what the working
KV leaves. The working KV may take the whole pool, evicting (demoting) cached blocks as it
grows; the largest prompt must fit in it. Each GPU holds ``1 / gpus`` of a request's KV
(PCP ranks hold their shares of the context; tensor-parallel ranks their heads).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvsim.config.schema import Scenario

GB = 1e9


def _gb(x: float) -> str:
    v = x / GB
    if abs(v) >= 10:
        return f"{v:,.1f} GB"
    return f"{v:.2f} GB" if abs(v) >= 0.01 or v == 0 else f"{v:.3g} GB"


def weight_bytes(sc: Scenario) -> float | None:
    """The model's weights on one node (all GPUs): ``model.weight_bytes``, else the
    roofline's dense + expert weight bytes, else None (unknown)."""
    if sc.model.weight_bytes is not None:
        return sc.model.weight_bytes
    roof = sc.timing.roofline
    if roof is not None:
        return roof.dense_weight_bytes + roof.expert_weight_bytes
    return None


@dataclass(frozen=True)
class Pools:
    """HBM split per GPU and per node (bytes)."""

    gpus: int
    hbm: float  # per GPU
    utilization: float
    weights: float | None  # per GPU; None when unknown (kv_per_gpu given)
    reserve: float  # per GPU
    kv: float  # KV pool per GPU (derived, or node.kv_per_gpu)
    given: bool  # kv is node.kv_per_gpu, not derived
    cache: float  # prefix cache cap, node (tiers.gpu.capacity)

    @property
    def usable(self) -> float:
        return self.hbm * self.utilization

    @property
    def node_kv(self) -> float:
        """The node's KV pool: the most working KV (running requests and restores in
        flight) it can hold, the prefix cache then evicted to nothing."""
        return self.gpus * self.kv

    @property
    def slack(self) -> float:
        """Working KV the node holds without evicting a full prefix cache."""
        return max(self.node_kv - self.cache, 0.0)


def pools(sc: Scenario) -> Pools:
    n = sc.node
    w = weight_bytes(sc)
    per_w = w / n.gpus if w is not None else None
    if n.kv_per_gpu is not None:
        kv, given = n.kv_per_gpu, True
    else:
        kv = n.hbm_per_gpu * n.gpu_memory_utilization - (per_w or 0.0) - n.activation_reserve
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


def equation(p: Pools) -> str:
    """How the KV pool per GPU was obtained, with the numbers."""
    if p.given:
        return f"node.kv_per_gpu {_gb(p.kv)}"
    return (
        f"{_gb(p.hbm)} x {p.utilization:g} - {_gb(p.weights or 0.0)} weights - "
        f"{_gb(p.reserve)} reserve = {_gb(p.kv)}"
    )


def checks(sc: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """The pools' rules, as cross_checks reports them (field path, message)."""
    out: list[tuple[tuple[Any, ...], str]] = []
    n = sc.node
    if n.activation_reserve >= n.hbm_per_gpu:
        out.append(
            (
                ("node", "activation_reserve"),
                f"{_gb(n.activation_reserve)} is not below hbm_per_gpu ({_gb(n.hbm_per_gpu)})",
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
        usable = f"{_gb(p.hbm)} x {p.utilization:g} = {_gb(p.usable)} usable HBM per GPU"
        w = p.weights or 0.0
        if w >= p.usable:
            where: tuple[Any, ...] = ("model", "weight_bytes")
            what = f"{_gb(w)} of weights per GPU exceed {usable}"
        else:
            where = ("node", "activation_reserve")
            what = f"{_gb(p.reserve)} plus {_gb(w)} of weights per GPU leave no KV in {usable}"
        out.append((where, what))
        return out
    if p.cache > p.node_kv * (1 + 1e-9):
        out.append(
            (
                ("tiers", "gpu", "capacity"),
                f"exceeds the node's KV pool ({_gb(p.node_kv)} = {p.gpus} x ({equation(p)}))",
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
    from kvsim.config.schema import (
        ChoiceDist,
        FixedDist,
        LogNormalDist,
        SyntheticWorkload,
        UniformDist,
    )

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
    """Why a prompt of ``tokens`` cannot fit the working pool, or None when it fits."""
    p = pools(sc)
    need = tokens * sc.model.kv_bytes
    if need <= p.node_kv:
        return None
    fix = (
        "raise node.kv_per_gpu"
        if p.given
        else "raise node.hbm_per_gpu or node.gpu_memory_utilization, or lower "
        "node.activation_reserve"
    )
    return (
        f"a prompt of {tokens:,} tokens needs {_gb(need)} of KV, more than the node's KV "
        f"pool ({_gb(p.node_kv)} = {p.gpus} x ({equation(p)})): shorten it, or {fix}"
    )


def pool_lines(sc: Scenario) -> list[str]:
    """What ``kvsim validate`` prints about GPU memory."""
    p = pools(sc)
    g = p.gpus
    w = "?" if p.weights is None else _gb(p.weights)
    wn = "?" if p.weights is None else _gb(p.weights * g)
    rows = [
        ("HBM", _gb(p.hbm), _gb(p.hbm * g)),
        (f"usable (x {p.utilization:g})", _gb(p.usable), _gb(p.usable * g)),
        ("weights", w, wn),
        ("activation reserve", _gb(p.reserve), _gb(p.reserve * g)),
        ("KV pool" + (" (node.kv_per_gpu)" if p.given else ""), _gb(p.kv), _gb(p.node_kv)),
        ("prefix cache (cap)", _gb(p.cache / g), _gb(p.cache)),
        ("working pool (max)", _gb(p.kv), _gb(p.node_kv)),
        ("working w/o evicting", _gb(p.slack / g), _gb(p.slack)),
    ]
    # columns as wide as their widest number (issue 39: two numbers never run together)
    wa = max(14, *(len(a) + 2 for _, a, _ in rows))
    wb = max(14, *(len(b) + 2 for _, _, b in rows))
    out = [f"GPU memory ({g} GPUs):{'per GPU':>{wa + 2}}{'per node':>{wb}}"]
    out += [f"  {name:<24}{a:>{wa}}{b:>{wb}}" for name, a, b in rows]
    return out
