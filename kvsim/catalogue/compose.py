"""Compose a profile from the catalogue: a model card on a GPU card, split over GPUs.

A scenario's ``profile: {model: NAME | PATH, gpu: NAME | PATH, gpus: N, tp: N, pcp: N,
pp: N, ep: N, assume: {...}}`` becomes the same profile layer a named profile gives (``node``,
``model``, ``timing``, ``engine``, ``tiers``, ``remote``), every number derived from the
two cards, the catalogue's assumptions (kvsim/catalogue/assumptions.py: the per-operation
efficiency curves of efficiency.yaml, the engine's costs outside the kernels of
engine.yaml; ``assume`` gives the scenario's own, a ``base`` profile written by ``kvsim
calibrate`` its fitted ones) and the stack file
(kvsim/catalogue/stack.yaml: host, storage and KV software), or a named ``base``
profile's. docs/catalogue.md has the equations; in short, on ``gpus`` = tp x pcp x pp GPUs
(pp pipeline stages of tp x pcp GPUs each)::

    step                = the per-operation roofline (kvsim/physics/ops.py): dense GEMMs,
                          expert GEMMs and attention each on its own efficiency curve, the
                          collectives, the host's CPU work and kernel launches
    weights per GPU     = (dense weights / tp + routed experts / (ep, or tp without EP)) / pp
    KV pool per GPU     = HBM x gpu_memory_utilization - weights per GPU - reserve
                          (/ r where TP ranks replicate the KV: MLA, or tp > KV heads)
    host link           = the card's link (PCIe or C2C) x host_link_frac, each way
    frontend            = engine.yaml's API server, tokenizer, hashing and output costs

Collectives cross NVLink within the card's NVLink domain, the network (the card's NIC per
GPU) when a stage's tp x pcp GPUs span domains; a hand-off between pipeline stages crosses
the network where the stages sit in different domains. A card's mistake keeps the card's
own file and line; :mod:`kvsim.catalogue.calibrated` says where a calibrated profile
models the same system.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from kvsim.catalogue.assumptions import Assumptions, assumptions
from kvsim.catalogue.efficiency import narrow
from kvsim.catalogue.engine import engine_facts
from kvsim.catalogue.gpus import GpuCard, read_gpu
from kvsim.catalogue.modelcard import ModelCard
from kvsim.catalogue.models import read_model
from kvsim.config.schema.hardware import Roofline
from kvsim.errors import InputError, shown
from kvsim.physics.frontend import frontend_seconds
from kvsim.physics.hbm import kv_pool_per_gpu
from kvsim.physics.ops import PARTS, OpRoofline
from kvsim.physics.step import lone_seconds, op_roofline
from kvsim.profiles import profile_assume
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


def _s(x: float) -> str:
    return f"{float(x)!r} s"


@dataclass(frozen=True)
class Composition:
    """A model card on a GPU card, with the parallel split, the catalogue's assumptions
    and the numbers they imply."""

    model: ModelCard
    gpu: GpuCard
    assume: Assumptions
    gpus: int
    tp: int
    pcp: int
    ep: int
    dtype: str  # the dense GEMMs' compute dtype
    expert_kernel: str  # the routed experts' kernel: bf16, fp8, fp4, int4 (weight-only)
    utilization: float
    reserve: float
    pp: int = 1  # pipeline stages, each of tp x pcp GPUs holding 1/pp of the layers

    @property
    def group(self) -> int:
        """The GPUs of one pipeline stage (tp x pcp): the collectives' group."""
        return self.tp * self.pcp

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
        per = m.dense_weight_bytes() / self.tp + m.expert_weight_bytes() / self.expert_shards
        return per / self.pp

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
    def host_link(self) -> float:
        return self.gpu.host_link_per_direction * self.assume.v("host_link_frac")

    @property
    def gpu_link(self) -> float:
        """GPU-to-GPU bandwidth per GPU, one direction: NVLink, or on a GPU without it
        (``nvlink_per_gpu: 0``, L40S) PCIe peer-to-peer at the host link's achieved rate."""
        return self.gpu.nvlink_per_gpu or self.host_link

    @property
    def domain(self) -> int:
        """GPUs one NVLink domain holds: the card's ``nvlink_domain``; for a card without
        NVLink (PCIe peers in one server), the 8 of a server."""
        return self.gpu.nvlink_domain if self.gpu.nvlink_per_gpu > 0 else 8

    @property
    def spans_domains(self) -> bool:
        """Whether a stage's tp x pcp group spans NVLink domains (its collectives then
        cross the network)."""
        return self.group > self.domain

    @property
    def crossing_hops(self) -> int:
        """Hand-offs between pipeline stages that cross the network (stages laid out in
        order, a domain after another): the stage boundaries on a domain's edge."""
        if self.pp == 1:
            return 0
        if self.group >= self.domain:
            return self.pp - 1
        return sum(1 for i in range(1, self.pp) if i * self.group % self.domain == 0)

    def _stage_link(self) -> tuple[float, float]:
        """A hand-off's per-GPU bandwidth and latency, averaged over the pp - 1 hand-offs
        so that (pp - 1) hand-offs at them take what the real ones take together."""
        a = self.assume
        hops = self.pp - 1
        if hops == 0:
            return self.gpu_link * a.v("comm.nvlink_frac"), 0.0
        far = self.crossing_hops if self.gpu.nic_per_gpu > 0 else 0
        near = hops - far
        net = self.gpu.nic_per_gpu * a.v("comm.network_frac") if far else 1.0
        nvl = self.gpu_link * a.v("comm.nvlink_frac")
        per_byte = (far / net + near / nvl) / hops  # seconds per byte, averaged
        lat = (far * a.v("comm.network_latency") + near * a.v("comm.nvlink_latency")) / hops
        return 1.0 / per_byte, lat

    @property
    def comm_bandwidth(self) -> float:
        """Per-GPU bandwidth the collectives reach: NVLink's share within a domain, the
        network's across domains."""
        a = self.assume
        if self.spans_domains and self.gpu.nic_per_gpu > 0:
            return self.gpu.nic_per_gpu * a.v("comm.network_frac")
        return self.gpu_link * a.v("comm.nvlink_frac")

    @property
    def collectives(self) -> int:
        """Collective calls per step: two TP all-reduces per layer, two EP all-to-alls
        (dispatch, combine) per MoE layer, one PCP KV exchange per layer."""
        m = self.model
        n = 0
        if self.tp > 1:
            n += 2 * m.layers
        if self.ep > 1:
            n += 2 * m.moe_layers
        if self.pcp > 1:
            n += m.layers
        return n

    @property
    def kernels(self) -> int:
        """Kernels one step launches: per layer (more for MLA, more for an MoE layer) and
        once per forward (engine.yaml's launch counts)."""
        a, m = self.assume, self.model
        per = a.v("launch.kernels_per_layer")
        if m.attention == "mla":
            per += a.v("launch.mla_kernels_per_layer")
        total = m.layers * per + m.moe_layers * a.v("launch.moe_kernels_per_layer")
        return round(total + a.v("launch.model_kernels"))

    def _narrow(self, width: int) -> float:
        """The factor on e_max of a GEMM whose N or K is ``width`` (efficiency.yaml)."""
        _, limit = narrow()
        return self.assume.v("narrow") if width < limit else 1.0

    def curve(self, op: str, peak_dtype: str, width: int) -> dict[str, float]:
        """An operation kind's ``ops`` entry: its peak and curve (e_max narrowed when its
        GEMMs are)."""
        a = self.assume
        return {
            "peak_flops": self.gpu.flops[peak_dtype],
            "e_max": a.v(f"{op}.e_max") * self._narrow(width),
            "half": a.v(f"{op}.half"),
            "e_mem": a.v(f"{op}.e_mem"),
        }

    def ops_numbers(self) -> dict[str, Any]:
        """The roofline's ``ops`` (the per-operation model) in base units."""
        m, a = self.model, self.assume
        p = m.param_breakdown()
        routed = 2.0 * p["routed_experts"] * m.experts_per_token / m.experts if m.experts else 0.0
        peak_expert = self.expert_kernel if self.expert_kernel in self.gpu.flops else "bf16"
        expert_width = m.expert_intermediate // (1 if self.ep > 1 else self.tp) or 1
        dense_width = min(m.hidden, (m.intermediate or m.expert_intermediate) // self.tp) or 1
        facts = engine_facts()
        across = self.spans_domains and self.gpu.nic_per_gpu > 0
        stage_bw, stage_lat = self._stage_link()
        return {
            "expert_flops_per_token": routed,
            "dense": self.curve("dense", self.dtype, dense_width),
            "experts": self.curve("experts", peak_expert, expert_width),
            "attention": self.curve("attention", "bf16", m.hidden),
            "collectives": self.collectives,
            "collective_latency": a.v("comm.network_latency" if across else "comm.nvlink_latency"),
            "comm_bandwidth": self.comm_bandwidth,
            "cpu_step": a.v("cpu.per_step"),
            "cpu_request": a.v("cpu.per_request"),
            "kernels": self.kernels,
            "kernel_launch": a.v("launch.kernel"),
            "eager_launch": a.v("launch.eager_kernel"),
            "graph_replay": m.layers * a.v("launch.graph_per_layer"),
            "graph_max_tokens": facts["launch.graph_max_tokens"],
            "stage_bandwidth": stage_bw,
            "stage_latency": stage_lat,
        }

    def roofline_numbers(self) -> dict[str, Any]:
        """The scenario's ``timing.roofline`` in base units (floats, not unit strings)."""
        m = self.model
        return {
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
            "dense_weight_shards": self.tp,
            "expert_weight_shards": self.expert_shards,
            "tp": self.tp,
            "ep": self.ep,
            "allreduce_bytes_per_token": m.allreduce_bytes_per_token() if self.tp > 1 else 0.0,
            "alltoall_bytes_per_token": m.alltoall_bytes_per_token() if self.ep > 1 else 0.0,
            "pcp_exchange_bytes_per_token": m.kv_bytes_per_token(self.tp) if self.pcp > 1 else 0.0,
            "pp": self.pp,
            # vLLM hands the next stage a token's hidden states and residual, in BF16
            "pp_bytes_per_token": 2.0 * m.hidden * 2.0 if self.pp > 1 else 0.0,
            "ops": self.ops_numbers(),
        }

    def roofline(self) -> dict[str, Any]:
        """The scenario's ``timing.roofline`` (unit strings where the schema wants them)."""
        r = self.roofline_numbers()
        r["dense_weight_bytes"] = _b(r["dense_weight_bytes"])
        r["expert_weight_bytes"] = _b(r["expert_weight_bytes"])
        o = dict(r["ops"])
        for k in (
            "collective_latency",
            "cpu_step",
            "cpu_request",
            "kernel_launch",
            "eager_launch",
            "graph_replay",
            "stage_latency",
        ):
            o[k] = _s(o[k])
        o["comm_bandwidth"] = _bps(o["comm_bandwidth"])
        o["stage_bandwidth"] = _bps(o["stage_bandwidth"])
        r["ops"] = o
        return r

    def frontend(self) -> dict[str, Any]:
        """The scenario's ``engine.frontend`` (engine.yaml's API server and output costs)."""
        a, f = self.assume, engine_facts()
        out: dict[str, Any] = {
            "servers": f["frontend.servers"],
            "block_tokens": f["frontend.block_tokens"],
        }
        for k in ("per_request", "per_token", "tokenize_per_request", "tokenize_per_token"):
            out[k] = _s(a.v(f"frontend.{k}"))
        out["hash_per_block"] = _s(a.v("frontend.hash_per_block"))
        out["output"] = _s(a.v("frontend.output"))
        return out

    def transfer(self) -> dict[str, Any]:
        """A transfer engine's ``transfer`` section (engine.yaml: vLLM's NIXL connector)."""
        a, f = self.assume, engine_facts()
        return {
            "setup": _s(a.v("transfer.setup")),
            "per_batch": _s(a.v("transfer.per_batch")),
            "per_op": _s(a.v("transfer.per_op")),
            "threads": f["transfer.threads"],
            "op_tokens": f["transfer.op_tokens"],
        }

    def step_model(self, cuda_graphs: bool = True) -> OpRoofline:
        """The step model a scenario with this profile runs (kvsim/physics/ops.py)."""
        return op_roofline(
            Roofline.model_validate(self.roofline()),
            gpus=self.gpus,
            pcp=self.pcp,
            hbm_per_gpu=self.gpu.hbm_bandwidth,
            nvlink_per_gpu=self.gpu_link,
            kv_bytes_per_token=self.model.kv_bytes_per_token(1) * self.kv_replication,
            cuda_graphs=cuda_graphs,
        )

    def frontend_seconds(self, prompt_tokens: int) -> float:
        """A lone request's frontend time: in before the engine, and its first token out."""
        fe = _Frontend(self.assume, engine_facts()["frontend.block_tokens"])
        return frontend_seconds(fe, prompt_tokens) + self.assume.v("frontend.output")

    def with_assumptions(self, assume: Assumptions) -> Composition:
        """The same composition on other assumptions (a range's end)."""
        return replace(self, assume=assume)


class _Frontend:
    """engine.frontend's numbers from the assumptions (for frontend_seconds)."""

    def __init__(self, a: Assumptions, block_tokens: int) -> None:
        self.per_request = a.v("frontend.per_request")
        self.per_token = a.v("frontend.per_token")
        self.tokenize_per_request = a.v("frontend.tokenize_per_request")
        self.tokenize_per_token = a.v("frontend.tokenize_per_token")
        self.hash_per_block = a.v("frontend.hash_per_block")
        self.block_tokens = block_tokens


def _card_error(e: InputError, key: str) -> InputError:
    """A card reader's error as ``profile.KEY: reason``, still located in the card's own
    file and line where it has one (the scenario's ``profile:`` line otherwise)."""
    text = e.reason
    if text.startswith(f"{key}: "):
        text = text[len(key) + 2 :]
    return InputError(f"profile.{key}: {text}", where=e.where)


def expert_kernel(model: ModelCard, gpu: GpuCard, dtype: str) -> str:
    """The routed experts' kernel class (efficiency.yaml's experts entries): FP4 or FP8
    weights on a GPU with those units compute in them; 4-bit weights on one without
    (mxfp4 experts on Hopper, int4 AWQ/GPTQ) run a weight-only kernel (Marlin-class,
    ``int4``, timed against the BF16 peak); else the dense dtype."""
    w = (model.expert_dtype if model.experts else model.weight_dtype).lower()
    if "fp4" in w:
        return "fp4" if "fp4" in gpu.flops else "int4"
    if "int4" in w or w in ("awq", "gptq"):
        return "int4"
    if "fp8" in w:
        return "fp8" if "fp8" in gpu.flops else "bf16"
    return dtype if dtype != "fp4" else "fp8"


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
    pp = _int(spec, "pp", 1)
    ep = _int(spec, "ep", 1)
    gpus = spec.get("gpus")
    if gpus is None:
        gpus = tp * pcp * pp
    else:
        gpus = _int(spec, "gpus", 1)
        if "tp" not in spec and gpus % (pcp * pp) == 0:
            tp = gpus // (pcp * pp)  # gpus given alone: tensor-parallel over them
            if model.heads % tp:
                raise InputError(
                    f"profile.gpus: {gpus} GPUs mean tp {tp} (tensor-parallel over them), "
                    f"which does not divide {model.name}'s {model.heads} heads"
                )
    if gpus != tp * pcp * pp:
        raise InputError(
            f"profile.gpus: {gpus} is not tp x pcp x pp ({tp} x {pcp} x {pp} = "
            f"{tp * pcp * pp}); the experts share a stage's GPUs (ep divides tp x pcp)"
        )
    if pp > model.layers:
        raise InputError(f"profile.pp: {pp} stages for {model.name}'s {model.layers} layers")
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
        if (tp * pcp) % ep:
            where = f"gpus ({gpus})" if pp == 1 else f"a stage's tp x pcp GPUs ({tp * pcp})"
            raise InputError(f"profile.ep: {ep} does not divide {where}")
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
    kernel = expert_kernel(model, gpu, dtype)
    assume = assumptions(gpu, dtype, kernel)
    base = spec.get("base")
    if isinstance(base, str) and base:  # a calibrated base profile's fitted values (C)
        try:
            fitted, path = profile_assume(base, base_dir)
        except InputError as e:
            raise InputError(f"profile.base: {e.reason}", where=e.where) from None
        if fitted:
            assume = assume.given(
                fitted, f"profile.base ({path}): assume", mark="C", source=f"calibrated: {path}"
            )
    given = spec.get("assume")
    if given is not None:
        if not isinstance(given, Mapping):
            raise InputError(
                f"profile.assume: expected a mapping of assumption names to values, got "
                f"{shown(given)}"
            )
        assume = assume.given(given)
    comp = Composition(
        model=model,
        gpu=gpu,
        assume=assume,
        gpus=gpus,
        tp=tp,
        pcp=pcp,
        ep=ep,
        dtype=dtype,
        expert_kernel=kernel,
        utilization=util,
        reserve=res,
        pp=pp,
    )
    usable = gpu.hbm * util
    if comp.kv_pool_per_gpu <= 0:
        raise InputError(
            f"profile: {model.name}'s weights per GPU ({_gb(comp.weights_per_gpu)}) and the "
            f"{_gb(res)} reserve leave no KV pool on {gpu.name} ({_gb(usable)} usable): raise "
            "tp" + (" or ep" if model.experts else "") + " or pp (and gpus)"
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
    # the peer tier's transfer engine (used only where a scenario enables the tier)
    peer = tiers.setdefault("peer", {})
    if "transfer" not in peer:
        peer["transfer"] = comp.transfer()
    layer["tiers"] = tiers
    layer["remote"] = remote
    layer["engine"] = {"frontend": comp.frontend()}
    return layer


def lone_parts(comp: Composition, tokens: int = 16384, per_step: int = 8192) -> dict[str, float]:
    """A lone cold prompt's prefill by part (kvsim.physics.ops.PARTS), summed over its
    steps, and its frontend (in and out)."""
    steps = comp.step_model()
    parts = dict.fromkeys(PARTS, 0.0)
    done = 0
    while done < tokens:
        n = min(per_step, tokens - done)
        for k, v in steps.parts(((n, done),)).items():
            parts[k] += v
        done += n
    parts["frontend"] = comp.frontend_seconds(tokens)
    return parts


def numbers(comp: Composition, per_step: int = 8192) -> dict[str, Any]:
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
        "host_link_bytes_per_s": comp.host_link,
        "lone_16k_s": t16,
        "lone_16k_parts_s": lone_parts(comp, 16384, per_step),
        "b_star_bytes_per_s": kv1 * 16384 / t16,
        "assumptions": {
            k: {"value": a.value, "lo": a.lo, "hi": a.hi, "mark": a.mark}
            for k, a in comp.assume.items()
        },
    }


def describe(comp: Composition, per_step: int = 8192) -> list[tuple[str, str, str]]:
    """The derived constants ``kvsim profiles show`` prints: (quantity, value, how)."""
    m, g, r = comp.model, comp.gpu, comp.roofline_numbers()
    o, a = r["ops"], comp.assume
    total, active = m.params()
    kv1 = m.kv_bytes_per_token(1)
    roof = comp.step_model()
    t16 = lone_seconds(roof, 16384, 0, per_step)
    rate = 16384 / t16
    b_star = kv1 * rate
    par = f"tp {comp.tp} x pcp {comp.pcp}" + (f" x pp {comp.pp}" if comp.pp > 1 else "")
    par += f", ep {comp.ep}"

    def op_row(op: str, label: str, size: str, dtype: str) -> tuple[str, str, str]:
        c = o[op]
        marks = "/".join(dict.fromkeys(a[f"{op}.{p}"].mark for p in ("e_max", "half", "e_mem")))
        return (
            label,
            f"e_max {c['e_max']:.3g}, half {c['half']:g} {size}",
            f"of {c['peak_flops'] / 1e12:,.0f} TFLOP/s {dtype}; HBM x {c['e_mem']:g} when "
            f"bound by bytes ({marks})",
        )

    parts = lone_parts(comp, 16384, per_step)
    part_text = ", ".join(f"{k} {v * 1e3:,.1f} ms" for k, v in parts.items() if v > 0)
    link = "network" if comp.spans_domains else "NVLink"
    rows = [
        ("model", m.name, m.source),
        ("gpu", f"{comp.gpus} x {g.name}", f"{g.generation}; {par}"),
        ("parameters", f"{total / 1e9:,.1f} B total, {active / 1e9:,.1f} B active", "card"),
        (
            "linear FLOPs per token",
            f"{r['linear_flops_per_token'] / 1e9:,.2f} GFLOP",
            "2 x the matmul parameters a token passes, LM head out (prefill); of them "
            f"routed experts {o['expert_flops_per_token'] / 1e9:,.2f} GFLOP",
        ),
        ("attention FLOPs per pair", f"{r['pair_flops'] / 1e6:,.3f} MFLOP", r["attention"]),
        (
            "KV bytes per token",
            f"{kv1:,.0f} B",
            f"per GPU at tp {comp.tp}: {m.kv_bytes_per_token(comp.tp) / comp.pp:,.0f} B"
            + (f" (1/{comp.pp} of the layers)" if comp.pp > 1 else ""),
        ),
        (
            "KV bytes per 16-token block",
            f"{kv1 * 16 / 2**20:,.3f} MiB",
            f"per GPU: {m.kv_bytes_per_token(comp.tp) / comp.pp * 16 / 2**20:,.3f} MiB",
        ),
        (
            "weights per GPU",
            _gb(comp.weights_per_gpu),
            f"dense / {comp.tp} + experts / {comp.expert_shards}"
            + (f", over {comp.pp} pipeline stages" if comp.pp > 1 else ""),
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
        op_row("dense", "dense GEMMs", "tokens", comp.dtype),
        op_row("experts", "expert GEMMs", "tokens/expert", comp.expert_kernel)
        if comp.moe
        else ("expert GEMMs", "none", "a dense model"),
        op_row("attention", "attention", "keys", "bf16"),
        (
            "collectives per step",
            f"{o['collectives']} x {o['collective_latency'] * 1e6:g} us",
            f"over {link} at {o['comm_bandwidth'] / 1e9:,.0f} GB/s per GPU",
        ),
        *(
            [
                (
                    "pipeline hand-offs",
                    f"{comp.pp - 1} per step, {comp.crossing_hops} over the network",
                    f"{r['pp_bytes_per_token']:,.0f} B a token (hidden states and residual, "
                    f"BF16) at {o['stage_bandwidth'] / 1e9:,.0f} GB/s per GPU; one batch "
                    "in flight (throughput under load: a lower bound)",
                )
            ]
            if comp.pp > 1
            else []
        ),
        (
            "host per step",
            f"{o['cpu_step'] * 1e3:g} ms + {o['cpu_request'] * 1e6:g} us a request",
            f"launches: {o['kernels']} kernels x {o['eager_launch'] * 1e6:g} us eager, "
            f"x {o['kernel_launch'] * 1e6:g} us compiled, "
            f"{o['graph_replay'] * 1e3:.2f} ms graphs (steps <= {o['graph_max_tokens']} tokens)",
        ),
        (
            "frontend",
            f"{comp.frontend_seconds(1024) * 1e3:.2f} ms at 1k, "
            f"{comp.frontend_seconds(65536) * 1e3:.1f} ms at 64k",
            "API server, tokenizer, prefix hashing, first token out (engine.frontend)",
        ),
        (
            "host link",
            f"{comp.host_link / 1e9:,.1f} GB/s each way",
            f"{g.host_link} {g.host_link_per_direction / 1e9:g} GB/s x {a.v('host_link_frac'):g}"
            f" ({a['host_link_frac'].mark})",
        ),
        ("lone 16k prefill", f"{t16:.3f} s", f"{per_step:,}-token steps ({rate:,.0f} tokens/s)"),
        ("lone 16k by part", part_text, "summed over its steps; frontend in and out"),
        (
            "B* (break-even tier bandwidth)",
            f"{b_star / 1e9:,.2f} GB/s",
            "KV bytes per token x 16k prefill rate",
        ),
    ]
    return rows
