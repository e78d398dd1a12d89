"""GPU memory as pools: the arithmetic of one GPU's HBM split (docs/engine-model.md, "GPU
memory"), pure functions of numbers.

Per GPU, HBM holds the weights, an activation reserve and the KV pool::

    usable    = hbm_per_gpu x gpu_memory_utilization      (vLLM's default 0.9, H)
    kv pool   = usable - weights / gpus - activation_reserve
    node pool = gpus x kv pool

The node's KV pool is one block pool, as vLLM's: the blocks of running requests and of
restores in flight (the working KV) are pinned; the prefix cache (evictable) holds at most
its capacity and at most what the working KV leaves. The working KV may take the whole
pool, evicting (demoting) cached blocks as it grows; the largest prompt must fit in it.
A scenario's pools (its fields, its rules) are :mod:`kvsim.config.pools`; a composed
profile's (kvsim/catalogue/compose.py) use :func:`kv_pool_per_gpu` too.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9


def gb_text(x: float) -> str:
    """Bytes as GB for messages: one decimal from 10 GB, else two (three significant
    figures below 0.01 GB)."""
    v = x / GB
    if abs(v) >= 10:
        return f"{v:,.1f} GB"
    return f"{v:.2f} GB" if abs(v) >= 0.01 or v == 0 else f"{v:.3g} GB"


def kv_pool_per_gpu(hbm: float, utilization: float, weights: float, reserve: float) -> float:
    """The KV pool of one GPU (bytes): its usable HBM less its weights and reserve."""
    return hbm * utilization - weights - reserve


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


def equation(p: Pools) -> str:
    """How the KV pool per GPU was obtained, with the numbers."""
    if p.given:
        return f"node.kv_per_gpu {gb_text(p.kv)}"
    return (
        f"{gb_text(p.hbm)} x {p.utilization:g} - {gb_text(p.weights or 0.0)} weights - "
        f"{gb_text(p.reserve)} reserve = {gb_text(p.kv)}"
    )


def too_large(p: Pools, tokens: int, kv_bytes: float) -> str | None:
    """Why a prompt of ``tokens`` (``kv_bytes`` of KV each) cannot fit the working pool,
    or None when it fits."""
    need = tokens * kv_bytes
    if need <= p.node_kv:
        return None
    fix = (
        "raise node.kv_per_gpu"
        if p.given
        else "raise node.hbm_per_gpu or node.gpu_memory_utilization, or lower "
        "node.activation_reserve"
    )
    return (
        f"a prompt of {tokens:,} tokens needs {gb_text(need)} of KV, more than the node's KV "
        f"pool ({gb_text(p.node_kv)} = {p.gpus} x ({equation(p)})): shorten it, or {fix}"
    )


def pool_lines(p: Pools) -> list[str]:
    """What ``kvsim validate`` prints about GPU memory."""
    g = p.gpus
    w = "?" if p.weights is None else gb_text(p.weights)
    wn = "?" if p.weights is None else gb_text(p.weights * g)
    rows = [
        ("HBM", gb_text(p.hbm), gb_text(p.hbm * g)),
        (f"usable (x {p.utilization:g})", gb_text(p.usable), gb_text(p.usable * g)),
        ("weights", w, wn),
        ("activation reserve", gb_text(p.reserve), gb_text(p.reserve * g)),
        ("KV pool" + (" (node.kv_per_gpu)" if p.given else ""), gb_text(p.kv), gb_text(p.node_kv)),
        ("prefix cache (cap)", gb_text(p.cache / g), gb_text(p.cache)),
        ("working pool (max)", gb_text(p.kv), gb_text(p.node_kv)),
        ("working w/o evicting", gb_text(p.slack / g), gb_text(p.slack)),
    ]
    # columns as wide as their widest number (issue 39: two numbers never run together)
    wa = max(14, *(len(a) + 2 for _, a, _ in rows))
    wb = max(14, *(len(b) + 2 for _, _, b in rows))
    out = [f"GPU memory ({g} GPUs):{'per GPU':>{wa + 2}}{'per node':>{wb}}"]
    out += [f"  {name:<24}{a:>{wa}}{b:>{wb}}" for name, a, b in rows]
    return out
