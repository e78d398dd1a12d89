"""Compose a profile from the catalogue: a model card on a GPU card, split over GPUs.

A scenario's ``profile: {model: NAME | PATH, gpu: NAME | PATH, gpus: N, tp: N, pcp: N,
ep: N}`` becomes the same profile layer a named profile gives (``node``, ``model``,
``timing``, ``tiers``, ``remote``), every number derived from the two cards, the
achievable efficiency of the GPU's generation (kvsim/catalogue/efficiency.py) and the
stack file (kvsim/catalogue/stack.yaml: host, storage and KV software), or a named
``base`` profile's. docs/catalogue.md has the equations; in short, on ``gpus`` = tp x pcp
GPUs::

    achievable FLOP/s   = gpus x dense peak[dtype] x flops_frac
    step fixed time     = fixed_s + layers x fixed_per_layer_s
    weights per GPU     = dense weights / tp + routed experts / (ep, or tp without EP)
    KV pool per GPU     = HBM x gpu_memory_utilization - weights per GPU - reserve
                          (/ r where TP ranks replicate the KV: MLA, or tp > KV heads)
    host link           = the card's link (PCIe or C2C) x host_link_frac, each way

and the roofline's parallel terms (kvsim/physics/step.py, :class:`Parallel`): TP
all-reduces, the PCP KV exchange and the EP all-to-all over NVLink (over PCIe, the host
link's achieved rate, on a GPU without NVLink). A card's mistake keeps the card's own file
and line; :mod:`kvsim.catalogue.calibrated` says where a calibrated profile models the
same system.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kvsim.catalogue.efficiency import Efficiency, card_efficiency
from kvsim.catalogue.gpus import GpuCard, read_gpu
from kvsim.catalogue.modelcard import ModelCard
from kvsim.catalogue.models import read_model
from kvsim.errors import InputError, shown
from kvsim.physics.hbm import kv_pool_per_gpu
from kvsim.physics.step import Parallel, Roofline, lone_seconds
from kvsim.units import parse_size

STACK = Path(__file__).parent / "stack.yaml"
LINKS = ("h2d_per_gpu", "d2h_per_gpu", "nic_per_gpu")  # a base profile keeps its own


def _stack() -> dict[str, Any]:
    with STACK.open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _gb(x: float) -> str:
    return f"{x / 1e9:,.1f} GB"


def _b(x: float) -> str:
    """A size as a unit string that parses back to the same float (scenarios refuse bare
    numbers where a unit is expected)."""
    return f"{float(x)!r} B"


def _bps(x: float) -> str:
    return f"{float(x)!r} B/s"


@dataclass(frozen=True)
class Composition:
    """A model card on a GPU card, with the parallel split and the numbers it implies."""

    model: ModelCard
    gpu: GpuCard
    eff: Efficiency
    gpus: int
    tp: int
    pcp: int
    ep: int
    dtype: str
    utilization: float
    reserve: float

    @property
    def moe(self) -> bool:
        return self.model.experts > 0

    @property
    def expert_shards(self) -> int:
        """GPUs the routed experts are split over: ep with expert parallelism, else each
        expert's matrices are split over the TP ranks."""
        return self.ep if self.ep > 1 else self.tp

    @property
    def weights_per_gpu(self) -> float:
        m = self.model
        return m.dense_weight_bytes() / self.tp + m.expert_weight_bytes() / self.expert_shards

    @property
    def kv_replication(self) -> float:
        """Copies of each token's KV on the node's GPUs (1: TP ranks split it by heads;
        tp for MLA, whose latent every TP rank keeps whole)."""
        one = self.model.kv_bytes_per_token(1)
        return self.model.kv_bytes_per_token(self.tp) * self.tp / one

    @property
    def kv_pool_per_gpu(self) -> float:
        """KV pool per GPU in bytes of distinct KV (replicated copies taken out)."""
        raw = kv_pool_per_gpu(self.gpu.hbm, self.utilization, self.weights_per_gpu, self.reserve)
        return raw / self.kv_replication

    @property
    def achievable_flops(self) -> float:
        return self.gpus * self.gpu.flops[self.dtype] * self.eff.flops_frac

    @property
    def fixed_s(self) -> float:
        return self.eff.fixed_s + self.model.layers * self.eff.fixed_per_layer_s

    @property
    def host_link(self) -> float:
        return self.gpu.host_link_per_direction * self.eff.host_link_frac

    @property
    def gpu_link(self) -> float:
        """GPU-to-GPU bandwidth per GPU, one direction: NVLink, or on a GPU without it
        (``nvlink_per_gpu: 0``, L40S) PCIe peer-to-peer at the host link's achieved rate."""
        return self.gpu.nvlink_per_gpu or self.host_link

    def roofline_numbers(self) -> dict[str, Any]:
        """The scenario's ``timing.roofline`` in base units (floats, not unit strings)."""
        m = self.model
        return {
            "fixed": self.fixed_s,
            "achievable_flops": self.achievable_flops,
            # a prefill computes logits for each prompt's last token only: the LM head
            # leaves the per-token FLOPs (2-21% of them, the smaller the model the more)
            "linear_flops_per_token": m.linear_flops_per_token() - m.lm_head_flops_per_token(),
            "attention": "sparse" if m.sparse_top_k else "dense",
            "pair_flops": m.pair_flops(),
            "sparse_top_k": m.sparse_top_k or 2048,
            "indexer_pair_flops": m.indexer_pair_flops(),
            "window": m.sliding_window or 128,
            "window_pair_flops": m.window_pair_flops(),
            "dense_weight_bytes": m.dense_weight_bytes(),
            "expert_weight_bytes": m.expert_weight_bytes(),
            "experts": max(m.experts, 1),
            "experts_per_token": max(m.experts_per_token, 1),
            "hbm_efficiency": self.eff.hbm_frac,
            "dense_weight_shards": self.tp,
            "expert_weight_shards": self.expert_shards,
            "tp": self.tp,
            "ep": self.ep,
            "allreduce_bytes_per_token": m.allreduce_bytes_per_token() if self.tp > 1 else 0.0,
            "alltoall_bytes_per_token": m.alltoall_bytes_per_token() if self.ep > 1 else 0.0,
            "pcp_exchange_bytes_per_token": m.kv_bytes_per_token(self.tp) if self.pcp > 1 else 0.0,
        }

    def roofline(self) -> dict[str, Any]:
        """The scenario's ``timing.roofline`` (unit strings where the schema wants them)."""
        r = self.roofline_numbers()
        r["fixed"] = f"{r['fixed']!r} s"
        r["dense_weight_bytes"] = _b(r["dense_weight_bytes"])
        r["expert_weight_bytes"] = _b(r["expert_weight_bytes"])
        return r

    def step_model(self) -> Roofline:
        """The step model a scenario with this profile runs (kvsim/physics/step.py)."""
        r, g = self.roofline_numbers(), self.gpu
        return Roofline(
            fixed=r["fixed"],
            achievable_flops=r["achievable_flops"],
            hbm_bandwidth=g.hbm_bandwidth * self.gpus,
            linear_flops_per_token=r["linear_flops_per_token"],
            pair_flops=r["pair_flops"],
            kv_bytes_per_token=self.model.kv_bytes_per_token(1),
            dense_weight_bytes=r["dense_weight_bytes"],
            expert_weight_bytes=r["expert_weight_bytes"],
            experts=r["experts"],
            experts_per_token=r["experts_per_token"],
            sparse_top_k=r["sparse_top_k"] if r["attention"] == "sparse" else None,
            indexer_pair_flops=r["indexer_pair_flops"],
            window=r["window"],
            window_pair_flops=r["window_pair_flops"],
            parallel=Parallel(
                gpus=self.gpus,
                tp=self.tp,
                pcp=self.pcp,
                ep=self.ep,
                dense_shards=self.tp,
                expert_shards=self.expert_shards,
                hbm_per_gpu=g.hbm_bandwidth * self.eff.hbm_frac,
                nvlink_per_gpu=self.gpu_link,
                allreduce_bytes_per_token=r["allreduce_bytes_per_token"],
                alltoall_bytes_per_token=r["alltoall_bytes_per_token"],
                exchange_bytes_per_token=r["pcp_exchange_bytes_per_token"],
            ),
        )


def _card_error(e: InputError, key: str) -> InputError:
    """A card reader's error as ``profile.KEY: reason``, still located in the card's own
    file and line where it has one (the scenario's ``profile:`` line otherwise)."""
    text = e.reason
    if text.startswith(f"{key}: "):
        text = text[len(key) + 2 :]
    return InputError(f"profile.{key}: {text}", where=e.where)


def _efficiency(gpu: GpuCard, dtype: str) -> Efficiency:
    """The generation's efficiency with the card's own values (an error names the card)."""
    try:
        return card_efficiency(gpu.generation, dtype, gpu.efficiency)
    except InputError as e:
        raise InputError(f"profile.gpu: {e.reason}", where=gpu.at("generation")) from None


def _int(spec: Mapping[str, Any], key: str, default: int) -> int:
    v = spec.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise InputError(f"profile.{key}: expected a positive whole number, got {v!r}")
    return v


def compose(
    spec: Mapping[str, Any],
    base_dir: Path | None = None,
    *,
    utilization: float | None = None,
    reserve: float | None = None,
) -> Composition:
    """Check a ``profile: {...}`` mapping and read its cards (InputError naming
    ``profile.FIELD`` for a user mistake)."""
    for key in ("model", "gpu"):
        if not isinstance(spec.get(key), str) or not spec.get(key):
            given = "missing;" if spec.get(key) is None else f"given {shown(spec[key])};"
            raise InputError(
                f"profile.{key}: {given} allowed a name from `kvsim profiles`, or a path"
            )
    try:
        model = read_model(spec["model"], base_dir)
    except InputError as e:
        raise _card_error(e, "model") from None
    try:
        gpu = read_gpu(spec["gpu"], base_dir)
    except InputError as e:
        raise _card_error(e, "gpu") from None
    tp = _int(spec, "tp", 1)
    pcp = _int(spec, "pcp", 1)
    ep = _int(spec, "ep", 1)
    gpus = spec.get("gpus")
    if gpus is None:
        gpus = tp * pcp
    else:
        gpus = _int(spec, "gpus", 1)
        if "tp" not in spec and gpus % pcp == 0:
            tp = gpus // pcp  # gpus given alone: tensor-parallel over them
            if model.heads % tp:
                raise InputError(
                    f"profile.gpus: {gpus} GPUs mean tp {tp} (tensor-parallel over them), "
                    f"which does not divide {model.name}'s {model.heads} heads"
                )
    if gpus != tp * pcp:
        raise InputError(
            f"profile.gpus: {gpus} is not tp x pcp ({tp} x {pcp} = {tp * pcp}); the "
            "experts share those GPUs (ep divides gpus)"
        )
    if model.heads % tp:
        raise InputError(f"profile.tp: {tp} does not divide {model.name}'s {model.heads} heads")
    if model.attention != "mla" and model.kv_heads % tp and tp % model.kv_heads:
        raise InputError(
            f"profile.tp: {tp} and {model.name}'s {model.kv_heads} KV heads: one must divide "
            "the other (vLLM's rule)"
        )
    if ep > 1:
        if not model.experts:
            raise InputError(f"profile.ep: {model.name} has no routed experts (ep must be 1)")
        if gpus % ep:
            raise InputError(f"profile.ep: {ep} does not divide gpus ({gpus})")
        if model.experts % ep:
            raise InputError(
                f"profile.ep: {ep} does not divide {model.name}'s {model.experts} experts"
            )
    dtype = spec.get("dtype", "auto") or "auto"
    if dtype == "auto":
        want = model.weight_dtype if model.weight_dtype in ("fp8", "fp4") else "bf16"
        dtype = want if want in gpu.flops else "bf16"
    if dtype not in gpu.flops:
        have = ", ".join(sorted(gpu.flops))
        raise InputError(f"profile.dtype: {gpu.name} has no {dtype} peak (it has {have})")
    stack = _stack()
    util = (
        utilization if utilization is not None else float(stack["node"]["gpu_memory_utilization"])
    )
    res = reserve if reserve is not None else parse_size(stack["node"]["activation_reserve"])
    comp = Composition(
        model=model,
        gpu=gpu,
        eff=_efficiency(gpu, dtype),
        gpus=gpus,
        tp=tp,
        pcp=pcp,
        ep=ep,
        dtype=dtype,
        utilization=util,
        reserve=res,
    )
    usable = gpu.hbm * util
    if comp.kv_pool_per_gpu <= 0:
        raise InputError(
            f"profile: {model.name}'s weights per GPU ({_gb(comp.weights_per_gpu)}) and the "
            f"{_gb(res)} reserve leave no KV pool on {gpu.name} ({_gb(usable)} usable): raise "
            "tp" + (" or ep" if model.experts else "") + " (and gpus)"
        )
    return comp


def profile_layer(
    spec: Mapping[str, Any], base: Mapping[str, Any] | None = None, base_dir: Path | None = None
) -> dict[str, Any]:
    """The profile layer of a composition. ``base`` is a named profile's layer whose host,
    links, storage, tiers and remote the composition keeps (None: the stack file)."""
    stack = _stack()
    node_base = dict((base or {}).get("node") or stack["node"])
    util = float(node_base.get("gpu_memory_utilization", 0.9))
    reserve = parse_size(node_base.get("activation_reserve", stack["node"]["activation_reserve"]))
    comp = compose(spec, base_dir, utilization=util, reserve=reserve)
    m, g = comp.model, comp.gpu
    node: dict[str, Any] = dict(node_base)
    node.pop("kv_per_gpu", None)
    node.update(
        {
            "gpu": g.name,
            "gpus": comp.gpus,
            "pcp": comp.pcp,
            "hbm_per_gpu": _b(g.hbm),
            "hbm_bandwidth_per_gpu": _bps(g.hbm_bandwidth),
            "nvlink_per_gpu": _bps(comp.gpu_link),
        }
    )
    if base is None:
        per = stack["per_gpu"]
        node.update(
            {
                "h2d_per_gpu": _bps(comp.host_link),
                "d2h_per_gpu": _bps(comp.host_link),
                "nic_per_gpu": _bps(g.nic_per_gpu),
                "host_dram": _b(parse_size(per["host_dram"]) * comp.gpus),
                "nvme_drives": int(per["nvme_drives"]) * comp.gpus,
            }
        )
    if comp.kv_replication > 1:
        node["kv_per_gpu"] = _b(comp.kv_pool_per_gpu)
    layer: dict[str, Any] = {
        "node": node,
        "model": {
            "name": m.name,
            "kv_layout": m.kv_layout(),
            "weight_bytes": _b(comp.weights_per_gpu * comp.gpus),
        },
        "timing": {"roofline": comp.roofline()},
    }
    pool = comp.kv_pool_per_gpu * comp.gpus
    if base is not None:
        tiers = {k: dict(v) for k, v in (base.get("tiers") or {}).items()}
        remote = dict(base.get("remote") or {})
    else:
        tiers = {k: dict(v) for k, v in stack["tiers"].items()}
        remote = dict(stack["remote"])
        host = parse_size(per["host_dram"]) * comp.gpus
        tiers["host"]["capacity"] = _b(host * float(stack["host_share"]))
        drives = node["nvme_drives"] * parse_size(node["nvme_drive_capacity"])
        tiers.setdefault("nvme", {})["capacity"] = _b(drives * float(stack["nvme_share"]))
        if drives == 0:
            tiers["nvme"]["enabled"] = False
    tiers.setdefault("gpu", {})["capacity"] = _b(pool)
    layer["tiers"] = tiers
    layer["remote"] = remote
    return layer


def numbers(comp: Composition, per_step: int = 8192) -> dict[str, float]:
    """What :func:`describe` prints, as numbers in base units (``profiles show --json``)."""
    m = comp.model
    total, active = m.params()
    kv1 = m.kv_bytes_per_token(1)
    t16 = lone_seconds(comp.step_model(), 16384, 0, per_step)
    return {
        "params_total": total,
        "params_active": active,
        "linear_flops_per_token": comp.roofline_numbers()["linear_flops_per_token"],
        "pair_flops": m.pair_flops(),
        "kv_bytes_per_token": kv1,
        "kv_bytes_per_token_per_gpu": m.kv_bytes_per_token(comp.tp),
        "weights_per_gpu_bytes": comp.weights_per_gpu,
        "kv_pool_per_gpu_bytes": comp.kv_pool_per_gpu * comp.kv_replication,
        "kv_pool_node_distinct_bytes": comp.kv_pool_per_gpu * comp.gpus,
        "achievable_flops": comp.achievable_flops,
        "fixed_s": comp.fixed_s,
        "host_link_bytes_per_s": comp.host_link,
        "lone_16k_s": t16,
        "b_star_bytes_per_s": kv1 * 16384 / t16,
    }


def describe(comp: Composition, per_step: int = 8192) -> list[tuple[str, str, str]]:
    """The derived constants ``kvsim profiles show`` prints: (quantity, value, how)."""
    m, g, r = comp.model, comp.gpu, comp.roofline_numbers()
    total, active = m.params()
    kv1 = m.kv_bytes_per_token(1)
    roof = comp.step_model()
    t16 = lone_seconds(roof, 16384, 0, per_step)
    rate = 16384 / t16
    b_star = kv1 * rate
    par = f"tp {comp.tp} x pcp {comp.pcp}, ep {comp.ep}"
    return [
        ("model", m.name, m.source),
        ("gpu", f"{comp.gpus} x {g.name}", f"{g.generation}; {par}"),
        ("parameters", f"{total / 1e9:,.1f} B total, {active / 1e9:,.1f} B active", "card"),
        (
            "linear FLOPs per token",
            f"{r['linear_flops_per_token'] / 1e9:,.2f} GFLOP",
            "2 x the matmul parameters a token passes, LM head out (prefill)",
        ),
        ("attention FLOPs per pair", f"{r['pair_flops'] / 1e6:,.3f} MFLOP", r["attention"]),
        (
            "KV bytes per token",
            f"{kv1:,.0f} B",
            f"per GPU at tp {comp.tp}: {m.kv_bytes_per_token(comp.tp):,.0f} B",
        ),
        (
            "KV bytes per 16-token block",
            f"{kv1 * 16 / 2**20:,.3f} MiB",
            f"per GPU: {m.kv_bytes_per_token(comp.tp) * 16 / 2**20:,.3f} MiB",
        ),
        (
            "weights per GPU",
            _gb(comp.weights_per_gpu),
            f"dense / {comp.tp} + experts / {comp.expert_shards}",
        ),
        (
            "KV pool per GPU",
            _gb(comp.kv_pool_per_gpu * comp.kv_replication),
            f"{_gb(g.hbm)} x {comp.utilization:g} - weights - {_gb(comp.reserve)} reserve"
            + (
                f"; TP keeps {comp.kv_replication:g} copies of each token's KV, so it holds "
                f"{_gb(comp.kv_pool_per_gpu)} of distinct KV (node.kv_per_gpu)"
                if comp.kv_replication > 1
                else ""
            ),
        ),
        (
            "KV pool (node, distinct KV)",
            _gb(comp.kv_pool_per_gpu * comp.gpus),
            f"{comp.kv_pool_per_gpu * comp.gpus / kv1:,.0f} tokens",
        ),
        (
            "achievable FLOP/s",
            f"{comp.achievable_flops / 1e15:,.3f} PFLOP/s",
            f"{comp.gpus} x {g.flops[comp.dtype] / 1e12:,.0f} TFLOP/s {comp.dtype} "
            f"x {comp.eff.flops_frac:g} ({comp.eff.mark})",
        ),
        (
            "HBM bandwidth reached",
            f"{g.hbm_bandwidth * comp.eff.hbm_frac / 1e12:,.2f} TB/s per GPU",
            f"x {comp.eff.hbm_frac:g} ({comp.eff.marks.get('hbm_frac', comp.eff.mark)})",
        ),
        (
            "fixed per step",
            f"{comp.fixed_s * 1e3:,.2f} ms",
            f"{comp.eff.fixed_s * 1e3:g} ms + {m.layers} layers "
            f"x {comp.eff.fixed_per_layer_s * 1e6:g} us",
        ),
        (
            "host link",
            f"{comp.host_link / 1e9:,.1f} GB/s each way",
            f"{g.host_link} {g.host_link_per_direction / 1e9:g} GB/s x {comp.eff.host_link_frac:g}"
            f" ({comp.eff.marks.get('host_link_frac', comp.eff.mark)})",
        ),
        ("lone 16k prefill", f"{t16:.3f} s", f"{per_step:,}-token steps ({rate:,.0f} tokens/s)"),
        (
            "B* (break-even tier bandwidth)",
            f"{b_star / 1e9:,.2f} GB/s",
            "KV bytes per token x 16k prefill rate",
        ),
    ]
